"""Start-up connects every agent's MCP servers at the same time, not one after another."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project
from tests.servers.tools_server import server as tools_server


class _Rendezvous:
    """Serves the test MCP server under ``/a`` and ``/b``; a request to either waits until
    the other one has been asked too, so connecting one server after the other never ends."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.asked = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            name, _, rest = scope["path"].lstrip("/").partition("/")
            self.asked[name].set()
            await self.asked["b" if name == "a" else "a"].wait()
            scope = {**scope, "path": f"/{rest}", "raw_path": f"/{rest}".encode()}
        await self.app(scope, receive, send)


async def test_agents_connect_their_mcp_servers_concurrently(tmp_path):
    async with serve_app(_Rendezvous(tools_server.streamable_http_app())) as base:
        project = write_project(tmp_path, f"{base}/a/mcp", extra={
            "endpoints.yml": f"""
                model_groups:
                  - id: llm
                    models: [{{provider: openai, model: gpt-test}}]
                mcp_servers:
                  - {{name: tools, type: http, url: "{base}/a/mcp"}}
                  - {{name: more_tools, type: http, url: "{base}/b/mcp"}}
                """,
            "sub_agents/booking/config.yml": """
                agent: {name: booking_agent, description: Books a table.}
                configuration: {include_date_time: false}
                connections:
                  mcp_servers: [{name: more_tools, include_tools: [echo]}]
                """})
        async with FakeModelServer({}) as fake:
            with anyio.fail_after(30):
                async with assistant_for(project, fake) as assistant:
                    connected = [name for name in ("tools", "more_tools")
                                 if assistant.pool.connection(name).connected]
    assert connected == ["tools", "more_tools"]
