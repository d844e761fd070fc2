"""Third-party reference MCP servers driven through a real agent with the scripted model.

``make interop`` installs the servers into a cache (npm: everything, filesystem, memory; PyPI:
mcp-server-time, mcp-server-git) and points ``SUBAGENTS_INTEROP_CACHE`` at it; without it these
tests skip. Each test scripts the model to call the server's tools and checks what the model was
shown in the next request.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from subagents.agents.open_agent import MCPOpenAgent
from subagents.channels.collecting import CollectingOutputChannel
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.sub_agent import SubAgentConfig
from subagents.llm import LLMClient, ModelSettings
from subagents.mcp import MCPPool, MCPServerConnection
from subagents.testing import FakeModelServer

from tests.agent_harness import agent_input

CACHE = os.environ.get("SUBAGENTS_INTEROP_CACHE")
pytestmark = pytest.mark.skipif(
    not CACHE, reason="reference servers not installed (run `make interop`)")

NPM_BIN = Path(CACHE or ".") / "npm" / "node_modules" / ".bin"
PY_BIN = Path(CACHE or ".") / "py" / "bin"
NODE = str(NPM_BIN / "node")


def _node_server(package_bin: str, *args: str) -> dict[str, Any]:
    return {"type": "stdio", "command": NODE,
            "args": [str((NPM_BIN / package_bin).resolve()), *args],
            "env": {"PATH": f"{NPM_BIN}:{os.environ.get('PATH', '')}"}}


async def run_agent(server: dict[str, Any], script: list[Any],
                    configuration: dict[str, Any] | None = None) -> list[str]:
    """Run one agent turn against ``server``; return the tool messages the model saw."""
    async with FakeModelServer({"interop": script}) as fake:
        endpoints = EndpointsConfig(mcp_servers=[McpServerConfig(name="ref", **server)])
        pool = MCPPool(endpoints)
        config = SubAgentConfig.model_validate({
            "agent": {"name": "interop", "description": "Use the tools."},
            "configuration": {"include_date_time": False, **(configuration or {})},
            "connections": {"mcp_servers": [{"name": "ref"}]}})
        llm = LLMClient(ModelSettings(model="fake", api_base=fake.base_url("interop"),
                                      max_retries=0, timeout=30), name="interop")
        agent = MCPOpenAgent.from_config(config, endpoints=endpoints, pool=pool, llm=llm)
        try:
            with anyio.fail_after(120):
                await agent.connect()
                await agent.run(agent_input("go", name="interop"), CollectingOutputChannel())
        finally:
            await agent.disconnect()
            await pool.close()
        fake.assert_done()
        last = fake.requests_of("interop")[-1]
    return [str(m.get("content")) for m in last.messages if m.get("role") == "tool"]


def _done(text: str = "Done.") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"task_completed": {}}]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def everything_over(transport: str, port: int | None = None
                          ) -> AsyncIterator[dict[str, Any]]:
    if transport == "stdio":
        yield _node_server("mcp-server-everything", "stdio")
        return
    port = port or _free_port()
    mode = "sse" if transport == "sse" else "streamableHttp"
    env = {**os.environ, "PORT": str(port), "PATH": f"{NPM_BIN}:{os.environ.get('PATH', '')}"}
    proc = await anyio.open_process(
        [NODE, str((NPM_BIN / "mcp-server-everything").resolve()), mode], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = "sse" if transport == "sse" else "mcp"
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    async with httpx2.AsyncClient() as client:
                        await client.get(f"http://127.0.0.1:{port}/", timeout=1)
                    break
                except httpx2.TransportError:
                    await anyio.sleep(0.1)
        yield {"type": transport, "url": f"http://127.0.0.1:{port}/{path}"}
    finally:
        proc.terminate()
        with anyio.fail_after(10):
            await proc.wait()


@pytest.mark.parametrize("transport", ["stdio", "sse", "http"])
async def test_the_everything_server_over_each_transport(transport):
    script = [
        {"text": "Working on it.", "tool_calls": [
            {"echo": {"message": "hello interop"}}, {"get-sum": {"a": 2, "b": 3}},
            {"get-tiny-image": {}}, {"get-resource-links": {"count": 2}}]},
        _done(),
    ]
    async with everything_over(transport) as server:
        tool_messages = await run_agent(server, script)
    echo, total, image, links = tool_messages
    assert "hello interop" in echo
    assert "5" in total
    assert "[image: image/png" in image
    assert len(image) < 500  # a placeholder, not kilobytes of base64
    assert links.count("[resource link:") == 2


@pytest.mark.parametrize("transport", ["stdio", "sse", "http"])
async def test_progress_of_the_everything_server_keeps_an_agents_call_alive(transport):
    # tool_timeout 1.5 s: four steps of 1 s, each followed by a progress report, run for 4 s
    # and complete; one silent step of 3 s (its only report comes at the end) times out
    script = [{"tool_calls": [{"trigger-long-running-operation": {"duration": 4, "steps": 4}}]},
              {"tool_calls": [{"trigger-long-running-operation": {"duration": 3, "steps": 1}}]},
              _done()]
    async with everything_over(transport) as server:
        reported, silent = await run_agent(
            server, script, {"tool_timeout": 1.5, "progress_messages": False})
    assert "Long running operation completed. Duration: 4 seconds, Steps: 4." in reported
    assert "did not answer within 1.5s" in silent


async def test_the_filesystem_server(tmp_path):
    (tmp_path / "notes.txt").write_text("quarterly numbers look fine", encoding="utf-8")
    (tmp_path / "chart.png").write_bytes(bytes(range(256)) * 27 + bytes(117))  # 7029 bytes
    server = _node_server("mcp-server-filesystem", str(tmp_path))
    script = [{"tool_calls": [{"list_directory": {"path": str(tmp_path)}},
                              {"read_text_file": {"path": str(tmp_path / "notes.txt")}},
                              {"read_media_file": {"path": str(tmp_path / "chart.png")}}]},
              _done()]
    listing, content, media = await run_agent(server, script)
    assert "notes.txt" in listing
    assert "quarterly numbers look fine" in content
    # the image comes as a content block and again inside structuredContent: both placeholders
    assert "[image: image/png, 7029 bytes]" in media
    assert len(media) < 200


async def test_the_memory_server(tmp_path):
    server = _node_server("mcp-server-memory")
    server["env"]["MEMORY_FILE_PATH"] = str(tmp_path / "memory.jsonl")
    entity = {"name": "Ada", "entityType": "person", "observations": ["likes tea"]}
    script = [{"tool_calls": [{"create_entities": {"entities": [entity]}}]},
              {"tool_calls": [{"read_graph": {}}]},
              _done()]
    messages = await run_agent(server, script)
    graph = messages[-1]
    assert "Ada" in graph
    assert "likes tea" in graph


def _python_server(module: str, *args: str) -> dict[str, Any]:
    return {"type": "stdio", "command": str(PY_BIN / "python"), "args": ["-m", module, *args]}


async def test_the_time_server():
    script = [{"tool_calls": [{"get_current_time": {"timezone": "UTC"}}]}, _done()]
    [answer] = await run_agent(_python_server("mcp_server_time"), script)
    assert json.loads(answer)["timezone"] == "UTC"


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    return tmp_path


async def test_the_git_server(git_repo):
    tmp_path = git_repo
    script = [{"tool_calls": [{"git_status": {"repo_path": str(tmp_path)}}]}, _done()]
    [status] = await run_agent(_python_server("mcp_server_git"), script)
    assert "a.txt" in status


async def test_a_restarted_typescript_http_server_gets_a_new_session():
    """The TypeScript SDK answers an unknown session with 400, not 404."""
    port = _free_port()
    with anyio.fail_after(90):
        async with everything_over("http", port) as server:
            conn = MCPServerConnection(McpServerConfig(name="ref", **server))
            await conn.start(attempts=1)
            first = await conn.call_tool("get-sum", {"a": 2, "b": 3}, timeout=10)
        try:
            async with everything_over("http", port):
                again = await conn.call_tool("get-sum", {"a": 2, "b": 3}, timeout=10)
        finally:
            await conn.close()
    assert "5" in first.result
    assert again.result == first.result
    assert conn.connects == 2
