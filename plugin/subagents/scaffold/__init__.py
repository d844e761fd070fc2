"""``subagents init``: write a new, runnable assistant project from a bundled template.

Each template is a folder under ``templates/`` shipped as package data. Files ending in
``.tmpl`` lose that suffix when written and get ``{{project_name}}`` and ``{{template}}``
filled in (Python files are stored that way so that packaging never mistakes them for
modules); ``gitignore.tmpl`` becomes ``.gitignore``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

DEFAULT_TEMPLATE = "support"
TEMPLATES: dict[str, str] = {
    "support": "an online shop's support assistant: a general-purpose agent answering order "
               "questions, a task agent opening returns, a stdio MCP server, tests, a demo",
    "minimal": "one flow calling one general-purpose agent with a small weather MCP server, "
               "tests, a demo",
}
_SUFFIX = ".tmpl"
_RENAMES = {"gitignore": ".gitignore"}


class ScaffoldError(Exception):
    """The project cannot be written (unknown template, folder not empty)."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Scaffold:
    """What :func:`create_project` wrote."""

    root: Path
    template: str
    files: list[Path]


def _walk(folder: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                         Traversable]]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            found += _walk(entry, (*prefix, entry.name))
        else:
            found.append(((*prefix, entry.name), entry))
    return found


def _target_name(name: str) -> tuple[str, bool]:
    """File name on disk and whether the placeholders are filled in."""
    if not name.endswith(_SUFFIX):
        return name, False
    stem = name[: -len(_SUFFIX)]
    return _RENAMES.get(stem, stem), True


def create_project(target: Path, template: str = DEFAULT_TEMPLATE, *,
                   force: bool = False) -> Scaffold:
    """Write the template's files into ``target`` (created if missing).

    Args:
        target: The project folder.
        template: One of :data:`TEMPLATES`.
        force: Write into a folder that already has files (same-named files are replaced,
            others are kept).

    Returns:
        The folder, the template and the written files.

    Raises:
        ScaffoldError: ``init.unknown_template`` or ``init.folder_not_empty``.
    """
    if template not in TEMPLATES:
        raise ScaffoldError(f"unknown template {template!r}; choose one of "
                            f"{', '.join(TEMPLATES)}", code="init.unknown_template")
    if target.exists() and not target.is_dir():
        raise ScaffoldError(f"{target} exists and is not a folder", code="init.not_a_folder")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise ScaffoldError(f"{target} is not empty; choose an empty or new folder, or pass "
                            "--force to write into it anyway", code="init.folder_not_empty")
    source = resources.files("subagents.scaffold").joinpath("templates", template)
    name = target.resolve().name
    written = []
    for parts, entry in _walk(source):
        filename, render = _target_name(parts[-1])
        path = target.joinpath(*parts[:-1], filename)
        path.parent.mkdir(parents=True, exist_ok=True)
        if render:
            text = entry.read_text(encoding="utf-8")
            text = text.replace("{{project_name}}", name).replace("{{template}}", template)
            path.write_text(text, encoding="utf-8")
        else:
            path.write_bytes(entry.read_bytes())
        written.append(path)
    return Scaffold(root=target, template=template, files=written)
