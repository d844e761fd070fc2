"""What one step of the agent loop does again, and what it does once per run.

The system prompt renders once per run while its context is unchanged and again as soon as a
slot it shows changes; a lone tool call runs in the agent's own task.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import (
    AgentInput,
    AgentInputSlot,
    AgentStatus,
    AgentToolContext,
    AgentToolResult,
)
from subagents.agents.task_agent import MCPTaskAgent
from subagents.testing import FakeModelServer

from tests.agent_harness import TimedChannel, agent_input, build_agent, close


class RenderProbe:
    """A slot value that counts how often a prompt showed it."""

    def __init__(self) -> None:
        self.renders = 0

    def __str__(self) -> str:
        self.renders += 1
        return "probe"


class NoopAgent(MCPOpenAgent):
    """Offers one read-only tool that notes the task it ran in."""

    ran_in: list[asyncio.Task[Any] | None]

    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        self.ran_in = []

        def noop(arguments: dict[str, Any], context: AgentToolContext) -> AgentToolResult:
            self.ran_in.append(asyncio.current_task())
            return AgentToolResult(tool_name="noop", result="ok")

        return [{"type": "function", "function": {
            "name": "noop", "description": "Do nothing.",
            "parameters": {"type": "object", "properties": {}}},
            "tool_executor": noop, "read_only": True}]


STEPS = [{"text": "Working.", "tool_calls": [{"noop": {}}]},
         {"text": "Still working.", "tool_calls": [{"noop": {}}]},
         {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]


async def _run(fake: FakeModelServer, agent_cls: type, inp: AgentInput, name: str,
               configuration: dict[str, Any]) -> Any:
    agent = await build_agent(fake, None, cls=agent_cls, name=name,
                              configuration=configuration)
    try:
        with anyio.fail_after(30):
            return agent, await agent.run(inp)
    finally:
        await close(agent)


async def test_an_unchanged_prompt_renders_once_per_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompt.jinja2").write_text("You help. Probe: {{ slots.probe }}")
    probe = RenderProbe()
    inp = agent_input(slots=[AgentInputSlot(name="probe", type="any", value=probe)])
    async with FakeModelServer({"weather_agent": STEPS}) as fake:
        _, output = await _run(fake, NoopAgent, inp, "weather_agent",
                               {"prompt_template": "prompt.jinja2"})
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert [r.messages[0]["content"] for r in fake.requests] == ["You help. Probe: probe"] * 3
    assert probe.renders == 1


async def test_a_slot_set_during_the_run_shows_in_the_next_prompt(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompt.jinja2").write_text("City: {{ slots.city or 'unknown' }}")
    slots = [AgentInputSlot(name="city", type="text", value=None),
             AgentInputSlot(name="guests", type="float", value=None)]
    inp = agent_input("A table for 2 in Berlin", name="booking_agent", slots=slots,
                      metadata={"exit_if": ["slots.city is not null", "slots.guests > 1"]})
    script = [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}}]},
              {"tool_calls": [{"set_slot_guests": {"slot_value": 2}}]}]
    async with FakeModelServer({"booking_agent": script}) as fake:
        _, output = await _run(fake, MCPTaskAgent, inp, "booking_agent",
                               {"prompt_template": "prompt.jinja2"})
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert [r.messages[0]["content"] for r in fake.requests] == ["City: unknown",
                                                                  "City: Berlin"]


async def test_a_lone_tool_call_runs_in_the_agents_own_task():
    async with FakeModelServer({"weather_agent": STEPS}) as fake:
        agent, output = await _run(fake, NoopAgent, agent_input(), "weather_agent", {})
        fake.assert_done()
    assert output.tool_calls == {"noop": 2, "task_completed": 1}
    assert agent.ran_in == [asyncio.current_task()] * 2


async def test_default_hooks_replaced_on_the_instance_are_still_called():
    """Conversation tests count hook calls by wrapping the hooks on the agent instance."""
    calls: list[str] = []
    async with FakeModelServer({"weather_agent": STEPS}) as fake:
        agent = await build_agent(fake, None, cls=NoopAgent)
        tool_output, metadata = agent.process_tool_output, agent.build_custom_tool_call_metadata

        async def counted_tool_output(*args: Any) -> Any:
            calls.append("process_tool_output")
            return await tool_output(*args)

        async def counted_metadata(*args: Any) -> Any:
            calls.append("build_custom_tool_call_metadata")
            return await metadata(*args)

        agent.process_tool_output = counted_tool_output  # type: ignore[method-assign]
        agent.build_custom_tool_call_metadata = counted_metadata  # type: ignore[method-assign]
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input())
        finally:
            await close(agent)
        fake.assert_done()
    assert output.tool_calls == {"noop": 2, "task_completed": 1}
    assert calls == ["build_custom_tool_call_metadata", "process_tool_output"] * 2


async def test_a_filler_repeated_later_in_the_same_run_is_held():
    """The fillers seen so far are kept per run: one sent in an earlier step still counts."""
    script = [{"text": "Working.", "tool_calls": [{"noop": {}}]},
              {"text": "Checking again.", "tool_calls": [{"noop": {}}]},
              {"text": "Working!", "tool_calls": [{"noop": {}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    channel = TimedChannel()
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, None, cls=NoopAgent)
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input(), channel)
        finally:
            await close(agent)
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    assert channel.texts == ["Working.", "Checking again.", "Done."]


class StuckAgent(MCPOpenAgent):
    """Offers a custom tool that never returns (nothing enforces its timeout but the loop)."""

    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        async def stuck(arguments: dict[str, Any], context: AgentToolContext) -> AgentToolResult:
            await asyncio.Event().wait()
            raise AssertionError("never reached")

        return [{"type": "function", "function": {
            "name": "stuck", "description": "Never returns.",
            "parameters": {"type": "object", "properties": {}}},
            "tool_executor": stuck}]


async def test_a_custom_tool_that_never_returns_becomes_an_error_result():
    script = [{"text": "Trying.", "tool_calls": [{"stuck": {}}]},
              {"text": "That did not work.", "tool_calls": [{"task_completed": {}}]}]
    async with FakeModelServer({"weather_agent": script}) as fake:
        _, output = await _run(fake, StuckAgent, agent_input(), "weather_agent",
                               {"tool_timeout": 0.05})
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    [executed] = [e for e in output.events if e["event"] == "mcp_tool_executed"]
    assert executed["is_error"] is True
    assert fake.requests[1].messages[-1]["role"] == "tool"
    assert fake.requests[1].messages[-1]["content"].startswith("Error: ")
