"""Command line: ``subagents init | validate | test | demo | shell | serve``.

Every command reports a broken project as a list of problems (file, line, stable code, fix)
and exits 1, never with a traceback. ``shell`` and ``serve`` check the project's models
before they accept a message.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subagents import __version__
from subagents.cli.index import add_index_command, cmd_index

if TYPE_CHECKING:
    from subagents.config.project import Project

_EPILOG = """\
examples:
  subagents init my_assistant && cd my_assistant
  subagents validate
  subagents test
  subagents demo
  export OPENAI_API_KEY=sk-... && subagents shell
  subagents serve --host 0.0.0.0 --port 5005 --token "$SUBAGENTS_TOKEN"

The global options (-v, --debug, --log-level) may also follow the command.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' line breaks and shows the default of every option that has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        no_default = action.default in (None, True, False, argparse.SUPPRESS, [])
        if "default" in text or no_default or isinstance(action, argparse._CountAction):
            return text
        return text + " (default: %(default)s)"


def _add_global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # On the subcommands the defaults are suppressed, so a flag given before the command is
    # not reset by the subcommand's parser.
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument("-v", "--verbose", action="count", default=default(0),
                       help="more log output: -v for INFO, -vv for DEBUG")
    group.add_argument("--debug", action="store_true", default=default(False),
                       help="debug output: our log events at DEBUG (the libraries' stay at "
                            "WARNING); shell and demo also show slot changes")
    group.add_argument("--debug-libraries", action="store_true", default=default(False),
                       help="also the libraries' debug output (HTTP clients, SQL, MCP, "
                            "uvicorn)")
    group.add_argument("--log-level", default=default(None),
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                       help="log level (overrides -v and --debug); logs go to stderr "
                            "(default: WARNING)")


def _command(sub: Any, name: str, help_text: str, examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".",
        epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
        formatter_class=_Formatter)
    _add_global_flags(parser, top=False)
    return parser


def _project_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", default=Path("."), type=Path, metavar="DIR",
                        help="the assistant project folder")
    # file locations as in Rasa's CLI; relative paths are relative to the project folder
    parser.add_argument("-c", "--config", type=Path, metavar="FILE",
                        help="pipeline config (default: config.yml)")
    parser.add_argument("-d", "--domain", type=Path, metavar="PATH",
                        help="domain file or folder (default: domain.yml, else domain/)")
    parser.add_argument("--data", type=Path, nargs="+", metavar="PATH",
                        help="flow files or folders (default: data); takes every path that "
                             "follows, so give other paths before it")
    parser.add_argument("--endpoints", type=Path, metavar="FILE",
                        help="endpoints (default: endpoints.yml)")
    parser.add_argument("--sub-agents", type=Path, metavar="DIR",
                        help="sub agents folder (default: sub_agents)")


def _paths(args: argparse.Namespace) -> Any:
    """The project's file locations from --project and the Rasa-style location options."""
    from subagents.config.project import ProjectPaths

    return ProjectPaths.resolve(args.project.resolve(), config=args.config, domain=args.domain,
                                data=args.data, endpoints=args.endpoints,
                                sub_agents=args.sub_agents)


def _record_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", action="store_true",
                        help="record every model and tool call of every conversation with its "
                             "tracker, so any conversation can be saved as a test (subagents "
                             "test export, the inspector's Save as test); without it, recording "
                             "is turned on per conversation")


def _model_check_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-model-check", dest="model_check", action="store_false",
                        help="start without first checking that every model has a key and "
                             "its endpoint answers")


