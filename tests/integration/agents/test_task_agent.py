"""MCPTaskAgent driven directly: set_slot tools, coercion, exit conditions, silent completion."""

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


SLOTS = [
    AgentInputSlot(name="city", type="text", value=None, description="Where to book."),
    AgentInputSlot(name="guests", type="float", value=None),
    AgentInputSlot(name="seating", type="categorical", value=None,
                   allowed_values=["inside", "outside"]),
    AgentInputSlot(name="booked_by_crm", type="text", value=None,
                   mappings=[{"type": "controlled"}]),
    AgentInputSlot(name="language", type="text", value="en"),
]
EXIT_IF = ["slots.city is not null", "slots.guests > 1", "slots.seating is not null"]


def task_input(text="Book a table for 2 in Berlin, outside", exit_if=EXIT_IF, slots=None):
    return agent_input(text, name="booking_agent",
                       slots=[s.model_copy() for s in (slots or SLOTS)],
                       metadata={"exit_if": exit_if})


async def run_task(script, url=None, inp=None, channel=None, **kw):
    async with FakeModelServer({"booking_agent": script}) as fake:
        agent = await build_agent(fake, url, cls=MCPTaskAgent, name="booking_agent",
                                  description="Book a table.", **kw)
        try:
            with anyio.fail_after(30):
                output = await agent.run(inp or task_input(), channel or TimedChannel())
        finally:
            await close(agent)
        return output, fake


async def test_one_set_slot_tool_per_fillable_exit_slot_with_type_and_allowed_values():
    output, fake = await run_task(["For how many people?"])
    tools = {t["function"]["name"]: t["function"] for t in fake.requests[0].body["tools"]}
    assert list(tools) == ["set_slot_city", "set_slot_guests", "set_slot_seating"]
    assert "task_completed" not in tools
    assert "(type: text)" in tools["set_slot_city"]["description"]
    assert "Where to book." in tools["set_slot_city"]["description"]
    assert "inside, outside" in tools["set_slot_seating"]["description"]
    assert tools["set_slot_guests"]["strict"] is True
    assert tools["set_slot_city"]["parameters"]["required"] == ["slot_value"]
    assert "['city', 'guests', 'seating']" in fake.requests[0].system_text
    assert output.status == AgentStatus.INPUT_REQUIRED


async def test_filling_the_slots_completes_silently_with_slot_events():
    channel = TimedChannel()
    script = [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}},
                              {"set_slot_guests": {"slot_value": "2"}},
                              {"set_slot_seating": {"slot_value": "Outside"}}]}]
    output, fake = await run_task(script, channel=channel)
    fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert output.exit_reason == "exit_if"
    assert output.response_message is None
    assert channel.texts == []
    assert kinds(output.events) == ["slot:city=Berlin", "slot:guests=2.0", "slot:seating=outside"]
    assert output.structured_results == [[]]


async def test_an_invalid_value_is_an_error_result_naming_the_allowed_values():
    script = [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}},
                              {"set_slot_guests": {"slot_value": "two"}},
                              {"set_slot_seating": {"slot_value": "terrace"}}]},
              {"tool_calls": [{"set_slot_guests": {"slot_value": 2}},
                              {"set_slot_seating": {"slot_value": "inside"}}],
               "expect": {"messages_contain": ["allowed values: inside, outside",
                                               "is not one"]}}]
    output, fake = await run_task(script)
    fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert kinds(output.events) == ["slot:city=Berlin", "slot:guests=2.0", "slot:seating=inside"]


async def test_a_text_reply_while_slots_are_missing_waits_for_the_user():
    script = [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}}]},
              "How many guests, and inside or outside?"]
    output, fake = await run_task(script)
    fake.assert_done()
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert kinds(output.events) == ["slot:city=Berlin", "bot:input_required"]


async def test_a_text_reply_when_conditions_already_hold_completes_and_is_recorded():
    slots = [s.model_copy(update={"value": v}) for s, v in
             zip(SLOTS, ["Rome", 4.0, "inside", None, "en"], strict=True)]
    output, _ = await run_task(["All set for Rome."], inp=task_input(slots=slots))
    assert output.status == AgentStatus.COMPLETED
    assert kinds(output.events) == ["bot:final_response", "slot:city=Rome", "slot:guests=4.0",
                                    "slot:seating=inside"]


async def test_a_filler_with_an_mcp_tool_then_slots(tools_url):
    script = [{"text": "Checking availability.",
               "tool_calls": [{"echo": {"text": "table free"}}]},
              {"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}},
                              {"set_slot_guests": {"slot_value": 3}},
                              {"set_slot_seating": {"slot_value": "inside"}}]}]
    output, fake = await run_task(script, url=tools_url)
    fake.assert_done()
    assert kinds(output.events) == ["bot:filler_message", "tool:echo", "slot:city=Berlin",
                                    "slot:guests=3.0", "slot:seating=inside"]
    assert output.structured_results == [[{"name": "echo", "result": "table free"}]]


async def test_the_step_limit_without_the_conditions_keeps_waiting():
    script = [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}}]},
              "How many guests?"]
    output, fake = await run_task(script, configuration={"max_agent_steps": 1})
    fake.assert_done()
    assert (output.status, output.exit_reason) == (AgentStatus.INPUT_REQUIRED, "max_steps")
    assert "tools" not in fake.requests[1].body


async def test_a_set_slot_call_for_a_non_exit_slot_is_not_available():
    script = [{"tool_calls": [{"set_slot_language": {"slot_value": "de"}}]}, "Which city?"]
    output, fake = await run_task(script)
    fake.assert_done()
    assert "`set_slot_language`" in fake.requests[1].messages[-1]["content"]
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert "slot:language" not in " ".join(kinds(output.events))
