"""What ``subagents shell`` and ``serve`` print when the assistant cannot start.

An A2A agent whose remote side does not answer stops the start-up. The message then fits on one
screen: which agent, why, and what to start. The "what" comes from the project itself, the
comment at the top of the agent's ``config.yml`` (where the example assistant says which demo
server to run), since only the project knows where its remote agents come from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subagents.exceptions import ConfigIssue, SubagentsError

_MAX_NOTE_LINES = 12
UNREACHABLE_CODES = frozenset({"agent.a2a.card_unreachable", "agent.a2a.card_not_found",
                               "agent.a2a.unreachable"})


def startup_error_text(command: str, exc: SubagentsError, paths: Any) -> str:
    """The text to print for ``exc``, an error that ended ``command``."""
    agent = getattr(exc, "agent_name", None)
    issue = getattr(exc, "issue", None)
    if isinstance(issue, ConfigIssue):  # already "file:line: error [code] key: ..."
        return f"subagents {command}: {issue.format()}"
    if exc.code not in UNREACHABLE_CODES or agent is None:
        return f"subagents {command}: error [{exc.code}]: {exc}"
    lines = [f"subagents {command}: the assistant cannot start: its A2A agent {agent!r} "
             "cannot be reached.", "", f"  [{exc.code}] {exc}", ""]
    config, note = _agent_note(paths, str(agent))
    if note:
        lines.append(f"The remote agent must answer before the assistant starts. {config} says:")
        lines += [f"    {line}" for line in note]
    else:
        lines.append("Start the remote agent (or point configuration.agent_card of "
                     f"{config or 'the agent'} at one that runs), then try again.")
        lines.append("Offline, `subagents demo` and `subagents test` can answer for it from an "
                     "a2a_script (see docs/conversation-tests.md).")
    return "\n".join(lines)


def _agent_note(paths: Any, agent: str) -> tuple[str | None, list[str]]:
    """(the agent's config file, the comment lines at its top) when they can be found."""
    folder = getattr(paths, "sub_agents", None)
    root = getattr(paths, "root", None)
    if not isinstance(folder, Path) or not folder.is_dir():
        return None, []
    from subagents._yaml import YamlSyntaxError, load_yaml

    for config in sorted(folder.glob("*/config.yml")):
        try:
            data = load_yaml(config).data
        except (YamlSyntaxError, OSError):
            continue
        section = data.get("agent") if isinstance(data, dict) else None
        if not isinstance(section, dict) or section.get("name") != agent:
            continue
        shown = config.relative_to(root) if isinstance(root, Path) and \
            root in config.parents else config
        return str(shown), _leading_comment(config.read_text(encoding="utf-8"))
    return None, []


def _leading_comment(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return lines[:_MAX_NOTE_LINES]


def format_model_problems(problems: list[Any], *, project_dir: str) -> str:
    """One screen: what is wrong with which model, then the fixes for those causes only."""
    lines = ["subagents: the assistant cannot reach its model(s), so it would fail on the "
             "first message.", ""]
    for problem in problems:
        lines.append(f"  [{problem.code}] model {problem.model!r} at {problem.endpoint} "
                     f"(used by {', '.join(problem.callers)}):")
        lines.append(f"      {problem.message}")
    fixes: list[str] = []
    for problem in problems:
        for fix in _fixes(problem, project_dir):
            if fix not in fixes:
                fixes.append(fix)
    fixes.append("or play a scripted conversation, no model needed:  subagents demo  (or "
                 "subagents shell --script demo.yml to type the messages yourself)")
    lines += ["", "Fix it:" if len(fixes) == 1 else "Fix it one of these ways:"]
    lines += [f"  {number}. {fix}" for number, fix in enumerate(fixes, 1)]
    lines.append("(--no-model-check skips this check.)")
    return "\n".join(lines)


def _fixes(problem: Any, project_dir: str) -> list[str]:
    """What fixes ``problem``, by its cause."""
    from urllib.parse import urlsplit

    from subagents.server.security import is_loopback

    endpoints = f"{project_dir.rstrip('/')}/endpoints.yml"
    address = urlsplit(problem.endpoint)
    host, port = address.hostname or "", address.port or (
        443 if address.scheme == "https" else 80)
    cause = problem.cause
    if cause == "key_missing":
        return ["set the key:  export OPENAI_API_KEY=sk-...  (or the variable named by api_key "
                f"in {endpoints})",
                f"use a local OpenAI-compatible server: set api_base on the models in "
                f"{endpoints}, e.g. api_base: http://127.0.0.1:11434/v1 (Ollama), and start it"]
    if cause == "extra_missing":
        return ["install the providers extra, which reaches this provider through LiteLLM:  "
                "pip install 'subagents[providers]'"]
    if cause == "key_refused":
        return [f"the key was refused by {problem.endpoint}: check the key in OPENAI_API_KEY "
                f"(or in the variable named by api_key in {endpoints})"]
    if cause == "dns":
        return [f"the host name {host!r} could not be resolved: check the network connection "
                f"and DNS, or the host in api_base in {endpoints}"]
    if cause == "refused" and is_loopback(host):
        hint = " (for example `ollama serve` listens on 11434)" if port == 11434 else ""
        return [f"start the model server that should listen on {host}:{port}{hint}, or "
                f"correct the port in api_base in {endpoints}"]
    if cause == "refused":
        return [f"nothing accepts connections at {host}:{port}: check that the server runs "
                f"and that api_base in {endpoints} is right"]
    if cause == "timeout":
        return [f"{problem.endpoint} did not answer in time: check the network, or api_base "
                f"in {endpoints}"]
    return [f"check api_base of the model in {endpoints}"]