def build_parser() -> argparse.ArgumentParser:
    """The ``subagents`` argument parser (every command, option and example)."""
    from subagents.scaffold import DEFAULT_TEMPLATE, TEMPLATES

    parser = argparse.ArgumentParser(
        prog="subagents", formatter_class=_Formatter, epilog=_EPILOG,
        description="ReAct sub agents for flow-based assistants: create, check, test and run "
                    "an assistant project.")
    parser.add_argument("--version", action="version", version=f"subagents {__version__}")
    _add_global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = _command(sub, "init", "create a new assistant project that runs right away", """
        subagents init                      # into the current folder (must be empty)
        subagents init my_assistant --template minimal
        subagents init . --force            # write into a folder that has files""")
    init.add_argument("directory", nargs="?", default=Path("."), type=Path,
                      help="the folder to create or fill")
    init.add_argument("--template", default=DEFAULT_TEMPLATE, choices=sorted(TEMPLATES),
                      help="the starting point: " + "; ".join(
                          f"{name}: {text}" for name, text in TEMPLATES.items()))
    init.add_argument("--force", action="store_true",
                      help="write into a folder that is not empty (files of the same name "
                           "are replaced)")

    validate = _command(sub, "validate", "load the whole project and report every problem", """
        subagents validate
        subagents validate --project path/to/assistant
        subagents validate --connect        # also ask the MCP servers for their tools""")
    _project_arg(validate)
    validate.add_argument("--connect", action="store_true",
                          help="start or connect the MCP servers that flow steps call and check "
                               "each step's tool against the tools they list (a server that "
                               "cannot be reached gives a warning)")

    test = _command(sub, "test", "run conversation tests (default: <project>/tests/e2e/)", """
        subagents test
        subagents test tests/e2e/conversations.yml -k return --fail-fast
        subagents test --junit report.xml
        subagents test export SENDER_ID --out tests/e2e/recorded.yml
        subagents test --repeat 10""")
    test.usage = ("subagents test [PATH ...] [options]\n"
                  "       subagents test export SENDER_ID [--out FILE] [--project DIR]")
    test.description = (
        "Run conversation tests (default: <project>/tests/e2e/).\n\n"
        "subagents test export SENDER_ID writes a conversation recorded in the project's\n"
        "tracker store as a test (to --out FILE, else to stdout); conversations are recorded\n"
        "with serve --record or the inspector.")
    test.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                      help="test files or folders (default: <project>/tests/e2e/, else Rasa's "
                           "<project>/tests/e2e_test_cases.yml); 'export SENDER_ID' exports "
                           "a recorded conversation instead")
    _project_arg(test)
    test.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML to this file")
    test.add_argument("-k", dest="pattern", metavar="PATTERN",
                      help="only test cases whose name contains PATTERN")
    test.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    test.add_argument("--out", type=Path, metavar="FILE",
                      help="with 'test export SENDER_ID': write the test to FILE")
    test.add_argument("--repeat", type=int, default=1, metavar="N",
                      help="run each test case N times and report its pass rate")
    test.add_argument("--live-model", action="store_true",
                      help="ignore llm_script: the configured models answer (recorded tool "
                      "results still replay)")
    test.add_argument("--strict", action="store_true",
                      help="every bot message of a turn must be matched, in order (a file can "
                           "also say strict: true)")

    demo = _command(sub, "demo", "play a recorded conversation with a scripted model (no API "
                                 "key needed)", """
        subagents demo
        subagents demo --script tests/e2e/conversations.yml
        subagents demo --structure          # only list the flows and sub agents""")
    _project_arg(demo)
    demo.add_argument("--script", type=Path, metavar="FILE",
                      help="the conversation test file whose first test case is played "
                           "(default: <project>/demo.yml)")
    demo.add_argument("--structure", action="store_true",
                      help="only print the project's flows, their steps and the sub agents")

    shell = _command(sub, "shell", "talk to the assistant in the terminal", """
        export OPENAI_API_KEY=sk-... && subagents shell
        subagents shell --script demo.yml   # the model answers from the script's llm_script
        subagents shell --project path/to/assistant --debug""")
    _project_arg(shell)
    _model_check_arg(shell)
    shell.add_argument("--script", metavar="FILE[::CASE]", default=None,
                       help="the model answers from the llm_script of a conversation test "
                            "(the file's first test case, or CASE), e.g. demo.yml: no API key "
                            "needed; you type the user's messages")
    shell.add_argument("--hide-tools", dest="show_tools", action="store_false",
                       help="do not show the tool calls (shown as '⚙ tool(args) → result')")

    serve = _command(sub, "serve", "serve the HTTP API (Rasa's REST channel and SSE streaming)",
                     """
        subagents serve                     # http://127.0.0.1:5005
        subagents serve --host 0.0.0.0 --port 8080 --token "$SUBAGENTS_TOKEN"
        curl localhost:5005/webhooks/rest/webhook -H 'Content-Type: application/json' \\
             -d '{"sender": "u1", "message": "hi"}'""")
    _project_arg(serve)
    serve.add_argument("--host", default="127.0.0.1",
                       help="interface to listen on; 0.0.0.0 listens on every interface")
    serve.add_argument("--port", type=int, default=5005, help="TCP port to listen on")
    serve.add_argument("--token", default=None,
                       help="secret required on every route but the health checks, as "
                            "'Authorization: Bearer <token>' or '?token=<token>' "
                            "(default: $SUBAGENTS_TOKEN)")
    _record_arg(serve)
    serve.add_argument("--metrics", action="store_true",
                       default=os.environ.get("SUBAGENTS_METRICS", "").lower() in ("1", "true"),
                       help="serve Prometheus metrics at GET /metrics (extra 'metrics'; also "
                            "on when SUBAGENTS_METRICS=true)")
    serve.add_argument("--otlp-endpoint", metavar="URL",
                       default=os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                       help="export OpenTelemetry traces over OTLP/HTTP to URL, e.g. "
                            "http://127.0.0.1:4318/v1/traces (extra 'tracing'; default: "
                            "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, unset means no tracing)")
    serve.add_argument("--credentials", type=Path, default=None,
                       help="input channels to open (default: <project>/credentials.yml)")
    serve.add_argument("--cors", nargs="*", default=None, metavar="ORIGIN",
                       help="browser origins allowed to call the API, or '*' "
                            "(default: $SUBAGENTS_CORS_ORIGINS; none)")
    serve.add_argument("--a2a", nargs="?", const="", default=None, metavar="AGENTS",
                       help="also publish sub agents over A2A at /a2a/<name>/ (all that flows "
                            "call, or a comma-separated list; extra 'a2a')")
    serve.add_argument("--strict-start", action="store_true",
                       help="stop when a remote A2A agent or MCP server does not answer "
                            "(default: start, report it on /health, reconnect in the "
                            "background)")
    _model_check_arg(serve)

    inspect = _command(sub, "inspect", "serve the API with the inspector page: watch the chat, "
                                       "stack, slots and every agent step live", """
        subagents inspect                   # then open http://127.0.0.1:5005/inspect
        subagents inspect --record          # every conversation can be saved as a test
        subagents inspect --replay tests/e2e/conversations.yml::order_status""")
    _project_arg(inspect)
    inspect.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    inspect.add_argument("--port", type=int, default=5005, help="TCP port to listen on")
    inspect.add_argument("--token", default=None,
                         help="secret the page and the API require; open the page as "
                              "/inspect?token=<token> (default: $SUBAGENTS_TOKEN)")
    inspect.add_argument("--replay", metavar="FILE::CASE", default=None,
                         help="replay a conversation test with its scripted models "
                              "(llm_script) instead of the real ones")
    _record_arg(inspect)
    _model_check_arg(inspect)

    mcp = _command(sub, "mcp", "MCP server tools", """
        subagents mcp login crm             # sign in once to the server named crm""")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", required=True, metavar="MCP_COMMAND")
    mcp_login = _command(mcp_commands, "login", "sign in to an MCP server that needs a user "
                                                "login (OAuth authorization code with PKCE)", """
        subagents mcp login crm
        subagents mcp login crm --project path/to/assistant""")
    mcp_login.add_argument("server", help="the server's name in endpoints.yml")
    _project_arg(mcp_login)
    add_index_command(sub, _command, _project_arg)
    return parser


