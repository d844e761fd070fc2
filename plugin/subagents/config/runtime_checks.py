"""What ``validate`` checks beyond the files themselves, so that a valid project also starts.

* Optional features need their extra installed: an A2A agent the ``a2a`` extra, a PostgreSQL
  tracker store ``postgres``, a Redis lock store ``redis``, metrics and tracing switched on by
  their environment variables ``metrics`` and ``tracing`` (input channels are checked with
  ``credentials.yml``). A missing one is an error naming the ``pip install`` line.
* Custom actions run in process need the ``actions`` extra (rasa-sdk, which runs them).
* A stdio MCP server's program must exist: the script that ``python`` runs (relative to the
  server's working folder), or the command itself on ``PATH``. This is a warning when the
  project loads (a conversation test that replays recorded tool results needs no server) and an
  error for the commands that start the servers (:data:`STARTING_CODES`).
* ``endpoints.yml`` missing while the project uses model groups or MCP servers is one error
  saying so, instead of one knock-on error per reference.

Whether an extra is installed is asked with :func:`importlib.util.find_spec`, so nothing is
imported.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subagents.exceptions import ConfigIssue

if TYPE_CHECKING:
    from subagents._yaml import YamlDoc
    from subagents.config.endpoints import EndpointsConfig

EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "actions": ("rasa_sdk",),
    "a2a": ("a2a.client", "a2a.server"),
    "postgres": ("asyncpg",),
    "redis": ("redis",),
    "metrics": ("prometheus_client",),
    "tracing": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "socketio": ("socketio", "jwt"),
    "slack": ("slack_sdk",),
    "telegram": ("telegram",),
    "twilio": ("twilio",),
    "oauth": ("cryptography",),
}
"""Each optional extra and the modules it installs (the ones the feature imports)."""
EXTRA_CODE = "project.extra_missing"
PYTHON_COMMANDS = frozenset({"python", "python3"})
"""Stdio commands that mean the interpreter running subagents."""
STARTING_CODES = frozenset({"mcp.stdio.script_not_found", "mcp.stdio.command_not_found"})
"""Warnings when a project is loaded, errors for the commands that start its MCP servers
(``validate``, ``shell``, ``serve``, ``inspect``)."""
ENDPOINTS_REFERENCE_CODES = frozenset({
    "config.model_group.unknown", "agent.validation.llm.unknown_model_group",
    "agent.validation.endpoints.no_mcp_servers", "agent.validation.endpoints.invalid_mcp_server",
    "flow.call.unknown_mcp_server",
})
"""Errors that only say "not defined in endpoints.yml"."""


def missing_module(extra: str) -> str | None:
    """The first module of ``extra`` that is not installed, or None when all are."""
    for name in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package is missing
            found = False
        if not found:
            return name
    return None


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return f"pip install 'subagents[{extra}]'"


def extra_issue(extra: str, feature: str, *, file: str | None, line: int | None = None,
                key: str | None = None, code: str = EXTRA_CODE) -> ConfigIssue | None:
    """An error when ``extra`` (needed by ``feature``) is not installed, else None."""
    module = missing_module(extra)
    if module is None:
        return None
    return ConfigIssue(code, f"{feature} needs the {extra!r} extra, which is not installed "
                       f"(no module {module!r})", file=file, line=line, key=key,
                       hint=install_hint(extra))


def store_issues(endpoints: EndpointsConfig, doc: YamlDoc | None) -> list[ConfigIssue]:
    """The extras the tracker and lock stores of ``endpoints.yml`` need."""
    if doc is None:
        return []
    issues: list[ConfigIssue | None] = []
    tracker = endpoints.tracker_store.model_dump() if endpoints.tracker_store else {}
    url = str(tracker.get("url") or "")
    if str(tracker.get("type") or "sql").lower() == "sql" and (
            url.startswith("postgres") or str(tracker.get("dialect") or "").startswith(
                "postgres")):
        issues.append(extra_issue("postgres", "a PostgreSQL tracker_store", file=doc.display,
                                  line=doc.line_of(("tracker_store",)), key="tracker_store"))
    lock = endpoints.lock_store.model_dump() if endpoints.lock_store else {}
    if str(lock.get("type") or "").lower() == "redis":
        issues.append(extra_issue("redis", "a Redis lock_store", file=doc.display,
                                  line=doc.line_of(("lock_store",)), key="lock_store"))
    return [issue for issue in issues if issue is not None]


def observability_issues() -> list[ConfigIssue]:
    """Metrics or tracing switched on by the environment need their extra."""
    issues: list[ConfigIssue | None] = []
    if os.environ.get("SUBAGENTS_METRICS", "").lower() in ("1", "true"):
        issues.append(extra_issue("metrics", "SUBAGENTS_METRICS=true (GET /metrics)",
                                  file="<environment>", key="SUBAGENTS_METRICS"))
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        issues.append(extra_issue("tracing", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (tracing)",
                                  file="<environment>",
                                  key="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    return [issue for issue in issues if issue is not None]


def stdio_issues(endpoints: EndpointsConfig, doc: YamlDoc | None,
                 root: Path) -> list[ConfigIssue]:
    """A stdio MCP server whose script or command does not exist."""
    if doc is None:
        return []
    raw = doc.data.get("mcp_servers") if isinstance(doc.data, dict) else None
    index = {item.get("name"): i for i, item in enumerate(raw if isinstance(raw, list) else [])
             if isinstance(item, dict)}
    issues = []
    for server in endpoints.mcp_servers or []:
        if server.type != "stdio" or not server.command or "${" in server.command:
            continue
        base = ("mcp_servers", index.get(server.name, 0))
        problem = _stdio_problem(server.command, server.args,
                                 root / server.cwd if server.cwd else root)
        if problem is not None:  # a warning here: a test replaying recorded tool results
            code, message, key, hint = problem  # runs without the server (see STARTING_CODES)
            issues.append(doc.issue(code, f"MCP server {server.name!r}: {message}",
                                    (*base, key), hint=hint, severity="warning"))
    return issues


def _stdio_problem(command: str, args: Sequence[str], cwd: Path
                   ) -> tuple[str, str, str, str] | None:
    if command in PYTHON_COMMANDS:
        script = _python_script(args)
        if script is None or "${" in script or (cwd / script).is_file():
            return None
        return ("mcp.stdio.script_not_found",
                f"the script {script!r} does not exist (looked in {cwd})", "args",
                "fix the path: it is relative to the project folder (or the server's cwd)")
    if os.sep in command or "/" in command:
        path = Path(command) if Path(command).is_absolute() else cwd / command
        if path.is_file():
            return None
    elif shutil.which(command) is not None:
        return None
    return ("mcp.stdio.command_not_found", f"the command {command!r} is not found", "command",
            "install it, or give its full path")


def _python_script(args: Sequence[str]) -> str | None:
    """The script ``python ARGS`` runs, or None (``-m module``, ``-c code``, nothing)."""
    options_with_value = {"-W", "-X"}
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-m", "-c", "-"):
            return None
        elif arg in options_with_value:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def endpoints_missing(path: Path, shown: str, issues: list[ConfigIssue]) -> list[ConfigIssue]:
    """``issues`` with the "not defined in endpoints.yml" errors folded into one error saying
    that the file does not exist (when it does not, and there are such errors)."""
    if path.exists():
        return issues
    knock_on = [i for i in issues if i.code in ENDPOINTS_REFERENCE_CODES]
    if not knock_on:
        return issues
    files = sorted({str(i.file) for i in knock_on if i.file})
    missing = ConfigIssue(
        "endpoints.not_found", f"{shown} does not exist, but the project uses model groups or "
        f"MCP servers from it ({len(knock_on)} reference(s), in {', '.join(files)})",
        file=shown, hint="create endpoints.yml with the model_groups and mcp_servers the "
        "project names (subagents init writes one), or pass --endpoints FILE")
    return [missing, *(i for i in issues if i.code not in ENDPOINTS_REFERENCE_CODES)]


def actions_issue(root: Path, module: str) -> list[ConfigIssue]:
    """Custom actions that run in this process (the ``actions`` package) need rasa-sdk."""
    base = root / Path(*module.split("."))
    if not (base.is_dir() or base.with_suffix(".py").is_file()):
        return []
    shown = f"{module.replace('.', '/')}{'' if base.is_dir() else '.py'}"
    issue = extra_issue("actions", f"the custom actions in {shown}", file=shown)
    return [] if issue is None else [issue]


def a2a_issues(agents: dict[str, Any], docs: dict[str, YamlDoc]) -> list[ConfigIssue]:
    """An A2A agent needs the ``a2a`` extra."""
    issues = []
    for name, spec in agents.items():
        if spec.config.agent.protocol.value != "A2A":
            continue
        doc = docs.get(name)
        issue = extra_issue("a2a", f"agent {name!r} (protocol A2A)", file=spec.file,
                            line=doc.line_of(("agent", "protocol")) if doc else None,
                            key="agent.protocol")
        if issue is not None:
            issues.append(issue)
    return issues
