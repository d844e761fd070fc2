"""Command line: ``subagents validate | demo | ...``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    demo.add_argument("--script", type=Path, help="the recorded conversation to play "
                      "(default: <project>/demo.yml)")
    demo.add_argument("--structure", action="store_true",
                      help="only print the project's flows and agents")
    shell = sub.add_parser("shell", help="talk to the assistant in the terminal")
    _project_arg(shell)
    shell.add_argument("--debug", action="store_true", help="show tool calls and slot changes")
    serve = sub.add_parser("serve", help="serve the HTTP API (REST and SSE streaming)")
    _project_arg(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=5005)
    serve.add_argument("--token", default=None,
                       help="bearer token required on every route but /health "
                            "(default: $SUBAGENTS_TOKEN)")
    serve.add_argument("--a2a", nargs="?", const="", default=None, metavar="AGENTS",
                       help="also publish sub agents over A2A at /a2a/<name>/ (all, or a "
                            "comma-separated list)")
    test = sub.add_parser("test", help="run conversation tests (default: tests/e2e/)")
    test.add_argument("paths", nargs="*", type=Path, help="fixture files or folders")
    _project_arg(test)
    test.add_argument("--junit", type=Path, help="write JUnit XML to this file")
    test.add_argument("-k", dest="pattern", help="only test cases whose name contains this")
    test.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
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


def cmd_structure(project_dir: Path) -> int:
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


def cmd_test(args: argparse.Namespace) -> int:
    import asyncio

    from .testing.e2e import Runner
    from .testing.fixtures import discover, load_file
    from .testing.report import Progress, case_line, failure_text, summary, write_junit

    project = args.project.resolve()
    paths = args.paths or [project / "tests" / "e2e"]
    files = discover([p if p.is_absolute() else Path.cwd() / p for p in paths])
    if not files:
        print(f"no test files found in {', '.join(str(p) for p in paths)}", file=sys.stderr)
        return 1
    cases, issues = [], []
    for path in files:
        try:
            shown = str(path.relative_to(project))
        except ValueError:
            shown = str(path)
        loaded = load_file(path, display=shown)
        cases += loaded.cases
        issues += loaded.issues
    if issues:
        for issue in issues:
            print(issue.format(), file=sys.stderr)
        print(f"{len(issues)} error(s) in the test files.", file=sys.stderr)
        return 1
    if args.pattern:
        cases = [c for c in cases if args.pattern in c.name]

    async def run_all() -> list[Any]:
        results = []
        progress = Progress(len(cases))
        async with Runner(project) as runner:
            for case in cases:
                result = await runner.run_case(case)
                results.append(result)
                progress.tick()
                print(case_line(result), flush=True)
                if args.fail_fast and not result.passed:
                    break
        progress.close()
        return results

    results = asyncio.run(run_all())
    failed = [r for r in results if not r.passed]
    for result in failed:
        print("\n" + failure_text(result))
    if args.junit:
        write_junit(results, args.junit)
    print(summary(results))
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .logs import configure_logging

    configure_logging(args.log_level)
    if args.command == "validate":
        return cmd_validate(args.project)
    if args.command == "demo":
        if args.structure:
            return cmd_structure(args.project)
        from .demo.player import play

        return play(args.project, args.script)
    if args.command == "shell":
        from .shell import run_shell

        return run_shell(args.project, debug=args.debug)
    if args.command == "serve":
        import os

        from .dialogue.processor import Assistant
        from .server import serve

        serve(Assistant.load(args.project), host=args.host, port=args.port,
              token=args.token or os.environ.get("SUBAGENTS_TOKEN"),
              a2a_agents=None if args.a2a is None else [
                  n.strip() for n in args.a2a.split(",") if n.strip()])
        return 0
    if args.command == "test":
        return cmd_test(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
