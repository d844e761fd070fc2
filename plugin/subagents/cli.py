"""Command line: ``subagents validate | demo | ...``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__


def _project_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", default=".", type=Path,
                        help="assistant project folder (default: current folder)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="subagents", description=(
        "ReAct sub agents for flow-based assistants."))
    parser.add_argument("--version", action="version", version=f"subagents {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="load the whole project and report every problem")
    _project_arg(validate)
    demo = sub.add_parser("demo", help="run the example assistant with the scripted model")
    _project_arg(demo)
    return parser


def cmd_validate(project_dir: Path) -> int:
    from .config.project import collect_issues

    project, issues = collect_issues(project_dir)
    for issue in issues:
        print(issue.format(), file=sys.stderr if issue.severity == "error" else sys.stdout)
    errors = sum(1 for i in issues if i.severity == "error")
    warnings = len(issues) - errors
    if project is None:
        print(f"{errors} error(s), {warnings} warning(s): the project does not load.",
              file=sys.stderr)
        return 1
    print(f"Project {project.root.resolve().name} is valid: {len(project.agents)} sub agent(s), "
          f"{sum(1 for f in project.flows if not f.startswith('pattern_'))} flow(s), "
          f"{len(project.domain.slots)} slot(s), {warnings} warning(s).")
    return 0


def cmd_demo(project_dir: Path) -> int:
    from .config.project import collect_issues

    project, issues = collect_issues(project_dir)
    if project is None:
        for issue in issues:
            print(issue.format(), file=sys.stderr)
        return 1
    print(f"Assistant project: {project.root.resolve()}")
    for flow in project.flows.values():
        if flow.id.startswith("pattern_"):
            continue
        print(f"  flow {flow.id}: {flow.description}")
        for step in flow.steps:
            extra = ""
            if step.kind == "call" and step.model.call in project.agents:
                kind = "task agent" if step.model.exit_if else "open agent"
                extra = f"  <- {kind}"
                if step.model.exit_if:
                    extra += f" until {' and '.join(step.model.exit_if)}"
            print(f"    - {step.kind}: {step.target}{extra}")
    for spec in project.agents.values():
        servers = ", ".join(spec.config.server_names()) or "no MCP servers"
        print(f"  sub agent {spec.name}: {spec.config.agent.description.strip()} [{servers}]")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .logs import configure_logging

    configure_logging(args.log_level)
    if args.command == "validate":
        return cmd_validate(args.project)
    if args.command == "demo":
        return cmd_demo(args.project)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
