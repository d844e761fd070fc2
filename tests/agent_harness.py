"""Build agents against the fake model server and the in-process test MCP server."""

from __future__ import annotations

import time
from typing import Any

from subagents import events as ev
from subagents.agents.base import MCPBaseAgent
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import AgentInput, AgentInputSlot
from subagents.channels.base import CollectingOutputChannel
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.sub_agent import SubAgentConfig
from subagents.llm import LLMClient, ModelSettings
from subagents.mcp import MCPPool
from subagents.testing import FakeModelServer


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
    pool = MCPPool(endpoints)
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
