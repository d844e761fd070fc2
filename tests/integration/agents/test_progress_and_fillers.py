"""What the user sees while tools run: progress a real MCP server reports becomes short,
rate-limited messages (streamed where the channel streams); fillers never repeat their
wording within a conversation, and are held back when the called tools usually answer fast."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from subagents import events as ev
from subagents.channels.collecting import CollectingOutputChannel
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_mcp

from tests.agent_harness import IN_MEMORY, agent_input, build_agent, close
from tests.servers.mcp_features_server import server as features_server

CRAWL = [{"tool_calls": [{"crawl_with_progress": {"steps": 3, "step_ms": 1}}]},
         {"text": "Crawled.", "tool_calls": [{"task_completed": {}}]}]


@pytest.fixture
async def features_url() -> AsyncIterator[str]:
    async with serve_mcp(features_server, "http") as url:
        yield url


async def run(url: str, script: list[Any], *, channel: CollectingOutputChannel | None = None,
              configuration: dict[str, Any] | None = None, **input_kw: Any
              ) -> tuple[Any, CollectingOutputChannel]:
    channel = channel or CollectingOutputChannel()
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, url, configuration=configuration)
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input(**input_kw), channel)
        finally:
            await close(agent)
        fake.assert_done()
    return output, channel


async def test_progress_reports_of_a_running_call_reach_the_user(features_url):
    output, channel = await run(features_url, CRAWL,
                                configuration={"progress_interval": 0})
    assert channel.texts == ["step 1", "step 2", "step 3", "Crawled."]
    # progress is status, not conversation: nothing of it is recorded
    assert [e.get("text") for e in output.events if e["event"] == "bot"] == ["Crawled."]


async def test_progress_messages_are_rate_limited_per_run(features_url):
    _, channel = await run(features_url, CRAWL, configuration={"progress_interval": 3600})
    assert channel.texts == ["step 1", "Crawled."]


async def test_progress_is_streamed_where_the_channel_streams(features_url):
    channel = CollectingOutputChannel(streaming=True)
    _, channel = await run(features_url, CRAWL, channel=channel,
                           configuration={"progress_interval": 0})
    assert [m for m in channel.messages if m["text"].startswith("step")] == [
        {"recipient_id": "user-1", "text": f"step {n}", "streamed": True} for n in (1, 2, 3)]
    assert ("text", {"recipient_id": "user-1", "text": "step 1"}) not in channel.log


async def test_progress_messages_can_be_switched_off(features_url):
    _, channel = await run(features_url, CRAWL, configuration={"progress_messages": False})
    assert channel.texts == ["Crawled."]


async def test_a_filler_with_the_same_wording_is_sent_once_per_conversation():
    script = [{"text": "Let me check.", "tool_calls": [{"echo": {"text": "a"}}]},
              {"text": "let me CHECK!", "tool_calls": [{"echo": {"text": "b"}}]},
              {"text": "One moment.", "tool_calls": [{"echo": {"text": "c"}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    output, channel = await run(IN_MEMORY, script)
    assert channel.texts == ["Let me check.", "One moment.", "Done."]
    fillers = [e["text"] for e in output.events
               if e["event"] == "bot" and e["metadata"]["agent_message_type"] == "filler_message"]
    assert fillers == ["Let me check.", "One moment."]


async def test_a_filler_sent_in_an_earlier_turn_is_not_repeated():
    earlier = ev.bot_uttered("Let me check.", metadata={"agent_message_type": "filler_message"})
    script = [{"text": "Let me check.", "tool_calls": [{"echo": {"text": "a"}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    _, channel = await run(IN_MEMORY, script, history=[earlier])
    assert channel.texts == ["Done."]


async def test_fillers_are_held_back_once_the_called_tool_is_known_to_be_fast():
    script = [*({"text": f"Checking {n}.", "tool_calls": [{"echo": {"text": str(n)}}]}
                for n in range(1, 6)),
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    _, channel = await run(IN_MEMORY, script,
                           configuration={"filler_fast_tool_ms": 60_000, "max_agent_steps": 10})
    # the first calls measure the tool; after that its fillers are not needed
    assert channel.texts == ["Checking 1.", "Checking 2.", "Checking 3.", "Done."]


async def test_fillers_of_slow_tools_are_always_sent():
    script = [*({"text": f"Checking {n}.", "tool_calls": [{"echo": {"text": str(n)}}]}
                for n in range(1, 6)),
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    _, channel = await run(IN_MEMORY, script, configuration={"filler_fast_tool_ms": 1e-9})
    assert channel.texts == [f"Checking {n}." for n in range(1, 6)] + ["Done."]