def _log_level(args: argparse.Namespace) -> str:
    if args.log_level:
        return str(args.log_level)
    if args.debug or args.verbose >= 2:
        return "DEBUG"
    return "INFO" if args.verbose == 1 else "WARNING"


def cmd_init(args: argparse.Namespace) -> int:
    """``subagents init``: write a template project and say what to do next."""
    from subagents.scaffold import ScaffoldError, create_project

    try:
        scaffold = create_project(args.directory, args.template, force=args.force)
    except ScaffoldError as exc:
        print(f"subagents init: error [{exc.code}]: {exc}", file=sys.stderr)
        return 1
    where = scaffold.root.resolve()
    steps = [] if where == Path.cwd().resolve() else [f"cd {scaffold.root}"]
    steps += ["subagents test                 # its conversation tests, with a scripted model",
              "subagents demo                 # play a whole conversation, no API key needed",
              "export OPENAI_API_KEY=sk-...   # or set api_base in endpoints.yml",
              "subagents shell                # talk to it"]
    print(f"Created a {scaffold.template!r} assistant in {where} ({len(scaffold.files)} "
          "files). Next:\n" + "\n".join(f"  {step}" for step in steps))
    return 0


def _print_issues(issues: Sequence[Any]) -> int:
    """Print problems like ``validate`` does; returns the number of errors."""
    for issue in issues:
        print(issue.format(), file=sys.stderr if issue.severity == "error" else sys.stdout)
    return sum(1 for i in issues if i.severity == "error")


