"""What one step of the agent loop does again, and what it does once per run.

The system prompt renders once per run while its context is unchanged and again as soon as a
slot it shows changes; a lone tool call runs in the agent's own task.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from structlog.testing import capture_logs
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


# ---------------------------------------------------------------------------- custom tools
def _tool(executor: Any, name: str = "probe") -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": "Probe.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        "tool_executor": executor, "read_only": True}


class SyncAgent(MCPOpenAgent):
    """A synchronous custom tool that notes what it saw and may change the run's input."""

    seen: list[dict[str, Any]]
    current: AgentInput | None = None

    async def process_input(self, input: AgentInput) -> AgentInput:
        self.current = input
        return input

    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        self.seen = []

        def probe(arguments: dict[str, Any], context: AgentToolContext) -> AgentToolResult:
            self.seen.append({"arguments": arguments, "metadata": dict(context.metadata)})
            context.metadata["scribbled"] = True  # the executor's own copy
            assert self.current is not None
            self.current.metadata["step"] = len(self.seen)  # the run's input changes
            return AgentToolResult(tool_name="probe", result=f"call {len(self.seen)}")

        return [_tool(probe)]


PROBE_STEPS = [{"text": "Looking.", "tool_calls": [{"probe": {"city": "Berlin"}}]},
               {"text": "Looking again.", "tool_calls": [{"probe": {}}]},
               {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]


async def test_a_synchronous_custom_tool_answers_at_once_without_a_coroutine():
    async with FakeModelServer({"weather_agent": PROBE_STEPS}) as fake:
        agent = await build_agent(fake, None, cls=SyncAgent)
        try:
            from subagents.agents.run import Run as AgentRun
            from subagents.tools.base import CallContext

            run = AgentRun(agent_input(), None)
            agent._engine.prepare(run, agent.POLICY(agent, run), [])
            ctx = CallContext(run.input, AgentToolContext(), timeout=5)
            agent.current = run.input
            answer = run.tools["probe"].run({}, ctx)
        finally:
            await close(agent)
    assert answer == AgentToolResult(tool_name="probe", result="call 1")


async def test_each_call_sees_the_input_metadata_of_its_step_in_a_context_of_its_own():
    async with FakeModelServer({"weather_agent": PROBE_STEPS}) as fake:
        agent, output = await _run(fake, SyncAgent, agent_input(), "weather_agent", {})
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    base = {"sender_id": "user-1", "agent_id": "assistant-1", "model_id": "model-1"}
    assert agent.seen == [{"arguments": {"city": "Berlin"}, "metadata": base},
                          {"arguments": {}, "metadata": {**base, "step": 1}}]
    assert [m["content"] for m in fake.requests[2].messages if m["role"] == "tool"] == \
        ["call 1", "call 2"]


class OddToolsAgent(MCPOpenAgent):
    """Synchronous executors that fail, hand back an awaitable, or read a hidden argument."""

    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        def boom(arguments: dict[str, Any], context: AgentToolContext) -> AgentToolResult:
            raise ValueError("no weather today")

        async def later(city: str) -> AgentToolResult:
            await asyncio.sleep(0)
            return AgentToolResult(tool_name="later", result=f"later in {city}")

        def deferred(arguments: dict[str, Any], context: AgentToolContext) -> Any:
            return later(arguments.get("city", "nowhere"))  # a plain function's awaitable

        def text(arguments: dict[str, Any], context: AgentToolContext) -> Any:
            return f"text for {arguments.get('city')}"

        return [_tool(boom, "boom"), _tool(deferred, "deferred"), _tool(text, "text")]


async def test_synchronous_executors_fail_await_and_map_state_as_before():
    script = [{"tool_calls": [{"boom": {}}, {"deferred": {"city": "Oslo"}}, {"text": {}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    conf = {"tools": {"text": {"inputs_from_state": {"city": "metadata.home"}}}}
    inp = agent_input(metadata={"home": "Lyon"})
    async with FakeModelServer({"weather_agent": script}) as fake:
        _, output = await _run(fake, OddToolsAgent, inp, "weather_agent", conf)
        fake.assert_done()
    executed = [(e["tool_name"], e["is_error"], e["result"], e["error_message"])
                for e in output.events if e["event"] == "mcp_tool_executed"]
    assert executed == [
        ("boom", True, None, "tool 'boom' failed: ValueError: no weather today"),
        ("deferred", False, "later in Oslo", None),
        ("text", False, "text for Lyon", None)]
    offered = {t["function"]["name"]: t for t in fake.requests[0].body["tools"]}
    assert "city" not in offered["text"]["function"]["parameters"]["properties"]


# ---------------------------------------------------------------------------- built-in tools
class ClosingAgent(MCPOpenAgent):
    """Overrides the completion tool: the override is asked on every run."""

    asked = 0

    @staticmethod
    def get_task_completed_tool() -> dict[str, Any] | None:
        ClosingAgent.asked += 1
        tool = MCPOpenAgent.get_task_completed_tool()
        assert tool is not None
        tool["function"]["description"] = f"Finish (asked {ClosingAgent.asked})."
        return tool


async def test_an_overridden_completion_tool_is_asked_on_every_run():
    done = [{"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    ClosingAgent.asked = 0
    async with FakeModelServer({"weather_agent": done * 2}) as fake:
        agent = await build_agent(fake, None, cls=ClosingAgent)
        try:
            with anyio.fail_after(30):
                for _ in range(2):
                    assert (await agent.run(agent_input())).status == AgentStatus.COMPLETED
        finally:
            await close(agent)
        fake.assert_done()
    described = [t["function"]["description"] for r in fake.requests for t in r.body["tools"]
                 if t["function"]["name"] == "task_completed"]
    assert len(described) == 2
    assert described[0] != described[1]


async def test_the_default_built_in_tools_are_built_once_per_agent():
    async with FakeModelServer({"weather_agent": []}) as fake:
        agent = await build_agent(fake, None, cls=NoopAgent)
        try:
            from subagents.agents.policies import builtin_schemas

            first = builtin_schemas(agent, agent_input())
            second = builtin_schemas(agent, agent_input("Another question"))
        finally:
            await close(agent)
    assert [s.name for s in first] == ["task_completed"]
    assert second is first


async def test_a_completion_tool_replaced_on_the_instance_is_used():
    done = [{"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    async with FakeModelServer({"weather_agent": done}) as fake:
        agent = await build_agent(fake, None, cls=NoopAgent)
        agent.get_task_completed_tool = lambda: {  # type: ignore[method-assign]
            "type": "function", "function": {"name": "task_completed",
                                             "description": "Replaced.", "parameters": {}}}
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input())
        finally:
            await close(agent)
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    described = {t["function"]["name"]: t["function"]["description"]
                 for t in fake.requests[0].body["tools"]}
    assert described["task_completed"] == "Replaced."


# ---------------------------------------------------------------------------- logs
async def test_the_step_log_events_are_still_emitted():
    script = [{"text": "Working.", "tool_calls": [{"noop": {}}]},
              {"text": "Working.", "tool_calls": [{"noop": {}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, None, cls=NoopAgent)
        try:
            with capture_logs() as logs, anyio.fail_after(30):
                output = await agent.run(agent_input(), TimedChannel())
        finally:
            await close(agent)
        fake.assert_done()
    assert output.status == AgentStatus.COMPLETED
    seen = [(e["event"], e["log_level"]) for e in logs]
    assert seen.count(("llm.call.finished", "debug")) == 3
    assert seen.count(("agent.tool.finished", "info")) == 2
    assert ("agent.filler.repeated", "info") in seen
    assert seen[-1] == ("agent.run.finished", "info")
    [call] = [e for e in logs if e["event"] == "llm.call.finished"][:1]
    assert set(call) >= {"model", "streamed", "tool_calls", "duration_ms", "prompt_tokens",
                         "completion_tokens"}
    [tool] = [e for e in logs if e["event"] == "agent.tool.finished"][:1]
    assert (tool["tool"], tool["source"], tool["is_error"]) == ("noop", "custom", False)
