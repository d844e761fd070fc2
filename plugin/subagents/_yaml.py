"""YAML loading that remembers where every key was written (for precise error messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subagents.exceptions import ConfigIssue

Loc = tuple[str | int, ...]


@dataclass
class YamlDoc:
    """A parsed YAML file: plain Python data plus the 1-based line of each key path."""

    path: Path
    data: Any
    lines: dict[Loc, int] = field(default_factory=dict)
    display: str = ""

    def line_of(self, loc: Loc) -> int | None:
        """Line of ``loc``, or of its nearest ancestor that has one."""
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get((), 1)

    def issue(self, code: str, message: str, loc: Loc = (), hint: str | None = None,
              severity: str = "error", key: str | None = None) -> ConfigIssue:
        return ConfigIssue(code=code, message=message, file=self.display or str(self.path),
                           line=self.line_of(loc), key=key if key is not None else dotted(loc),
                           hint=hint, severity=severity)


def dotted(loc: Loc) -> str | None:
    if not loc:
        return None
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _convert(node: Any, loc: Loc, lines: dict[Loc, int]) -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for key, value in node.items():
            try:
                line, _ = node.lc.key(key)
                lines[(*loc, str(key))] = line + 1
            except (KeyError, TypeError):
                pass
            out[str(key)] = _convert(value, (*loc, str(key)), lines)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            try:
                line, _ = node.lc.item(index)
                lines[(*loc, index)] = line + 1
            except (KeyError, TypeError, IndexError):
                pass
            items.append(_convert(value, (*loc, index), lines))
        return items
    if isinstance(node, str):
        return str(node)
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return node


class YamlSyntaxError(Exception):
    def __init__(self, issue: ConfigIssue) -> None:
        super().__init__(issue.format())
        self.issue = issue


def load_yaml(path: Path, display: str | None = None, text: str | None = None) -> YamlDoc:
    """Parse ``path``; raise :class:`YamlSyntaxError` (with file and line) on a syntax error."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    shown = display or str(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise YamlSyntaxError(ConfigIssue("yaml.unreadable", f"cannot read file: {exc}",
                                              file=shown)) from exc
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        node = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or str(exc)).strip()
        code = "yaml.duplicate_key" if "duplicate key" in str(exc) else "yaml.syntax_error"
        raise YamlSyntaxError(ConfigIssue(code, f"invalid YAML: {problem}", file=shown,
                                          line=line, hint="fix the YAML syntax at that line")
                              ) from exc
    except YAMLError as exc:
        raise YamlSyntaxError(ConfigIssue("yaml.syntax_error", f"invalid YAML: {exc}",
                                          file=shown)) from exc
    lines: dict[Loc, int] = {(): 1}
    return YamlDoc(path=path, data=_convert(node, (), lines), lines=lines, display=shown)