def cmd_validate(project_dir: Any, *, connect: bool = False) -> int:
    """``subagents validate``: every problem, one per line; exit 1 on an error.

    With ``connect``, the MCP tool steps are also checked against their servers' tool lists.
    """
    from subagents.config.project import collect_issues

    project, issues = collect_issues(project_dir)
    issues = _as_errors(issues, "validate")
    if any(i.severity == "error" for i in issues):
        project = None
    if project is not None and connect:
        from subagents.cli.validate_connect import connected_issues

        issues = [*issues, *connected_issues(project)]
        if any(i.severity == "error" for i in issues):
            project = None
    errors = _print_issues(issues)
    warnings = len(issues) - errors
    if project is None:
        print(f"{errors} error(s), {warnings} warning(s): the project does not load.",
              file=sys.stderr)
        return 1
    print(f"Project {project.root.resolve().name} is valid: {len(project.agents)} sub agent(s), "
          f"{sum(1 for f in project.flows if not f.startswith('pattern_'))} flow(s), "
          f"{len(set(project.domain.slots) - project.domain.default_slots)} slot(s), "
          f"{warnings} warning(s).")
    return 0


def _as_errors(issues: list[Any], command: str) -> list[Any]:
    """The warnings that stop ``command`` as errors: a stdio MCP server's missing program for
    the commands that start the servers; for ``serve`` and ``validate`` also a channel, metrics
    or tracing whose extra is missing (the other commands do not need them)."""
    import dataclasses

    from subagents.config.credentials import EXTRA_MISSING
    from subagents.config.runtime_checks import STARTING_CODES, observability_issues

    codes = set(STARTING_CODES)
    serving = command in ("serve", "validate")
    if serving:
        codes.add(EXTRA_MISSING)
    return [dataclasses.replace(i, severity="error") if i.code in codes else i
            for i in issues] + (observability_issues() if serving else [])


def cmd_structure(project_dir: Any) -> int:
    """``subagents demo --structure``: the flows, their steps and the sub agents."""
    from subagents.config.project import collect_issues

    project, issues = collect_issues(project_dir)
    if project is None:
        _print_issues(issues)
        return 1
    print(f"Assistant project: {project.root.resolve()}")
    for flow in project.flows.values():
        if flow.id.startswith("pattern_"):
            continue
        print(f"  flow {flow.id}: {flow.description}")
        for step in flow.steps:
            extra = ""
            if step.kind == "call" and step.model.call in project.agents:
                kind = "task agent" if step.model.exit_if else "general-purpose agent"
                extra = f"  <- {kind}"
                if step.model.exit_if:
                    extra += f" until {' and '.join(step.model.exit_if)}"
            print(f"    - {step.kind}: {step.target}{extra}")
    for spec in project.agents.values():
        servers = ", ".join(spec.config.server_names()) or "no MCP servers"
        print(f"  sub agent {spec.name}: {spec.config.agent.description.strip()} [{servers}]")
    return 0


def _default_tests(project: Path) -> Path:
    """``tests/e2e/``, else Rasa's default test file ``tests/e2e_test_cases.yml`` if present."""
    folder = project / "tests" / "e2e"
    rasa_default = project / "tests" / "e2e_test_cases.yml"
    return rasa_default if not folder.exists() and rasa_default.is_file() else folder


def _filtered(cases: list[Any], pattern: str | None) -> list[Any] | None:
    """The cases whose name contains ``pattern`` (-k); None, after saying so, when there are
    cases but none matches."""
    if not pattern or not cases:
        return cases
    matching = [c for c in cases if pattern in c.name]
    if not matching:
        print(f"no test case name contains {pattern!r} (-k); the {len(cases)} test case(s) "
              f"found: {', '.join(c.name for c in cases[:10])}"
              f"{', ...' if len(cases) > 10 else ''}", file=sys.stderr)
        return None
    return matching


