"""Every hook overridden once; custom Python tools; tool-context metadata stays hidden."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from subagents import events as ev
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import (
    AgentInput,
    AgentOutput,
    AgentStatus,
    AgentToolContext,
    AgentToolResult,
)
from subagents.testing import FakeModelServer
from subagents.tools.python import tool

from tests.agent_harness import IN_MEMORY, TimedChannel, agent_input, build_agent, close, kinds


@pytest.fixture
def tools_url() -> str:
    """This module's agents reach the test MCP server in memory (the transport is not tested)."""
    return IN_MEMORY


SECRET = "tenant-secret-42"


async def run_with(cls, script, url=None, inp=None, channel=None, **kw):
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, url, cls=cls, **kw)
        try:
            with anyio.fail_after(30):
                output = await agent.run(inp or agent_input(), channel or TimedChannel())
        finally:
            await close(agent)
        return output, fake, agent


class CustomTools(MCPOpenAgent):
    seen: list[dict[str, Any]]

    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        self.seen = []

        def sync_lookup(arguments: dict[str, Any], context: AgentToolContext) -> AgentToolResult:
            self.seen.append(dict(context.metadata))
            return AgentToolResult(tool_name="lookup_order", result=f"order {arguments['id']}")

        async def async_refund(arguments: dict[str, Any],
                               context: AgentToolContext) -> AgentToolResult:
            return AgentToolResult(tool_name="refund", result=f"refunded {arguments['amount']}")

        return [
            {"type": "function", "function": {
                "name": "lookup_order", "description": "Find an order.",
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}},
                               "required": ["id"]}},
             "tool_executor": sync_lookup},
            {"type": "function", "function": {
                "name": "refund", "description": "Refund an amount.",
                "parameters": {"type": "object", "properties": {"amount": {"type": "number"}},
                               "required": ["amount"]}},
             "tool_executor": async_refund},
        ]

    async def build_custom_tool_call_metadata(self, context: dict[str, Any]) -> dict[str, Any]:
        return {"credential": "from-hook", "tool": context["tool_name"]}


async def test_custom_tools_sync_and_async_get_metadata_that_the_model_never_sees():
    script = [{"tool_calls": [{"lookup_order": {"id": "A1"}}, {"refund": {"amount": 5}}]},
              {"text": "Refunded.", "tool_calls": [{"task_completed": {}}]}]
    inp = agent_input(metadata={"tenant_secret": SECRET})
    output, fake, agent = await run_with(CustomTools, script, inp=inp)
    fake.assert_done()
    assert kinds(output.events) == ["tool:lookup_order", "tool:refund", "bot:final_response"]
    assert [e["result"] for e in output.events[:2]] == ["order A1", "refunded 5"]
    assert agent.seen[0]["tenant_secret"] == SECRET
    assert agent.seen[0]["credential"] == "from-hook"
    assert agent.seen[0]["tool"] == "lookup_order"
    for request in fake.requests:
        assert SECRET not in json.dumps(request.body)
        assert "from-hook" not in json.dumps(request.body)
    assert fake.requests[0].tool_names == ["task_completed", "lookup_order", "refund"]


class Decorated(MCPOpenAgent):
    @tool(read_only=True)
    def convert(self, amount: float, currency: str = "EUR") -> str:
        """Convert an amount to a currency.

        More details that are not part of the description."""
        return f"{amount * 2:.1f} {currency}"

    @tool
    async def whoami(self, context: AgentToolContext) -> dict[str, Any]:
        """Who is asking."""
        return {"sender": context.metadata.get("sender_id")}


async def test_the_tool_decorator_builds_schemas_from_signatures():
    script = [{"tool_calls": [{"convert": {"amount": 2}}, {"whoami": {}}]}, "Done."]
    output, fake, _ = await run_with(Decorated, script)
    tools = {t["function"]["name"]: t["function"] for t in fake.requests[0].body["tools"]}
    assert tools["convert"]["description"] == "Convert an amount to a currency."
    assert tools["convert"]["parameters"]["required"] == ["amount"]
    assert "context" not in tools["whoami"]["parameters"].get("properties", {})
    assert [e["result"] for e in output.events[:2]] == ["4.0 EUR", '{"sender": "user-1"}']


