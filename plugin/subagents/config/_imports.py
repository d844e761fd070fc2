"""Import custom code (agent classes, actions) from a project folder."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from subagents import rasa_compat


class project_on_path:  # noqa: N801 - used as a context manager
    """Put the project folder first on ``sys.path`` (custom modules resolve as in Rasa)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve())

    def __enter__(self) -> None:
        if self.root in sys.path:
            sys.path.remove(self.root)
        sys.path.insert(0, self.root)

    def __exit__(self, *exc: object) -> None:
        return None


def _inside(module: Any, root: str) -> bool:
    paths = [getattr(module, "__file__", None), *list(getattr(module, "__path__", []) or [])]
    return any(p and str(Path(p).resolve()).startswith(root) for p in paths)


def import_from_project(root: Path, dotted: str) -> Any:
    """Import ``dotted`` (a module) from the project folder ``root``.

    A package of the same top-level name cached from another project folder (several projects
    loaded in one process) is dropped first, so the module always comes from ``root``.
    """
    resolved = str(root.resolve())
    top = dotted.split(".")[0]
    cached = sys.modules.get(top)
    if cached is not None and not _inside(cached, resolved) and \
            (Path(resolved) / top).exists():
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()
    rasa_compat.activate()  # Rasa's import paths resolve to ours unless Rasa is installed
    with project_on_path(root):
        return importlib.import_module(dotted)