def cmd_test(args: argparse.Namespace) -> int:
    """``subagents test``: run conversation test files; exit 1 if one fails."""
    from subagents.testing.e2e import Runner
    from subagents.testing.fixtures import discover, load_files
    from subagents.testing.report import (
        Progress,
        case_line,
        failure_text,
        pass_rates,
        summary,
        write_junit,
    )

    project = args.project.resolve()
    paths = args.paths or [_default_tests(project)]
    files = discover([p if p.is_absolute() else Path.cwd() / p for p in paths])
    if not files:
        print(f"no test files found in {', '.join(str(p) for p in paths)}", file=sys.stderr)
        return 1
    loaded = load_files(files, project)
    cases, issues = loaded.cases, loaded.issues
    for warning in loaded.warnings:
        print(warning.format(), file=sys.stderr)
    if issues:
        for issue in issues:
            print(issue.format(), file=sys.stderr)
        print(f"{len(issues)} error(s) in the test files.", file=sys.stderr)
        return 1
    selected = _filtered(list(cases), args.pattern)
    if selected is None:
        return 1
    cases = selected
    if not cases:
        print("no test cases found (a test file has a top-level test_cases list)",
              file=sys.stderr)
        return 1

    logs = _CaseLogs(args)

    async def run_all() -> list[Any]:
        results = []
        progress = Progress(len(cases) * max(1, args.repeat))
        async with Runner(_paths(args), strict=args.strict, live_model=args.live_model) as runner:
            for case in [c for c in cases for _ in range(max(1, args.repeat))]:
                result = await runner.run_case(case)
                results.append(result)
                logs.take(result)
                progress.tick()
                print(case_line(result), flush=True)
                if args.fail_fast and not result.passed:
                    break
            notices = "".join(f"note: {notice}\n" for notice in runner.notices)
        progress.close()
        print(notices, end="")
        return results

    from subagents.cli import interrupt

    results = interrupt.run(run_all())
    failed = [r for r in results if not r.passed]
    for result in failed:
        print("\n" + failure_text(result) + logs.text(result))
    if args.junit:
        write_junit(results, args.junit)
    print(pass_rates(results), end="")
    print(summary(results))
    return 1 if failed else 0


class _CaseLogs:
    """``subagents test`` keeps the log lines of each test case and shows them with its failure
    only, so passing cases print nothing but their PASSED line (unless -v, --debug or
    --log-level ask for the log as it happens)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import io

        from subagents.logs import configure_logging

        self.by_case: dict[int, str] = {}
        self.buffer: io.StringIO | None = None
        if not (args.verbose or args.debug or args.log_level or args.debug_libraries):
            self.buffer = io.StringIO()
            configure_logging(_log_level(args), json_logs=False, stream=self.buffer)

    def take(self, result: Any) -> None:
        """Keep what was logged while ``result``'s case ran."""
        if self.buffer is not None:
            self.by_case[id(result)] = self.buffer.getvalue()
            self.buffer.seek(0)
            self.buffer.truncate()

    def text(self, result: Any) -> str:
        """The case's log lines, indented under a heading; empty when there were none."""
        lines = self.by_case.get(id(result), "").rstrip().splitlines()
        return "".join(["\n  log while it ran:", *(f"\n    {line}" for line in lines)]) \
            if lines else ""


def _ready_to_run(args: argparse.Namespace) -> Project | None:
    """For shell and serve: the loaded project if it loads and, unless skipped, every model
    answers; None otherwise (the problems are printed)."""
    from subagents.cli.startup_help import format_model_problems
    from subagents.config.project import collect_issues
    from subagents.llm.preflight import check_models

    project, issues = collect_issues(_paths(args))
    issues = _as_errors(issues, args.command)
    project = None if any(i.severity == "error" for i in issues) else project
    errors = _print_issues(issues)
    if project is None:
        print(f"{errors} error(s): the project does not load (subagents validate lists them "
              "too).", file=sys.stderr)
        return None
    if args.model_check and not getattr(args, "script", None):  # a script needs no model
        from subagents.cli import interrupt

        problems = interrupt.run(check_models(project))
        if problems:
            print(format_model_problems(problems, project_dir=str(args.project)),
                  file=sys.stderr)
            return None
    return project


