"""MCP tools for one agent: filtered per server by include_tools / exclude_tools (exclusive)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import structlog

from subagents.config.sub_agent import McpServerRef, ToolSettings
from subagents.exceptions import MCPConnectionError, ToolInvocationError, ToolNotAvailableError
from subagents.mcp.connection import MCPTool
from subagents.mcp.identity import session_key, template_values
from subagents.mcp.oauth.consent import CONSENT_CODES
from subagents.mcp.pool import MCPPool
from subagents.tools.base import CallContext, Tool
from subagents.tools.mcp_resources import resource_tool
from subagents.types import AgentInput, AgentToolResult, AgentToolSchema, JsonObject

log = structlog.get_logger("subagents.tools")

MetaHook = Callable[[str, AgentInput], JsonObject]
"""``(server, agent input) -> _meta`` of an MCP tool call."""


def allowed(ref: McpServerRef, tool_name: str) -> bool:
    """An include list (even empty) allows only its tools; else exclude wins."""
    if ref.include_tools is not None:
        return tool_name in ref.include_tools
    return not (ref.exclude_tools and tool_name in ref.exclude_tools)


def build_meta(pool: MCPPool, server: str, agent_input: AgentInput, tool_name: str,
               agent_name: str) -> JsonObject:
    """``meta_map`` (static first, then from_slots) plus the server's ``pre_call_hook``."""
    config = pool.endpoints.mcp_server(server)
    meta: JsonObject = {}
    if config is None:
        return meta
    if config.meta_map is not None:
        meta.update(config.meta_map.static)
        for item in config.meta_map.from_slots:
            slot = agent_input.slot(item.slot)
            meta[item.param] = slot.value if slot is not None else None
    return meta


async def run_pre_call_hook(hook_path: str, context: JsonObject) -> JsonObject:
    """Call a server's ``pre_call_hook`` (dotted path); return the metadata it adds."""
    mod_name, _, func_name = hook_path.rpartition(".")
    hook = getattr(importlib.import_module(mod_name), func_name)
    result = hook(context)
    if inspect.isawaitable(result):
        result = await result
    if hasattr(result, "metadata"):
        result = result.metadata
    if isinstance(result, dict) and "metadata" in result and isinstance(result["metadata"], dict):
        result = result["metadata"]
    return dict(result or {})


class MCPToolset:
    """The MCP tools one agent may use, and the call-time enforcement of the filter."""

    def __init__(self, pool: MCPPool, refs: list[McpServerRef], *, agent_name: str,
                 settings: dict[str, ToolSettings] | None = None,
                 meta: MetaHook | None = None) -> None:
        self.pool = pool
        self.meta = meta
        """Gives the ``_meta`` of a call (the agent's ``_get_meta_for_mcp_server`` hook);
        without it, :func:`build_meta`."""
        self.refs = refs
        self.agent_name = agent_name
        self.settings = settings or {}
        # the Tool built for a listed MCP tool, reused while the server's listing keeps that
        # same tool object (a refreshed listing brings new objects, so new Tools)
        self._built: dict[tuple[str, str], tuple[MCPTool, Tool]] = {}

    async def start(self, attempts: int) -> None:
        """Connect the agent's servers (shared per process)."""
        for ref in self.refs:
            await self.pool.start(ref.name, attempts=attempts, agent=self.agent_name)

    async def tools(self) -> list[Tool]:
        """Servers in config order, tools in listing order; first server wins a name clash."""
        out: list[Tool] = []
        seen: dict[str, str] = {}
        for ref in self.refs:
            try:
                listed = await self.pool.connection(ref.name).tools()
            except Exception as exc:  # noqa: BLE001 - a server that cannot list contributes none
                log.warning("mcp.tools.list_failed", server=ref.name, agent=self.agent_name,
                            error=str(exc))
                continue
            for mcp_tool in listed:
                if not allowed(ref, mcp_tool.name):
                    continue
                if mcp_tool.name in seen:
                    log.warning("mcp_agent.duplicate_tool_name", tool=mcp_tool.name,
                                kept=seen[mcp_tool.name], ignored=ref.name,
                                agent=self.agent_name)
                    continue
                seen[mcp_tool.name] = ref.name
                out.append(self._tool(ref, mcp_tool))
            resources = await resource_tool(self.pool, ref)
            if resources is not None and resources.name not in seen:
                seen[resources.name] = ref.name
                out.append(resources)
        return out

    def _tool(self, ref: McpServerRef, mcp_tool: MCPTool) -> Tool:
        built = self._built.get((ref.name, mcp_tool.name))
        if built is not None and built[0] is mcp_tool:
            return built[1]
        tool = self._build(ref, mcp_tool)
        self._built[(ref.name, mcp_tool.name)] = (mcp_tool, tool)
        return tool

    def _build(self, ref: McpServerRef, mcp_tool: MCPTool) -> Tool:
        settings = self.settings.get(mcp_tool.name)
        read_only = mcp_tool.read_only
        if settings is not None and settings.read_only is not None:
            read_only = settings.read_only
        schema = AgentToolSchema(name=mcp_tool.name, description=mcp_tool.description,
                                 parameters=mcp_tool.input_schema or {}, strict=False)

        async def run(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
            return await self.call(ref, mcp_tool.name, arguments, ctx, read_only=read_only)

        return Tool(schema=schema, run=run, source=f"mcp:{ref.name}", read_only=read_only,
                    timeout=settings.timeout if settings else None)

    async def call(self, ref: McpServerRef, name: str, arguments: JsonObject,
                   ctx: CallContext, *, read_only: bool) -> AgentToolResult:
        """Call ``name`` on the server of ``ref``, enforcing the include/exclude filter."""
        if not allowed(ref, name):
            raise ToolNotAvailableError(f"tool {name!r} is not available to this agent")
        meta = dict(self.meta(ref.name, ctx.agent_input)) if self.meta is not None else \
            build_meta(self.pool, ref.name, ctx.agent_input, name, self.agent_name)
        config = self.pool.endpoints.mcp_server(ref.name)
        if config is not None and config.pre_call_hook:
            hook_ctx = {"sender_id": ctx.agent_input.recipient_id, "server_name": ref.name,
                        "tool_name": name, "agent_id": self.agent_name}
            try:
                meta.update(await run_pre_call_hook(config.pre_call_hook, hook_ctx))
            except Exception as exc:
                raise ToolNotAvailableError(f"the pre-call hook of MCP server {ref.name!r} "
                                            f"failed for {name!r}: {exc}") from exc
        sink = ctx.on_progress
        progress = (lambda p, t, m: sink(name, p, t, m)) if sink is not None else None
        key = session_key(config, ctx.agent_input) if config is not None else None
        if config is not None and key is not None:
            values = template_values(config, ctx.agent_input)

            async def keyed() -> AgentToolResult:
                # the session opens inside the held call: a sign-in it needs asks the user
                try:
                    async with self.pool.session(ref.name, key, values) as conn:
                        return await conn.call_tool(
                            name, arguments, timeout=ctx.timeout, read_only=read_only,
                            meta=meta, on_progress=progress)
                except MCPConnectionError as exc:
                    if exc.code in CONSENT_CODES:
                        raise ToolInvocationError(str(exc), code=exc.code) from exc
                    raise

            result = await self.pool.elicitations.call(keyed)
        else:
            connection = self.pool.connection(ref.name)
            result = await self.pool.elicitations.call(lambda: connection.call_tool(
                name, arguments, timeout=ctx.timeout, read_only=read_only, meta=meta,
                on_progress=progress))
        # None: the server asked the user for input; the call goes on in the background
        return result if result is not None else AgentToolResult(tool_name=name)
