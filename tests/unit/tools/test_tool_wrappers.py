"""Each tool feature is a toolset wrapper that works on its own, around plain Python tools."""

from __future__ import annotations

import asyncio
import json

import anyio
from subagents.config.sub_agent import ClientToolDef, ToolSettings
from subagents.tools.approvals import ApprovalToolset, answer, is_yes, question
from subagents.tools.base import CallContext, Deferral, PendingCalls, PlannedCall, Tool
from subagents.tools.client_tools import ClientToolset, deliver
from subagents.tools.concurrency import execute_calls
from subagents.tools.executor import FunctionToolset
from subagents.tools.result_budget import RECALL, ResultBudgetToolset
from subagents.tools.state_mapping import StateMappingToolset
from subagents.types import (
    AgentInput,
    AgentInputSlot,
    AgentToolContext,
    AgentToolResult,
    AgentToolSchema,
)

ECHO_PARAMS = {"type": "object", "properties": {"text": {"type": "string"},
                                                "tenant": {"type": "string"}},
               "required": ["text"]}


def echo_tool(name: str = "echo", *, read_only: bool = False, started: list | None = None
              ) -> Tool:
    async def run(arguments: dict, ctx: CallContext) -> AgentToolResult:
        if started is not None:
            started.append(f"{name}+")
            await asyncio.sleep(0)  # let the other read-only calls start
            started.append(f"{name}-")
        return AgentToolResult(tool_name=name, result=json.dumps(arguments, sort_keys=True))

    return Tool(schema=AgentToolSchema(name=name, parameters=ECHO_PARAMS), run=run,
                source="custom", read_only=read_only)


def ctx(**metadata) -> CallContext:
    inp = AgentInput(id="a", metadata=metadata,
                     slots=[AgentInputSlot(name="seen", type="list", value=["a"])])
    return CallContext(inp, AgentToolContext(), timeout=5)


def call_of(toolset, name: str, arguments: dict, call_id: str = "c1") -> PlannedCall:
    tools = {t.name: t for t in toolset.tools()}
    return PlannedCall(call_id, name, arguments, tools.get(name))


async def test_approvals_defer_until_approved():
    toolset = ApprovalToolset(FunctionToolset([echo_tool()]),
                              {"echo": ToolSettings(requires_approval=True)})
    call = call_of(toolset, "echo", {"text": "hi"})
    deferred = await toolset.call(call, ctx())
    assert deferred.deferred == Deferral.APPROVAL
    assert "may I run echo(text='hi')" in question([call])
    toolset.approve([call.id])
    ran = await toolset.call(call, ctx())
    assert (ran.deferred, json.loads(ran.result.result)) == (None, {"text": "hi"})
    pending = PendingCalls.model_validate(
        {"messages": [], "calls": [{"id": "c1", "name": "echo", "arguments": {}}]})
    assert [c.id for c in answer(pending, "yes", {"echo": call.tool}).to_run] == ["c1"]
    assert [c.id for c in answer(pending, "no", {"echo": call.tool}).declined] == ["c1"]
    assert is_yes("Sure, go ahead")
    assert not is_yes("nope")


async def test_client_tools_are_offered_and_deferred_and_results_matched():
    definition = ClientToolDef(name="get_location", description="Where the user is.",
                               parameters={"type": "object", "properties": {}})
    toolset = ClientToolset(FunctionToolset([echo_tool()]), [definition])
    assert [t.name for t in toolset.tools()] == ["echo", "get_location"]
    outcome = await toolset.call(call_of(toolset, "get_location", {}), ctx())
    assert outcome.deferred == Deferral.CLIENT
    pending = PendingCalls.model_validate({
        "messages": [{"role": "assistant"}],
        "calls": [{"id": "a", "name": "get_location"}, {"id": "b", "name": "x"}]})
    delivered = deliver(pending, {"a": {"city": "Lyon"}})
    assert [(c.id, text) for c, text in delivered.results] == [("a", '{"city": "Lyon"}')]
    assert [c.id for c in delivered.waiting] == ["b"]


async def test_state_mapping_hides_and_fills_inputs_and_sets_slots_from_results():
    settings = {"echo": ToolSettings(inputs_from_state={"tenant": "metadata.org.id"},
                                     outputs_to_state={"seen": "text", "raw": "result"})}
    toolset = StateMappingToolset(FunctionToolset([echo_tool()]), settings)
    [offered] = toolset.tools()
    assert "tenant" not in offered.schema.parameters["properties"]
    outcome = await toolset.call(call_of(toolset, "echo", {"text": "b"}),
                                 ctx(org={"id": "acme"}))
    assert json.loads(outcome.result.result) == {"tenant": "acme", "text": "b"}
    effects = {e.name: e for e in outcome.effects}
    assert effects["seen"].value == "b"
    assert effects["seen"].extend_list
    assert effects["raw"].value == outcome.result.result
    assert not effects["raw"].extend_list


async def test_the_result_budget_previews_long_results_and_recall_reads_them():
    toolset = ResultBudgetToolset(FunctionToolset([echo_tool()]), budget=10)
    assert [t.name for t in toolset.tools()] == ["echo", RECALL]
    long = await toolset.call(call_of(toolset, "echo", {"text": "x" * 50}), ctx())
    assert long.result.result == json.dumps({"text": "x" * 50})
    assert long.model_text is not None
    assert "Result truncated" in long.model_text
    recalled = await toolset.call(
        call_of(toolset, RECALL, {"call_id": "c1", "offset": 0, "length": 5}, "c2"), ctx())
    assert recalled.result.result == '{"tex'
    assert recalled.model_text is None


async def test_read_only_calls_overlap_and_others_run_alone():
    started: list[str] = []
    tools = [echo_tool("r1", read_only=True, started=started),
             echo_tool("r2", read_only=True, started=started),
             echo_tool("w", started=started)]
    toolset = FunctionToolset(tools)
    calls = [call_of(toolset, n, {"text": n}, f"id-{n}") for n in ("r1", "r2", "w")]
    with anyio.fail_after(5):
        outcomes = await execute_calls(toolset, calls, ctx(), max_parallel=2)
    assert [o.call.name for o in outcomes] == ["r1", "r2", "w"]
    assert started.index("r2+") < started.index("r1-")  # the read-only calls overlapped
    assert started[-2:] == ["w+", "w-"]  # the other call ran alone, after them


async def test_the_function_toolset_caps_results_and_reports_failures_as_results():
    toolset = FunctionToolset([echo_tool()], max_result_chars=20)
    capped = await toolset.call(call_of(toolset, "echo", {"text": "y" * 100}), ctx())
    assert capped.result.result.startswith('{"text": "yyyyyyyyy')
    assert "characters in all" in capped.result.result
    invalid = await toolset.call(call_of(toolset, "echo", {"text": 3}), ctx())
    assert invalid.result.is_error
