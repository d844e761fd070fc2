"""Shortcuts on the agent loop's hot path give exactly what the general path gives."""

from __future__ import annotations

import itertools
import json

import pytest
from subagents import events as ev
from subagents.agents.budgets import caps_set
from subagents.agents.plan import Plan, assistant_message
from subagents.config.budgets import BudgetCaps, Budgets
from subagents.llm import LLMResponse, ToolCall
from subagents.llm.openai_compat import parse_completion as _parse_completion
from subagents.llm.openai_compat import tool_call as _tool_call
from subagents.tools.base import PlannedCall
from subagents.types import McpToolExecuted


def test_a_tool_executed_event_is_the_typed_events_dict():
    args = {"city": "Berlin"}
    built = ev.mcp_tool_executed("weather", args, "sunny", is_error=False, error_message=None,
                                 agent_id="weather_agent::mcp_open", duration_ms=1.5)
    typed = McpToolExecuted(tool_name="weather", arguments=args, result="sunny",
                            is_error=False, error_message=None,
                            agent_id="weather_agent::mcp_open", duration_ms=1.5,
                            timestamp=built["timestamp"]).to_dict()
    assert built == typed
    assert list(built) == list(typed)


@pytest.mark.parametrize("values", list(itertools.product([None, 3], [None, 2.5], [None, 7])))
def test_caps_are_set_exactly_when_the_budgets_say_they_are_enabled(values):
    calls, cost, tokens = values
    for budgets in (Budgets(per_run=BudgetCaps(model_calls=calls, cost_usd=cost)),
                    Budgets(per_conversation=BudgetCaps(model_tokens=tokens, tool_calls=calls)),
                    Budgets(per_run=BudgetCaps(tool_calls=tokens),
                            per_conversation=BudgetCaps(cost_usd=cost))):
        assert caps_set(budgets) is budgets.enabled


def test_empty_arguments_parse_to_a_fresh_object_each_time():
    first, second = _tool_call("call_1", "noop", "{}", 0), _tool_call(None, None, "{}", 3)
    assert (first.id, first.name, first.raw_arguments, first.arguments) == \
        ("call_1", "noop", "{}", {})
    assert (second.id, second.name, second.arguments) == ("call_3", "", {})
    assert first.arguments is not second.arguments
    assert _tool_call("c", "n", "{ }", 0).arguments == {}
    assert _tool_call("c", "n", "[]", 0).parse_error == "the arguments must be a JSON object"


def test_a_completion_parses_as_before_shape_by_shape():
    reply = {"choices": [{"message": {"content": "Hi", "tool_calls": [
        {"id": "a", "function": {"name": "noop", "arguments": "{}"}},
        {"id": "b", "function": {"name": "echo", "arguments": '{"x": 1}'}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 8, "completion_tokens": 3}}
    parsed = _parse_completion(reply)
    assert (parsed.text, parsed.finish_reason, parsed.usage.total_tokens) == \
        ("Hi", "tool_calls", 11)
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == \
        [("a", "noop", {}), ("b", "echo", {"x": 1})]
    empty = _parse_completion({"choices": [], "usage": {"prompt_tokens": 2}})
    assert (empty.text, empty.tool_calls, empty.usage.prompt_tokens) == (None, [], 2)
    for wrong in ([], {"choices": {"a": 1}}, {"choices": [1]}, {"choices": [{"message": 1}]},
                  {"choices": [{"message": {"content": 5}}]},
                  {"choices": [{"message": {"tool_calls": {"a": 1}}}]},
                  {"choices": [{"message": {"tool_calls": [{"function": 1}]}}]}):
        with pytest.raises(TypeError):
            _parse_completion(wrong)


def test_the_assistant_turn_repeats_arguments_as_json_in_call_order():
    calls = [ToolCall("b", "echo", '{"x":1}', {"x": 1}), ToolCall("a", "noop", "{}", {})]
    response = LLMResponse("Working.", calls)
    plan = Plan(response=response, text="Working.",
                calls=[PlannedCall("a", "noop", {}, None)], unavailable=[],
                builtin=[PlannedCall("b", "echo", {"x": 1}, None)], malformed=[])
    message = assistant_message(plan)
    assert message == {"role": "assistant", "content": "Working.", "tool_calls": [
        {"id": "b", "type": "function", "function": {"name": "echo", "arguments": '{"x": 1}'}},
        {"id": "a", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]}
    assert json.dumps({}) == "{}"
