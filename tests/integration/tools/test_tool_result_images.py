"""Images in MCP tool results reach models that accept them as image parts
(``configuration.tool_result_images``), and a short placeholder otherwise."""

from __future__ import annotations

import base64

import anyio
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_mcp

from tests.agent_harness import TimedChannel, agent_input, build_agent, close
from tests.servers.mcp_features_server import PNG_BYTES
from tests.servers.mcp_features_server import server as features_server

PLACEHOLDER = "Revenue chart\n[image: image/png, 4096 bytes]"
SCRIPT = [{"text": "Fetching the chart.", "tool_calls": [{"picture": {}}]},
          "Revenue went up."]


async def run_with(configuration):
    async with serve_mcp(features_server) as url, FakeModelServer({"weather_agent": SCRIPT}) \
            as fake:
        agent = await build_agent(fake, url, configuration=configuration)
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input("show me the revenue chart"),
                                         TimedChannel())
        finally:
            await close(agent)
        fake.assert_done()
        return output, fake.requests[1].messages


def image_parts(messages):
    return [part for m in messages if isinstance(m.get("content"), list)
            for part in m["content"] if part.get("type") == "image_url"]


async def test_images_reach_the_model_as_image_parts_when_configured():
    output, messages = await run_with({"tool_result_images": True})
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"] == PLACEHOLDER
    after = messages[messages.index(tool) + 1]
    assert after["role"] == "user"
    assert [p["type"] for p in after["content"]] == ["text", "text", "image_url"]
    url = after["content"][2]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(PNG_BYTES).decode()
    recorded = next(e for e in output.events if e["event"] == "mcp_tool_executed")
    assert recorded["result"] == PLACEHOLDER
    assert "base64" not in str(output.model_dump())


async def test_without_the_option_the_model_gets_only_the_placeholder():
    _, messages = await run_with({})
    assert image_parts(messages) == []
    assert next(m for m in messages if m["role"] == "tool")["content"] == PLACEHOLDER
    assert messages[-1]["role"] == "tool"


def test_a_parked_exchange_is_saved_without_the_image_data():
    from subagents.agents._images import without_images

    image = {"role": "user", "content": [
        {"type": "text", "text": "images"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": PLACEHOLDER}
    saved = without_images([tool, image])
    assert saved[0] == tool
    assert "base64" not in str(saved[1])