class Hooked(MCPOpenAgent):
    calls: list[str] = []

    async def process_input(self, input: AgentInput) -> AgentInput:
        self.calls.append("process_input")
        return input.model_copy(update={"user_message": "REWRITTEN"})

    async def process_output(self, output: AgentOutput) -> AgentOutput:
        self.calls.append("process_output")
        return output.model_copy(update={"metadata": {"post": True}})

    @staticmethod
    def get_task_completed_tool() -> dict[str, Any] | None:
        return {"type": "function", "function": {
            "name": "task_completed", "description": "Custom completion.",
            "parameters": {"type": "object", "properties": {}}, "strict": True}}

    @staticmethod
    def get_system_message_for_empty_content_at_task_completion() -> dict[str, Any]:
        return {"role": "system", "content": "CUSTOM CLOSING"}

    def build_messages_for_llm_request(self, context: AgentInput,
                                       turns: int = 10) -> list[dict[str, Any]]:
        self.calls.append("build_messages_for_llm_request")
        return [*super().build_messages_for_llm_request(context, turns),
                {"role": "user", "content": "EXTRA MESSAGE"}]

    def render_prompt_template(self, context: AgentInput) -> str:
        return "CUSTOM PROMPT for " + context.id

    async def process_tool_output(self, current_iteration_results, cumulative_results,
                                  output_channel) -> list[dict[str, Any]]:
        self.calls.append(f"process_tool_output:{len(current_iteration_results)}")
        return [ev.slot_set("last_echo", next(iter(current_iteration_results.values())).result)]


async def test_every_hook_can_be_overridden(tools_url):
    Hooked.calls = []
    script = [{"tool_calls": [{"echo": {"text": "hi"}}], "expect": {
                  "system_contains": ["CUSTOM PROMPT for weather_agent"],
                  "messages_contain": ["REWRITTEN", "EXTRA MESSAGE"]}},
              {"tool_calls": [{"task_completed": {}}]},
              {"text": "Bye.", "expect": {"system_contains": ["CUSTOM CLOSING"]}}]
    output, fake, _ = await run_with(Hooked, script, url=tools_url)
    fake.assert_done()
    assert fake.requests[0].body["tools"][-1]["function"]["description"] == "Custom completion."
    assert output.metadata == {"post": True}
    assert kinds(output.events) == ["tool:echo", "slot:last_echo=hi", "bot:final_response"]
    assert Hooked.calls[0] == "process_input"
    assert "process_tool_output:1" in Hooked.calls
    assert Hooked.calls[-1] == "process_output"


class NoCompletion(MCPOpenAgent):
    @staticmethod
    def get_task_completed_tool() -> dict[str, Any] | None:
        return None


async def test_removing_task_completed_removes_the_tool():
    _, fake, _ = await run_with(NoCompletion, ["Hello"])
    assert "tools" not in fake.requests[0].body


class OwnLoop(MCPOpenAgent):
    async def send_message(self, agent_input, output_channel=None) -> AgentOutput:
        await output_channel.send_text_message(agent_input.recipient_id, "own loop")
        return AgentOutput(id=self.name, status=AgentStatus.RECOVERABLE_ERROR,
                           error_message="try again")


async def test_send_message_can_be_replaced_and_any_status_passes_through():
    channel = TimedChannel()
    output, fake, _ = await run_with(OwnLoop, [], channel=channel)
    fake.assert_done()
    assert output.status == AgentStatus.RECOVERABLE_ERROR
    assert channel.texts == ["own loop"]


class FailingInput(MCPOpenAgent):
    async def process_input(self, input: AgentInput) -> AgentInput:
        raise ValueError("bad input")


async def test_a_failing_hook_is_a_fatal_error_not_a_crash():
    output, fake, _ = await run_with(FailingInput, [])
    fake.assert_done()
    assert output.status == AgentStatus.FATAL_ERROR
    assert "bad input" in output.error_message


class BadCustom(MCPOpenAgent):
    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        def explode(arguments, context):
            raise RuntimeError("executor exploded")

        def wrong(arguments, context):
            return 42

        return [{"type": "function", "function": {"name": "explode", "description": "x"},
                 "tool_executor": explode},
                {"type": "function", "function": {"name": "wrong", "description": "y"},
                 "tool_executor": wrong}]


async def test_custom_tool_failures_are_error_results_for_the_model():
    script = [{"tool_calls": [{"explode": {}}, {"wrong": {}}]}, "Something broke, sorry."]
    output, fake, _ = await run_with(BadCustom, script)
    fake.assert_done()
    assert kinds(output.events) == ["tool:explode!", "tool:wrong!", "bot:input_required"]
    assert "executor exploded" in output.events[0]["error_message"]
    assert "AgentToolResult" in output.events[1]["error_message"]