def _enable_observability(args: argparse.Namespace) -> bool:
    from subagents import observability

    wanted = [("metrics", args.metrics, observability.enable_metrics),
              ("tracing", bool(args.otlp_endpoint),
               lambda: observability.enable_tracing(endpoint=args.otlp_endpoint))]
    for extra, on, enable in wanted:
        if not on:
            continue
        try:
            enable()
        except ImportError as exc:
            print(f"subagents serve: error [observability.extra_missing]: {extra} needs the "
                  f"'{extra}' extra ({exc.name} is not installed): "
                  f"pip install 'subagents[{extra}]'", file=sys.stderr)
            return False
    return True


def _run_test(args: argparse.Namespace) -> int:
    """``test``, or ``test export SENDER_ID`` (when no file is named ``export``)."""
    if args.paths and str(args.paths[0]) == "export" and not args.paths[0].exists():
        from subagents.testing.export import cmd_export

        return cmd_export(args.project, [str(p) for p in args.paths[1:]], args.out)
    return cmd_test(args)


def _run_demo(args: argparse.Namespace) -> int:
    """``demo``: play a recorded conversation, or list the project's structure."""
    if args.structure:
        return cmd_structure(_paths(args))
    from subagents.cli import interrupt
    from subagents.demo.player import play

    return play(_paths(args), args.script, runner=interrupt.run)


def _run(args: argparse.Namespace) -> int:
    if args.command == "mcp":
        from subagents.cli.mcp_login import cmd_login

        return cmd_login(args.project, args.server)
    if args.command == "init":
        return cmd_init(args)
    if args.command == "index":
        return cmd_index(_paths(args), rebuild=args.rebuild)
    if args.command == "validate":
        return cmd_validate(_paths(args), connect=args.connect)
    if args.command == "test":
        return _run_test(args)
    if args.command == "demo":
        return _run_demo(args)
    if getattr(args, "record", False):
        from subagents.recording import turn as recording

        recording.enable()
    if args.command == "inspect" and args.replay:
        from subagents.cli.inspector_replay import run_replay

        return run_replay(args.replay, args.project.resolve(), host=args.host, port=args.port,
                          token=args.token or os.environ.get("SUBAGENTS_TOKEN"))
    project = _ready_to_run(args)
    if project is None:
        return 1
    if args.command == "shell":
        from subagents.cli.shell import run_shell

        return run_shell(_paths(args), debug=args.debug, show_tools=args.show_tools,
                         script=args.script)
    return _serve(args, project)


def _serve(args: argparse.Namespace, project: Project) -> int:
    """``serve`` and ``inspect``: the HTTP API until SIGTERM or Ctrl-C."""
    from subagents.channels.registry import load_channels
    from subagents.cli import interrupt
    from subagents.dialogue.processor import Assistant
    from subagents.server.app import serve

    token = args.token or os.environ.get("SUBAGENTS_TOKEN")
    if args.command == "inspect":
        print(f"subagents inspect: the inspector is at http://{args.host}:{args.port}/inspect",
              file=sys.stderr, flush=True)
        with interrupt.serving():
            serve(Assistant.load(_paths(args)), host=args.host, port=args.port, token=token)
        return 0
    if not _enable_observability(args):
        return 1
    channels = load_channels(args.project, args.credentials)
    # the project _ready_to_run loaded and checked: parsing it again would double start-up
    with interrupt.serving():
        serve(Assistant(project), host=args.host, port=args.port, token=token,
              channels=channels, cors_origins=args.cors, strict_start=args.strict_start,
              a2a_agents=None if args.a2a is None else [
                  n.strip() for n in args.a2a.split(",") if n.strip()])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``subagents`` command; returns the exit status."""
    from subagents.cli import interrupt
    from subagents.exceptions import ProjectInvalidError, SubagentsError
    from subagents.logs import configure_logging

    args = build_parser().parse_args(argv)
    interrupt.install()
    configure_logging(_log_level(args),
                      library_level="DEBUG" if args.debug_libraries else None)
    try:
        return _run(args)
    except ProjectInvalidError as exc:
        errors = _print_issues(exc.issues)
        print(f"{errors} error(s): the project does not load.", file=sys.stderr)
    except SubagentsError as exc:
        from subagents.cli.startup_help import startup_error_text

        paths = _paths(args) if isinstance(getattr(args, "project", None), Path) else None
        print(startup_error_text(args.command, exc, paths), file=sys.stderr)
    except KeyboardInterrupt:
        return interrupt.EXIT_INTERRUPTED
    return 1


if __name__ == "__main__":
    sys.exit(main())
