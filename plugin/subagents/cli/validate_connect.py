"""``subagents validate --connect``: the checks that need the project's MCP servers running.

Each server that a flow's MCP tool step calls, or whose tools an agent's ``include_tools`` or
``exclude_tools`` names, is started (stdio) or connected (HTTP/SSE) once,
concurrently, and asked for its tools; every step whose tool the server does not list is an
error with the step's file, line and key. A server that cannot be reached gives a warning and
its steps stay unchecked: validation never fails because a server is down.
"""

from __future__ import annotations

import asyncio
import dataclasses

import structlog

from subagents.config._tool_step_check import (
    ToolStepRef,
    unknown_tool_issues,
    unreachable_issue,
)
from subagents.config.project import Project
from subagents.exceptions import ConfigIssue

log = structlog.get_logger("subagents.validate")


async def _list_tools(project: Project, server: str) -> list[str] | str:
    """The tool names of ``server``, or why they could not be listed."""
    from subagents.mcp.connection import MCPServerConnection

    config = project.endpoints.mcp_server(server)
    if config is None:  # already reported as flow.call.unknown_mcp_server
        return "it is not defined in endpoints.yml"
    connection = MCPServerConnection(config, root=project.root, endpoints=project.endpoints)
    try:
        async with asyncio.timeout(config.timeout * 2):
            await connection.start(attempts=1)
            return [tool.name for tool in await connection.tools()]
    except Exception as exc:  # noqa: BLE001 - any failure is a warning, never a crash
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        await connection.close()


AGENT_UNKNOWN_TOOL = "agent.validation.mcp.unknown_tool"


def agent_tool_refs(project: Project) -> list[ToolStepRef]:
    """Every tool an agent's ``include_tools``/``exclude_tools`` names, with where it is named."""
    from subagents._yaml import YamlSyntaxError, load_yaml

    refs = []
    for name, spec in project.agents.items():
        try:
            doc = load_yaml(project.root / spec.file, display=spec.file)
        except (YamlSyntaxError, OSError):
            doc = None
        for index, server in enumerate(spec.config.connections.mcp_servers or []):
            for key in ("include_tools", "exclude_tools"):
                for position, tool in enumerate(getattr(server, key) or []):
                    loc = ("connections", "mcp_servers", index, key, position)
                    line = doc.line_of(loc) if doc is not None else None
                    refs.append(ToolStepRef(name, key, server.name, tool, spec.file, line,
                                            f"connections.mcp_servers[{index}].{key}"))
    return refs


async def _check(project: Project) -> list[ConfigIssue]:
    filters = agent_tool_refs(project)
    servers = sorted({ref.server for ref in [*project.tool_steps, *filters]})
    listed = await asyncio.gather(*(_list_tools(project, name) for name in servers))
    offered: dict[str, list[str]] = {}
    issues: list[ConfigIssue] = []
    for server, outcome in zip(servers, listed, strict=True):
        if isinstance(outcome, str):
            log.info("validate.mcp_server_unreachable", server=server, error=outcome)
            issues.append(unreachable_issue(server, outcome, [
                *project.tool_steps, *(r for r in filters if r.server == server)]))
        else:
            offered[server] = outcome
    source = "the tools the server lists"
    agent_issues = [dataclasses.replace(issue, code=AGENT_UNKNOWN_TOOL)
                    for issue in unknown_tool_issues(filters, offered, source)]
    return [*unknown_tool_issues(project.tool_steps, offered, source), *agent_issues, *issues]


def connected_issues(project: Project) -> list[ConfigIssue]:
    """Check every MCP tool step of ``project``, and every tool an agent's ``include_tools`` or
    ``exclude_tools`` names, against the tools its server lists.

    Returns:
        ``flow.call.unknown_mcp_tool`` and ``agent.validation.mcp.unknown_tool`` errors and
        ``flow.call.mcp_server_unreachable`` warnings; empty when nothing names a tool.
    """
    if not project.tool_steps and not agent_tool_refs(project):
        return []
    from subagents.cli import interrupt

    return interrupt.run(_check(project))
