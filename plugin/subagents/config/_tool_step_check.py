"""MCP tool steps checked against the tools their server offers.

A flow step ``call: <tool>`` + ``mcp_server: <name>`` fails at run time when the server does not
offer the tool. ``validate`` catches that early in two ways: against the tool names declared
under ``tools:`` of the server's entry in endpoints.yml (always, no connection needed), and
against the list the server itself returns (``validate --connect``). Either gives an error with
the step's file, line and key and the closest tool name.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from subagents._yaml import YamlDoc
from subagents.config.flows import Flow
from subagents.exceptions import ConfigIssue

UNKNOWN_TOOL = "flow.call.unknown_mcp_tool"
SERVER_UNREACHABLE = "flow.call.mcp_server_unreachable"


@dataclass(frozen=True)
class ToolStepRef:
    """Where a flow calls an MCP tool directly, with the position of its ``call`` key."""

    flow: str
    step: str
    server: str
    tool: str
    file: str
    line: int | None
    key: str | None


def tool_step_refs(flows: Mapping[str, Flow], docs: Mapping[str, YamlDoc]) -> list[ToolStepRef]:
    """Every MCP tool step of ``flows`` (flows without a loaded document are left out)."""
    refs = []
    for flow_id, flow in flows.items():
        doc = docs.get(flow_id)
        if doc is None:
            continue
        for step in flow.steps:
            if step.kind != "call" or not step.model.mcp_server:
                continue
            where = doc.issue("", "", (*step.loc, "call"))
            refs.append(ToolStepRef(flow_id, step.id, str(step.model.mcp_server),
                                    str(step.model.call), where.file or doc.display,
                                    where.line, where.key))
    return refs


def unknown_tool_issues(refs: Iterable[ToolStepRef], offered: Mapping[str, Collection[str]],
                        source: str) -> list[ConfigIssue]:
    """An error for each step whose tool is not among its server's ``offered`` tools.

    Args:
        refs: The MCP tool steps to check.
        offered: Server name -> the names of its tools; steps of other servers are skipped.
        source: Where the tool names come from, for the message (e.g. ``"its tools: list in
            endpoints.yml"``).
    """
    from subagents.config.validation import did_you_mean

    issues = []
    for ref in refs:
        tools = offered.get(ref.server)
        if tools is None or ref.tool in tools:
            continue
        listing = ", ".join(sorted(tools)) or "none"
        issues.append(ConfigIssue(
            UNKNOWN_TOOL, f"MCP server {ref.server!r} has no tool {ref.tool!r} ({source})",
            file=ref.file, line=ref.line, key=ref.key,
            hint=did_you_mean(ref.tool, tools, f"its tools: {listing}")))
    return issues


def unreachable_issue(server: str, reason: str, refs: Iterable[ToolStepRef]) -> ConfigIssue:
    """The warning for a server whose tools could not be listed; names the first step."""
    steps = [r for r in refs if r.server == server]
    first = steps[0] if steps else None
    return ConfigIssue(
        SERVER_UNREACHABLE,
        f"could not list the tools of MCP server {server!r} ({reason}); its "
        f"{len(steps)} MCP tool step(s) were not checked",
        file=first.file if first else "endpoints.yml", line=first.line if first else None,
        key=first.key if first else None,
        hint="start the server, or declare its tool names under 'tools:' in endpoints.yml",
        severity="warning")
