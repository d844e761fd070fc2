"""Print structural figures of the package, to compare before and after a refactor.

Figures: methods and lines of the agent base class and of the flow executor (classes are found by
name anywhere in the package), the longest function, import cycles between the package's
top-level modules, and the number of ``dict[str, Any]`` annotations.

Run: ``python benchmarks/structure_report.py [package_dir]``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "plugin" / "subagents"
CLASSES = ("MCPBaseAgent", "FlowExecutor")


def _modules(root: Path) -> dict[str, ast.Module]:
    return {str(p.relative_to(root)): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(root.rglob("*.py"))}


def _class_figures(trees: dict[str, ast.Module], name: str) -> str:
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name:
                methods = [n for n in node.body
                           if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                return f"{name} ({path}): {len(methods)} methods, {lines} lines"
    return f"{name}: not found"


def _longest_function(trees: dict[str, ast.Module]) -> str:
    best = (0, "")
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > best[0]:
                    best = (lines, f"{path}:{node.lineno} {node.name}")
    return f"longest function: {best[1]} ({best[0]} lines)"


def _unit(path: str) -> str:
    """The top-level unit a file belongs to: a subpackage or a top-level module."""
    first = path.split("/")[0]
    return first.removesuffix(".py")


def _imported_units(path: str, tree: ast.Module) -> set[str]:
    package = ["subagents", *path.removesuffix(".py").split("/")][:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [".".join(target)]
            if len(target) == 1 and target[0] == "subagents":
                names = [f"subagents.{a.name}" for a in node.names]
            elif node.level and not node.module:
                names = [".".join([*target, a.name]) for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "subagents" and len(parts) > 1:
                found.add(parts[1])
    return found


def _cycles(trees: dict[str, ast.Module]) -> list[tuple[str, str]]:
    graph: dict[str, set[str]] = {}
    for path, tree in trees.items():
        unit = _unit(path)
        graph.setdefault(unit, set()).update(_imported_units(path, tree) - {unit})
    pairs = set()
    for unit, targets in graph.items():
        for target in targets:
            if unit in _reachable(graph, target):
                pairs.add(tuple(sorted((unit, target))))
    return sorted(pairs)  # type: ignore[arg-type]


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        unit = todo.pop()
        for target in graph.get(unit, ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def report(root: Path = PACKAGE) -> list[str]:
    """The figures, one per line."""
    trees = _modules(root)
    lines = [_class_figures(trees, name) for name in CLASSES]
    lines.append(_longest_function(trees))
    cycles = _cycles(trees)
    lines.append(f"import cycles between top-level modules: {len(cycles)}"
                 + (" (" + ", ".join(f"{a}<->{b}" for a, b in cycles) + ")" if cycles else ""))
    count = sum(p.read_text(encoding="utf-8").count("dict[str, Any]")
                for p in root.rglob("*.py"))
    lines.append(f"'dict[str, Any]' occurrences: {count}")
    return lines


if __name__ == "__main__":
    print("\n".join(report(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)))
