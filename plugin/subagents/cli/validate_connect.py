"""``subagents validate --connect``: the checks that need the project's MCP servers running.

Each server that a flow's MCP tool step calls is started (stdio) or connected (HTTP/SSE) once,
concurrently, and asked for its tools; every step whose tool the server does not list is an
error with the step's file, line and key. A server that cannot be reached gives a warning and
its steps stay unchecked: validation never fails because a server is down.
"""

from __future__ import annotations

import asyncio

import structlog

from subagents.config._tool_step_check import unknown_tool_issues, unreachable_issue
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


async def _check(project: Project) -> list[ConfigIssue]:
    servers = sorted({ref.server for ref in project.tool_steps})
    listed = await asyncio.gather(*(_list_tools(project, name) for name in servers))
    offered: dict[str, list[str]] = {}
    issues: list[ConfigIssue] = []
    for server, outcome in zip(servers, listed, strict=True):
        if isinstance(outcome, str):
            log.info("validate.mcp_server_unreachable", server=server, error=outcome)
            issues.append(unreachable_issue(server, outcome, project.tool_steps))
        else:
            offered[server] = outcome
    return [*unknown_tool_issues(project.tool_steps, offered, "the tools the server lists"),
            *issues]


def connected_issues(project: Project) -> list[ConfigIssue]:
    """Check every MCP tool step of ``project`` against the tools its server lists.

    Returns:
        ``flow.call.unknown_mcp_tool`` errors and ``flow.call.mcp_server_unreachable``
        warnings; empty when the project has no MCP tool steps.
    """
    if not project.tool_steps:
        return []
    from subagents.cli import interrupt

    return interrupt.run(_check(project))
