"""The MCP client layer against real servers: stdio subprocess, SSE and streamable HTTP."""

from __future__ import annotations

import base64
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs
from subagents.agents.schemas import AgentInput, AgentInputSlot, AgentToolContext
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.sub_agent import McpServerRef
from subagents.exceptions import MCPConnectionError, ToolInvocationError, ToolTimeoutError
from subagents.mcp import MCPPool, MCPServerConnection
from subagents.testing.mcp_http import serve_mcp
from subagents.tools.base import CallContext
from subagents.tools.mcp_tools import MCPToolset

from tests.servers.tools_server import server as tools_server

REPO = Path(__file__).resolve().parents[3]
STDIO = {"type": "stdio", "command": "python", "args": ["-m", "tests.servers.tools_server"],
         "cwd": str(REPO)}


@contextlib.asynccontextmanager
async def server_config(transport: str, **extra) -> AsyncIterator[McpServerConfig]:
    if transport == "stdio":
        yield McpServerConfig(name="tools", **STDIO, **extra)
        return
    require = extra.pop("require", None)
    async with serve_mcp(tools_server, transport, require_header=require) as url:
        yield McpServerConfig(name="tools", type=transport, url=url, **extra)


@contextlib.asynccontextmanager
async def connected(transport: str, **extra) -> AsyncIterator[MCPServerConnection]:
    async with server_config(transport, **extra) as config:
        conn = MCPServerConnection(config, root=REPO)
        await conn.start(attempts=1)
        try:
            yield conn
        finally:
            await conn.close()


