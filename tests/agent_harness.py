"""Build agents against the fake model server and the in-process test MCP server.

Agent tests talk to the test MCP server over the MCP SDK's in-memory transport (a real MCP
session, without sockets or a web server) unless a test is about the transport: pass
:data:`IN_MEMORY` as the URL (modules do so by overriding the ``tools_url`` fixture).
"""

from __future__ import annotations

import time
from typing import Any

from subagents import events as ev
from subagents.agents.base import MCPBaseAgent
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import AgentInput, AgentInputSlot
from subagents.channels.collecting import CollectingOutputChannel
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.sub_agent import SubAgentConfig
from subagents.llm import LLMClient, ModelSettings
from subagents.mcp import MCPPool, MCPServerConnection
from subagents.testing import FakeModelServer

from tests.servers.tools_server import server as tools_server

IN_MEMORY = "http://in-memory.invalid/mcp"
"""A URL that makes :func:`build_agent` connect to the test server in memory."""


class InMemoryConnection(MCPServerConnection):
    """A real MCP session with an in-process server over the SDK's in-memory transport."""

    def __init__(self, config: McpServerConfig, server: Any, **kw: Any) -> None:
        super().__init__(config, **kw)
        self._server = server

    async def _transport(self) -> Any:
        return self._server


class InMemoryPool(MCPPool):
    """A pool whose ``tools`` server is the in-process test server, in memory."""

    def connection(self, name: str) -> MCPServerConnection:
        config = self.endpoints.mcp_server(name)
        if config is not None and config.url == IN_MEMORY \
                and name not in self._connections:
            self._connections[name] = InMemoryConnection(config, tools_server,
                                                         elicitations=self.elicitations)
        return super().connection(name)


class TimedChannel(CollectingOutputChannel):
    """Collects messages with the monotonic time each arrived."""

    def __init__(self, *, streaming: bool = False) -> None:
        super().__init__(streaming=streaming)
        self.times: list[tuple[str, float]] = []

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        self.times.append((text, time.monotonic()))
        await super().send_text_message(recipient_id, text, **kwargs)

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        self.times.append((chunk, time.monotonic()))
        await super().send_response_chunk(recipient_id, chunk)


async def build_agent(fake: FakeModelServer, url: str | None, *,
                      cls: type[MCPBaseAgent] = MCPOpenAgent, name: str = "weather_agent",
                      configuration: dict[str, Any] | None = None,
                      server: dict[str, Any] | None = None,
                      description: str = "Tell the user the weather.") -> MCPBaseAgent:
    servers = [McpServerConfig(name="tools", type="http", url=url)] if url else []
    endpoints = EndpointsConfig(mcp_servers=servers)
    pool = InMemoryPool(endpoints) if url == IN_MEMORY else MCPPool(endpoints)
    config = SubAgentConfig.model_validate({
        "agent": {"name": name, "description": description},
        "configuration": {"include_date_time": False, **(configuration or {})},
        "connections": {"mcp_servers": [{"name": "tools", **(server or {})}] if url else []}})
    llm = LLMClient(ModelSettings(model="fake", api_base=fake.base_url(name), max_retries=0,
                                  timeout=10), name=name)
    agent = cls.from_config(config, endpoints=endpoints, pool=pool, llm=llm)
    agent._test_pool = pool  # type: ignore[attr-defined]
    await agent.connect()
    return agent


async def close(agent: MCPBaseAgent) -> None:
    await agent.disconnect()
    await agent._test_pool.close()  # type: ignore[attr-defined]


def agent_input(text: str = "What's the weather in Berlin?", *,
                history: list[dict[str, Any]] | None = None,
                slots: list[AgentInputSlot] | None = None,
                metadata: dict[str, Any] | None = None,
                name: str = "weather_agent") -> AgentInput:
    events = [*(history or []), ev.user_uttered(text)]
    return AgentInput(id=name, user_message=text, events=events, slots=slots or [],
                      recipient_id="user-1",
                      metadata={"sender_id": "user-1", "agent_id": "assistant-1",
                                "model_id": "model-1", **(metadata or {})})


def kinds(events: list[dict[str, Any]]) -> list[str]:
    """Compact event list: bot:<message_type>, tool:<name>, slot:<name>."""
    out = []
    for e in events:
        if e["event"] == "bot":
            out.append(f"bot:{e['metadata']['agent_message_type']}")
        elif e["event"] == "mcp_tool_executed":
            out.append(f"tool:{e['tool_name']}{'!' if e['is_error'] else ''}")
        elif e["event"] == "slot":
            out.append(f"slot:{e['name']}={e['value']}")
        else:
            out.append(e["event"])
    return out
