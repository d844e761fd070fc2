"""The built-in ``read_resource`` tool: lets the agent read what an MCP server exposes as resources
(the targets of ``resource_link`` results, listed resources, URIs built from resource templates).

Offered for a server only when ``resources: true`` is set on it in ``endpoints.yml``, the server
declares the resources capability, and the agent's include/exclude lists allow the name
``read_resource`` for that server.
"""

from __future__ import annotations

from typing import Any

import structlog

from subagents.config.sub_agent import McpServerRef
from subagents.mcp.pool import MCPPool
from subagents.tools.base import CallContext, Tool
from subagents.types import AgentToolResult, AgentToolSchema

log = structlog.get_logger("subagents.tools")

READ_RESOURCE = "read_resource"


def _allowed(ref: McpServerRef) -> bool:
    if ref.include_tools is not None:
        return READ_RESOURCE in ref.include_tools
    return not (ref.exclude_tools and READ_RESOURCE in ref.exclude_tools)


async def resource_tool(pool: MCPPool, ref: McpServerRef) -> Tool | None:
    """The ``read_resource`` tool for ``ref``'s server, or None when it is not offered."""
    conn = pool.connection(ref.name)
    if not conn.config.resources or not _allowed(ref):
        return None
    if conn.lists_only:  # resources would be read with the operator's account, not the user's
        log.info("mcp.resources.per_user_unsupported", server=ref.name)
        return None
    try:
        if not await conn.offers_resources():
            return None
        uris, templates = await conn.resources()
    except Exception as exc:  # noqa: BLE001 - a server that cannot list offers no tool
        log.warning("mcp.resources.unavailable", server=ref.name, error=str(exc))
        return None
    lines = [f"Read a resource of the {ref.name!r} service by its URI, for example a resource "
             "link another tool returned."]
    if uris:
        lines.append("Known resources: " + ", ".join(uris))
    if templates:
        lines.append("URI templates (fill in the {placeholders}): " + ", ".join(templates))
    schema = AgentToolSchema(
        name=READ_RESOURCE, description="\n".join(lines), strict=False,
        parameters={"type": "object", "required": ["uri"],
                    "properties": {"uri": {"type": "string",
                                           "description": "The resource URI to read."}}})

    async def run(arguments: dict[str, Any], ctx: CallContext) -> AgentToolResult:
        return await conn.read_resource(str(arguments.get("uri") or ""), timeout=ctx.timeout)

    return Tool(schema=schema, run=run, source=f"mcp:{ref.name}", read_only=True)