TRANSPORTS = ["stdio", "sse", "http"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_same_tool_calls_work_over_every_transport(transport):
    with anyio.fail_after(30):
        async with connected(transport) as conn:
            names = [t.name for t in await conn.tools()]
            echo = await conn.call_tool("echo", {"text": "hello"}, timeout=5)
            added = await conn.call_tool("add", {"a": 2, "b": 3}, timeout=5)
            failed = await conn.call_tool("fail", {"message": "no stock today"}, timeout=5)
            unknown = await conn.call_tool("nope", {}, timeout=5)
    assert {"echo", "add", "timed_read", "fail"} <= set(names)
    assert (echo.result, echo.is_error) == ("hello", False)
    assert added.result == "5"
    assert failed.is_error
    assert "no stock today" in failed.error_message
    assert "TextContent" not in failed.error_message  # text, not a Python repr
    assert unknown.is_error


@pytest.mark.parametrize("transport", ["sse", "http"])
async def test_auth_headers_reach_the_server_and_are_required(transport, monkeypatch):
    monkeypatch.setenv("TOOLS_TOKEN", "s3cret")
    with anyio.fail_after(30):
        async with connected(transport, token="${TOOLS_TOKEN}",
                             headers={"X-Tenant": "acme"},
                             require=("authorization", "Bearer s3cret")) as conn:
            who = await conn.call_tool("whoami", {}, timeout=5)
        assert who.result == "Bearer s3cret|acme"
        async with server_config(transport, require=("authorization", "Bearer s3cret")) as cfg:
            conn = MCPServerConnection(cfg, root=REPO)
            with pytest.raises(MCPConnectionError) as info:
                await conn.start(attempts=2, base_delay=0.01, agent="weather_agent")
            await conn.close()
    message = str(info.value)
    assert "weather_agent" in message
    assert "'tools'" in message
    assert cfg.url in message


async def test_api_key_header_uses_header_name_and_format(monkeypatch):
    monkeypatch.setenv("TOOLS_KEY", "k-1")
    with anyio.fail_after(30):
        async with connected("http", api_key="${TOOLS_KEY}", header_name="Authorization",
                             header_format="Key {key}",
                             require=("authorization", "Key k-1")) as conn:
            who = await conn.call_tool("whoami", {}, timeout=5)
    assert who.result == "Key k-1|None"


async def test_stdio_server_gets_only_its_env_plus_path_and_home(monkeypatch):
    monkeypatch.setenv("PARENT_SECRET", "leak")
    monkeypatch.setenv("GIVEN_SOURCE", "given-value")
    with anyio.fail_after(30):
        async with connected("stdio", env={"GIVEN": "${GIVEN_SOURCE}"}) as conn:
            leaked = await conn.call_tool("env_value", {"name": "PARENT_SECRET"}, timeout=5)
            given = await conn.call_tool("env_value", {"name": "GIVEN"}, timeout=5)
            path = await conn.call_tool("env_value", {"name": "PATH"}, timeout=5)
    assert leaked.result == "<unset>"
    assert given.result == "given-value"
    assert path.result != "<unset>"


async def test_a_server_killed_mid_call_errors_cleanly_and_the_next_call_reconnects():
    with anyio.fail_after(40):
        async with connected("stdio") as conn:
            first_pid = (await conn.call_tool("pid", {}, timeout=5)).result
            with pytest.raises(ToolInvocationError) as info:
                await conn.call_tool("die", {}, timeout=5, read_only=False)
            again = await conn.call_tool("echo", {"text": "back"}, timeout=5)
            second_pid = (await conn.call_tool("pid", {}, timeout=5)).result
    assert info.value.code == "tool.connection_lost"
    assert "may or may not have run" in str(info.value)
    assert again.result == "back"
    assert conn.connects == 2
    assert first_pid != second_pid


async def test_an_in_flight_read_only_call_is_retried_once_after_reconnect(tmp_path):
    marker = tmp_path / "died"
    with anyio.fail_after(40):
        async with connected("stdio") as conn:
            result = await conn.call_tool("die_once", {"marker": str(marker)}, timeout=5,
                                          read_only=True)
    assert result.result == "survived"
    assert marker.exists()
    assert conn.connects == 2


async def test_a_server_down_at_startup_is_retried_then_fails_clearly():
    config = McpServerConfig(name="broken", type="stdio", command=sys.executable,
                             args=["-c", "raise SystemExit(1)"])
    conn = MCPServerConnection(config)
    with anyio.fail_after(30), capture_logs() as logs, \
            pytest.raises(MCPConnectionError) as info:
        await conn.start(attempts=3, base_delay=0.01, agent="stock_analyst")
    await conn.close()
    assert info.value.code == "mcp.connection_failed"
    assert "stock_analyst" in str(info.value)
    assert "'broken'" in str(info.value)
    assert "after 3 attempt(s)" in str(info.value)
    assert [e["attempt"] for e in logs if e["event"] == "mcp.connect.failed"] == [1, 2, 3]


async def test_an_http_server_that_is_not_listening_fails_with_its_address():
    config = McpServerConfig(name="gone", type="http", url="http://127.0.0.1:9/mcp", timeout=3)
    conn = MCPServerConnection(config)
    with anyio.fail_after(30), pytest.raises(MCPConnectionError) as info:
        await conn.start(attempts=2, base_delay=0.01)
    await conn.close()
    assert "http://127.0.0.1:9/mcp" in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_slow_tool_times_out_naming_tool_server_and_timeout(transport):
    with anyio.fail_after(30):
        async with connected(transport) as conn:
            with pytest.raises(ToolTimeoutError) as info:
                await conn.call_tool("slow", {"seconds": 5}, timeout=0.3)
            after = await conn.call_tool("echo", {"text": "still here"}, timeout=5)
    assert "'slow'" in str(info.value)
    assert "'tools'" in str(info.value)
    assert "0.3s" in str(info.value)
    assert after.result == "still here"


async def test_a_tool_raising_unexpectedly_is_an_error_result():
    with anyio.fail_after(30):
        async with connected("http") as conn:
            result = await conn.call_tool("crash", {}, timeout=5)
    assert result.is_error
    assert "crash" in result.error_message


async def test_a_huge_result_arrives_whole():
    with anyio.fail_after(30):
        async with connected("stdio") as conn:
            result = await conn.call_tool("huge", {"size": 2_000_000}, timeout=10)
    assert len(result.result) == 2_000_000


async def test_the_tool_list_is_refreshed_after_a_list_changed_notification():
    try:
        with anyio.fail_after(30):
            async with connected("http") as conn:
                before = {t.name for t in await conn.tools()}
                await conn.call_tool("register_extra", {}, timeout=5)
                with anyio.fail_after(5):
                    await conn.tools_changed.wait()
                after = {t.name for t in await conn.tools()}
                called = await conn.call_tool("extra", {}, timeout=5)
    finally:
        with contextlib.suppress(Exception):
            tools_server.remove_tool("extra")
    assert "extra" not in before
    assert "extra" in after
    assert called.result == "extra"


def agent_input(**slots) -> AgentInput:
    return AgentInput(id="a", slots=[AgentInputSlot(name=k, value=v) for k, v in slots.items()])


def ctx(**slots) -> CallContext:
    return CallContext(agent_input(**slots), AgentToolContext(), timeout=5)


def endpoints(*servers: McpServerConfig) -> EndpointsConfig:
    return EndpointsConfig(mcp_servers=list(servers))


async def test_one_connection_per_server_is_shared_and_closed_with_the_pool():
    pool = MCPPool(endpoints(McpServerConfig(name="tools", **STDIO)), root=REPO)
    with anyio.fail_after(30):
        await anyio.to_thread.run_sync(lambda: None)
        a = MCPToolset(pool, [McpServerRef(name="tools")], agent_name="a")
        b = MCPToolset(pool, [McpServerRef(name="tools", include_tools=["pid"])], agent_name="b")
        await a.start(attempts=1)
        await b.start(attempts=1)
        pid_tool = next(t for t in await b.tools() if t.name == "pid")
        pid = int((await pid_tool.run({}, ctx())).result)
        assert pool.connection("tools").connects == 1
        await pool.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_include_exclude_filtering_is_enforced_at_listing_and_call_time():
    async with serve_mcp(tools_server, "http") as url:
        pool = MCPPool(endpoints(McpServerConfig(name="tools", type="http", url=url)))
        try:
            with anyio.fail_after(30):
                only = MCPToolset(pool, [McpServerRef(name="tools", include_tools=["echo"])],
                                  agent_name="a")
                await only.start(attempts=1)
                assert [t.name for t in await only.tools()] == ["echo"]
                with pytest.raises(ToolInvocationError):
                    await only.call(only.refs[0], "add", {"a": 1, "b": 2}, ctx(),
                                    read_only=True)
                none = MCPToolset(pool, [McpServerRef(name="tools", include_tools=[])],
                                  agent_name="b")
                assert await none.tools() == []
                excl = MCPToolset(pool, [McpServerRef(name="tools", exclude_tools=["die"])],
                                  agent_name="c")
                names = [t.name for t in await excl.tools()]
                assert "die" not in names
                assert "echo" in names
        finally:
            await pool.close()


async def test_a_duplicate_tool_name_across_servers_keeps_the_first_server():
    async with serve_mcp(tools_server, "http") as url_a, serve_mcp(tools_server, "sse") as url_b:
        pool = MCPPool(endpoints(McpServerConfig(name="first", type="http", url=url_a),
                                 McpServerConfig(name="second", type="sse", url=url_b)))
        try:
            toolset = MCPToolset(pool, [McpServerRef(name="first"), McpServerRef(name="second")],
                                 agent_name="a")
            with anyio.fail_after(30), capture_logs() as logs:
                await toolset.start(attempts=1)
                tools = await toolset.tools()
        finally:
            await pool.close()
    echo = [t for t in tools if t.name == "echo"]
    assert [t.source for t in echo] == ["mcp:first"]
    assert any(e["event"] == "mcp_agent.duplicate_tool_name" and e["kept"] == "first"
               for e in logs)


async def show_meta_with(**server: object):
    """Call `show_meta` through a toolset (meta_map: static tenant, uid from slot user_id)."""
    from subagents.tools.executor import invoke_tool

    async with serve_mcp(tools_server, "http") as url:
        config = McpServerConfig.model_validate({
            "name": "tools", "type": "http", "url": url, **server,
            "meta_map": {"static": {"tenant": "acme"}, "from_slots": [{"slot": "user_id",
                                                                       "param": "uid"}]}})
        pool = MCPPool(endpoints(config))
        try:
            toolset = MCPToolset(pool, [McpServerRef(name="tools")], agent_name="a")
            with anyio.fail_after(30):
                await toolset.start(attempts=1)
                tool = next(t for t in await toolset.tools() if t.name == "show_meta")
                return await invoke_tool(tool, {}, ctx(user_id="u-42"))
        finally:
            await pool.close()


async def test_meta_map_is_sent_as_meta_from_static_values_and_slots():
    result = await show_meta_with()
    assert result.result == "tenant=acme,uid=u-42"


async def test_oauth_client_credentials_fetch_a_token_for_the_server(monkeypatch):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from subagents.testing.mcp_http import serve_app

    monkeypatch.setenv("OAUTH_SECRET", "client-secret-1")
    grants: list[dict] = []

    async def token(request):
        form = dict(await request.form())
        grants.append({**form, "authorization": request.headers.get("authorization", "")})
        # no metadata lists the methods: the secret goes in HTTP Basic, the RFC 6749 default
        expected = "Basic " + base64.b64encode(b"agent:client-secret-1").decode()
        if grants[-1]["authorization"] != expected or "client_secret" in form:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        return JSONResponse({"access_token": "issued-token", "expires_in": 3600})

    async with serve_app(Starlette(routes=[Route("/token", token, methods=["POST"])])) as base:
        oauth = {"token_url": f"{base}/token", "client_id": "agent", "scope": "tools",
                 "client_secret": "${OAUTH_SECRET}"}
        with anyio.fail_after(30):
            async with connected("http", oauth=oauth,
                                 require=("authorization", "Bearer issued-token")) as conn:
                who = await conn.call_tool("whoami", {}, timeout=5)
    assert who.result == "Bearer issued-token|None"
    assert grants[0]["grant_type"] == "client_credentials"
    assert grants[0]["scope"] == "tools"


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_the_demo_servers_run_over_http_and_sse(transport):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    flag = "--http" if transport == "http" else "--sse"
    proc = await anyio.open_process([sys.executable, "-m", "subagents.demo.stocks", flag,
                                     f"127.0.0.1:{port}"])
    path = "mcp" if transport == "http" else "sse"
    config = McpServerConfig(name="stocks", type=transport, url=f"http://127.0.0.1:{port}/{path}",
                             timeout=5)
    conn = MCPServerConnection(config)
    try:
        with anyio.fail_after(60):
            await conn.start(attempts=20, base_delay=0.2)
            quote = await conn.call_tool("get_stock_price", {"symbol": "NOVA"}, timeout=5)
    finally:
        await conn.close()
        proc.terminate()
        await proc.wait()
    assert '"price": 47.15' in quote.result


@pytest.mark.parametrize(("hook", "expected"), [
    ("tests.servers.hooks.add_uid", "tenant=acme,uid=hook-show_meta"),
    ("tests.servers.hooks.broken", "vault unreachable"),
])
async def test_the_pre_call_hook_adds_meta_or_fails_the_call_cleanly(hook, expected):
    result = await show_meta_with(pre_call_hook=hook)
    assert expected in (result.result or result.error_message)


async def test_a_custom_auth_module_supplies_the_headers():
    with anyio.fail_after(30):
        async with connected("http", module="tests.servers.hooks.HeaderAuth",
                             require=("authorization", "Bearer from-module")) as conn:
            who = await conn.call_tool("whoami", {}, timeout=5)
    assert who.result == "Bearer from-module|None"


async def test_an_agents_mcp_tools_are_built_once_until_the_server_lists_new_ones():
    async with serve_mcp(tools_server, "http") as url:
        pool = MCPPool(endpoints(McpServerConfig(name="tools", type="http", url=url)))
        try:
            with anyio.fail_after(30):
                toolset = MCPToolset(pool, [McpServerRef(name="tools")], agent_name="a")
                await toolset.start(attempts=1)
                first = {t.name: t for t in await toolset.tools()}
                again = {t.name: t for t in await toolset.tools()}
                conn = pool.connection("tools")
                await conn.call_tool("register_extra", {}, timeout=5)
                with anyio.fail_after(5):
                    await conn.tools_changed.wait()
                after = {t.name: t for t in await toolset.tools()}
                extra = await after["extra"].run({}, ctx())
        finally:
            with contextlib.suppress(Exception):
                tools_server.remove_tool("extra")
            await pool.close()
    assert all(again[name] is tool for name, tool in first.items())
    assert after["echo"] is not first["echo"]  # a new listing: the tools are built anew
    assert after["echo"].schema == first["echo"].schema
    assert extra.result == "extra"
