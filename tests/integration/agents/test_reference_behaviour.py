"""Conversation behaviour pinned to the reference: a tool that returns nothing is a recoverable
error (retried, then the internal-error pattern), whitespace beside ``task_completed`` closes the
run without a message or an extra model call, and slot events are recorded when they happen."""

from __future__ import annotations

import sys

import anyio
import pytest
from subagents.agents.schemas import AgentInputSlot, AgentStatus
from subagents.agents.task_agent import MCPTaskAgent
from subagents.testing import FakeModelServer

from tests.agent_harness import TimedChannel, agent_input, build_agent, close, kinds
from tests.dialogue_harness import Conversation, assistant_for, names, write_project

BLANK_AGENT = {
    "data/blank_flow.yml": """
        flows:
          blank_flow:
            description: looks something up with a tool that returns nothing
            steps:
              - call: blank_agent
              - action: utter_after_weather
        """,
    "sub_agents/blank/__init__.py": "",
    "sub_agents/blank/agent.py": """
        from subagents import MCPOpenAgent
        from subagents.agents.schemas import AgentToolResult
        from subagents.tools.python import tool

        INPUTS = []


        class Blank(MCPOpenAgent):
            async def process_input(self, agent_input):
                INPUTS.append(agent_input.user_message)
                return agent_input

            @tool
            def lookup(self) -> AgentToolResult:
                \"\"\"Look the answer up.\"\"\"
                return AgentToolResult(tool_name="lookup", result=None)
        """,
    "sub_agents/blank/config.yml": """
        agent: {name: blank_agent, description: Looks things up.}
        configuration: {module: sub_agents.blank.agent.Blank, include_date_time: false}
        """,
}


async def test_a_tool_returning_nothing_is_retried_three_times_then_the_internal_error_runs(
        tmp_path, tools_url):
    root = write_project(tmp_path / "assistant", tools_url, BLANK_AGENT)
    script = {"command_generator": ["start flow blank_flow"],
              "blank_agent": [{"tool_calls": [{"lookup": {}}]}] * 3}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("look it up")
        fake.assert_done()
    inputs = sys.modules["sub_agents.blank.agent"].INPUTS  # the project's module, as loaded
    assert inputs == ["look it up"] * 3
    n = names(events)
    assert n.index("agent_cancelled:blank_agent") < n.index("flow_cancelled:blank_flow")
    assert "flow_started:pattern_internal_error" in n
    assert "flow_completed:blank_flow" not in n
    assert texts[-1].startswith("Sorry, something went wrong")


@pytest.mark.parametrize("stream", [False, True])
async def test_whitespace_beside_task_completed_closes_without_a_message_or_extra_call(
        tools_url, stream):
    channel = TimedChannel(streaming=stream)
    script = [{"tool_calls": [{"echo": {"text": "x"}}]},
              {"text": "  \n ", "tool_calls": [{"task_completed": {}}]}]
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, tools_url)
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input(), channel)
        finally:
            await close(agent)
        fake.assert_done()
    assert (output.status, output.exit_reason) == (AgentStatus.COMPLETED, "task_completed")
    assert kinds(output.events) == ["tool:echo"]
    assert channel.texts == []
    assert [kind for kind, _ in channel.log if kind != "event"] == []


async def test_a_slot_set_in_step_one_precedes_the_question_of_step_two():
    slots = [AgentInputSlot(name="city", type="text"), AgentInputSlot(name="date", type="text")]
    inp = agent_input("A table in Oslo", name="booking_agent", slots=slots,
                      metadata={"exit_if": ["slots.city is not null",
                                            "slots.date is not null"]})
    script = [{"tool_calls": [{"set_slot_city": {"slot_value": "Oslo"}}]}, "For which date?",
              {"tool_calls": [{"set_slot_city": {"slot_value": "Bergen"}}]}, "Which date?"]
    async with FakeModelServer({"booking_agent": script}) as fake:
        agent = await build_agent(fake, None, cls=MCPTaskAgent, name="booking_agent")
        try:
            with anyio.fail_after(30):
                first = await agent.run(inp, TimedChannel())
                second = await agent.run(inp.model_copy(update={
                    "user_message": "Bergen, not Oslo",
                    "slots": [s.model_copy(update={"value": "Oslo" if s.name == "city" else None})
                              for s in slots]}), TimedChannel())
        finally:
            await close(agent)
        fake.assert_done()
    assert kinds(first.events) == ["slot:city=Oslo", "bot:input_required"]
    assert kinds(second.events) == ["slot:city=Bergen", "bot:input_required"]
