"""Tool input schemas from real MCP servers: nothing the server accepts is narrowed, and the
JSON-schema validator follows the schema's ``$schema`` (draft-07 tuples work)."""

from __future__ import annotations

import json

import anyio
from subagents.agents.schemas import AgentInput, AgentToolContext
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.sub_agent import McpServerRef
from subagents.mcp import MCPPool
from subagents.testing.mcp_http import serve_mcp
from subagents.tools.base import CallContext
from subagents.tools.executor import invoke_tool
from subagents.tools.mcp_tools import MCPToolset

from tests.servers.schema_server import server as schema_server


async def _call_each(calls: list[tuple[str, dict]]) -> tuple[dict, list]:
    """Offered parameters per tool, and the result of each call (through the validator)."""
    async with serve_mcp(schema_server, "http") as url:
        pool = MCPPool(EndpointsConfig(mcp_servers=[
            McpServerConfig(name="schemas", type="http", url=url)]))
        try:
            with anyio.fail_after(30):
                toolset = MCPToolset(pool, [McpServerRef(name="schemas")], agent_name="a")
                await toolset.start(attempts=1)
                tools = {t.name: t for t in await toolset.tools()}
                ctx = CallContext(AgentInput(id="a"), AgentToolContext(), timeout=5)
                results = [await invoke_tool(tools[name], args, ctx) for name, args in calls]
        finally:
            await pool.close()
    offered = {n: t.schema.to_openai()["function"]["parameters"] for n, t in tools.items()}
    return offered, results


async def test_untyped_and_free_form_parameters_accept_what_the_server_accepts():
    offered, results = await _call_each([
        ("anything", {"value": 42}), ("anything", {"value": {"a": [1]}}),
        ("free_form", {"data": {"a": 1}})])
    assert "type" not in offered["anything"]["properties"]["value"]
    assert offered["free_form"]["properties"]["data"] == {"type": "object"}
    assert [r.is_error for r in results] == [False, False, False]
    assert [json.loads(r.result) for r in results] == [
        {"value": 42}, {"value": {"a": [1]}}, {"data": {"a": 1}}]


async def test_a_draft_07_tuple_schema_is_validated_with_its_own_draft():
    _, results = await _call_each([("pair", {"pair": ["apples", 3]}),
                                   ("pair", {"pair": ["apples", "three"]})])
    good, bad = results
    assert not good.is_error
    assert json.loads(good.result) == {"pair": ["apples", 3]}
    assert bad.is_error
