"""Per-tool settings: state mapping, result budget + recall, approvals, slot verification."""

from __future__ import annotations

import anyio
import pytest
from subagents.agents.schemas import AgentInputSlot, AgentStatus
from subagents.agents.task_agent import MCPTaskAgent
from subagents.testing import FakeModelServer

from tests.agent_harness import IN_MEMORY, TimedChannel, agent_input, build_agent, close, kinds


@pytest.fixture
def tools_url() -> str:
    """This module's agents reach the test MCP server in memory (the transport is not tested)."""
    return IN_MEMORY



async def run_once(script, url, inp=None, cls=None, **kw):
    name = kw.get("name", "weather_agent")
    async with FakeModelServer({name: script}) as fake:
        extra = {"cls": cls} if cls else {}
        agent = await build_agent(fake, url, **extra, **kw)
        try:
            with anyio.fail_after(30):
                output = await agent.run(inp or agent_input(name=name), TimedChannel())
        finally:
            await close(agent)
        return output, fake


async def test_inputs_from_state_are_hidden_and_filled(tools_url):
    conf = {"tools": {"echo": {"inputs_from_state": {"text": "metadata.tenant"}}}}
    inp = agent_input(metadata={"tenant": "acme-7"})
    output, fake = await run_once([{"tool_calls": [{"echo": {}}]}, "Done."], tools_url,
                                  inp=inp, configuration=conf)
    offered = {t["function"]["name"]: t["function"] for t in fake.requests[0].body["tools"]}
    assert "text" not in offered["echo"]["parameters"]["properties"]
    assert output.events[0]["result"] == "acme-7"
    assert "acme-7" not in str(fake.requests[0].body)


async def test_outputs_to_state_set_slots_and_extend_lists(tools_url):
    conf = {"tools": {"echo": {"outputs_to_state": {"last": "result", "seen": "result"}}}}
    inp = agent_input(slots=[AgentInputSlot(name="seen", type="list", value=["a"]),
                             AgentInputSlot(name="last", type="text")])
    output, _ = await run_once([{"tool_calls": [{"echo": {"text": "b"}}]}, "Done."],
                               tools_url, inp=inp, configuration=conf)
    assert kinds(output.events)[:3] == ["tool:echo", "slot:last=b", "slot:seen=['a', 'b']"]


async def test_a_large_result_enters_as_a_preview_and_recall_reads_the_rest(tools_url):
    script = [{"tool_calls": [{"name": "huge", "arguments": {"size": 5000}, "id": "c1"}]},
              {"tool_calls": [{"recall": {"call_id": "c1", "offset": 4990, "length": 50}}],
               "expect": {"messages_contain": ["Result truncated: 5000 characters"],
                          "tools_include": ["recall"]}},
              {"text": "It is long.", "expect": {"messages_contain": ["xxxxxxxxxx"]}}]
    output, fake = await run_once(script, tools_url, configuration={"tool_result_budget": 100})
    fake.assert_done()
    preview_message = fake.requests[1].messages[-1]["content"]
    assert len(preview_message) < 400
    assert fake.requests[2].messages[-1]["content"] == "x" * 10
    assert len(output.events[0]["result"]) == 5000  # the tracker keeps the whole result


async def test_a_tool_that_needs_approval_runs_only_after_a_yes(tools_url):
    conf = {"tools": {"timed_write": {"requires_approval": True}}}
    script = [{"text": "I can save that.", "tool_calls": [{"timed_write": {"label": "x",
                                                                          "ms": 1}}]}]
    parked, _ = await run_once(script, tools_url, configuration=conf)
    assert (parked.status, parked.exit_reason) == (AgentStatus.INPUT_REQUIRED, "approval")
    assert "may I run timed_write" in parked.events[-1]["text"]
    assert not [e for e in parked.events if e["event"] == "mcp_tool_executed"]
    pending = parked.metadata["pending_approval"]

    yes = agent_input("yes please", metadata={"pending_approval": pending})
    done, fake = await run_once(["Saved."], tools_url, inp=yes, configuration=conf)
    assert kinds(done.events) == ["tool:timed_write", "bot:input_required"]
    assert fake.requests[0].messages[-1]["role"] == "tool"

    no = agent_input("no, don't", metadata={"pending_approval": pending})
    declined, fake = await run_once(["Okay, I won't."], tools_url, inp=no, configuration=conf)
    assert kinds(declined.events) == ["bot:input_required"]
    assert "did not approve" in fake.requests[0].messages[-1]["content"]


async def test_verified_slots_ask_the_model_to_confirm_first():
    slot = AgentInputSlot(name="email", type="text", verify=True)
    inp = agent_input(name="booking_agent", slots=[slot],
                      metadata={"exit_if": ["slots.email is not null"]})
    _, fake = await run_once(["What is your email?"], None, inp=inp, cls=MCPTaskAgent,
                             name="booking_agent")
    [tool] = fake.requests[0].body["tools"]
    assert "only after they confirm it" in tool["function"]["description"]
