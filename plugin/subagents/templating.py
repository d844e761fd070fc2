"""Response templates: ``{name}`` placeholders and sandboxed Jinja, checked and rendered.

Imports nothing else of ours, so the project loader can check templates with the same rules the
runtime renders them with.

* **Format templates** (the default): ``{name}`` is replaced by the value of ``name`` when
  ``name`` is known (a slot that is not set gives ``None``, as Rasa's interpolation does); a
  placeholder naming nothing known stays as written; ``{{`` and ``}}`` are literal braces.
* **Jinja templates** (``metadata: {template: jinja}``): rendered in Jinja's sandbox; unknown
  names render empty; a template that fails to render is kept as written.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import structlog

log = structlog.get_logger("subagents.templating")

__all__ = ["TemplateParseError", "format_placeholders", "jinja_variables", "render_format",
           "render_jinja"]

_FORMAT = re.compile(r"\{\{|\}\}|\{([^\n{}]+?)\}")


class TemplateParseError(ValueError):
    """A Jinja template does not parse.

    Attributes:
        code: Stable error code, ``template.syntax``.
        line: 1-based line of the problem inside the template, when known.
        reason: What is wrong.
    """

    code = "template.syntax"

    def __init__(self, reason: str, *, line: int | None = None) -> None:
        super().__init__(f"{reason} (line {line})" if line is not None else reason)
        self.reason = reason
        self.line = line


def format_placeholders(text: str) -> list[str]:
    """The names of the ``{name}`` placeholders of a format template, in order, once each."""
    names: list[str] = []
    for match in _FORMAT.finditer(text):
        name = match.group(1)
        if name is not None and name.strip() not in names:
            names.append(name.strip())
    return names


def render_format(text: str, values: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders with ``values``.

    Args:
        text: The text, e.g. ``"Booked in {city}."``; ``{{`` and ``}}`` are literal braces.
        values: Values by name. A name that is present is filled in even when its value is
            None (``None``, as Rasa writes an unset slot); a name that is absent stays as
            written.

    Returns:
        The filled-in text.
    """
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key is None:
            return match.group(0)[0]
        name = key.strip()
        return str(values[name]) if name in values else match.group(0)

    return _FORMAT.sub(replace, text)


@functools.cache
def sandbox() -> Any:
    """The sandboxed Jinja environment templates are parsed and rendered in."""
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment()


@functools.lru_cache(maxsize=512)
def _compiled(text: str) -> Any:
    return sandbox().from_string(text)


def jinja_variables(text: str) -> set[str]:
    """The top-level names a Jinja template reads (``context.x`` reads ``context``).

    Raises:
        TemplateParseError: The template does not parse.
    """
    from jinja2 import TemplateSyntaxError, meta

    try:
        return set(meta.find_undeclared_variables(sandbox().parse(text)))
    except TemplateSyntaxError as exc:
        raise TemplateParseError(exc.message or "syntax error", line=exc.lineno) from exc


def render_jinja(text: str, values: Mapping[str, Any]) -> str:
    """Render ``text`` as a sandboxed Jinja template; on any error the text is kept as written."""
    try:
        return str(_compiled(text).render(**values))
    except Exception as exc:  # noqa: BLE001 - a bad template must not end the turn
        log.warning("template.render_failed", error=str(exc)[:200])
        return text
