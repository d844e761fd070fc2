"""Flow steps that call an MCP tool directly (``call`` + ``mcp_server`` + ``mapping``) against
a real MCP server over HTTP: slots in, slots out, events, and every failure row."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from subagents.dialogue import mcp_tool_steps
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

DONE = "Done here."


def flow(tool: str, inputs: list[dict[str, str]], outputs: list[dict[str, str]],
         server: str = "tools") -> dict[str, Any]:
    return {"steps": [
        {"set_slots": [{"name": "Ada"}, {"delay": 2.0}]},
        {"id": "the_call", "call": tool, "mcp_server": server,
         "mapping": {"input": inputs, "output": outputs}, "next": "after"},
        {"id": "after", "action": "utter_done"}]}


NAME_IN = [{"param": "text", "slot": "name"}]
CITY_OUT = [{"slot": "city", "value": "result.structuredContent.result"}]
FLOWS = {
    "echo_flow": flow("echo", NAME_IN, [
        *CITY_OUT, {"slot": "lookup_result", "value": "result.structuredContent"}]),
    "text_flow": flow("echo", NAME_IN, [{"slot": "city",
                                         "value": "result.content[0].text | upper"}]),
    "missing_flow": flow("echo", NAME_IN, [{"slot": "city",
                                            "value": "result.structuredContent.nothing"}]),
    "deeper_flow": flow("echo", NAME_IN, [
        {"slot": "city", "value": "result.structuredContent.nothing.deeper"}]),
    "empty_output_flow": flow("echo", NAME_IN, []),
    "null_flow": flow("echo", [{"param": "text", "slot": "city"}],
                      [{"slot": "lookup_result", "value": "result.isError"}]),
    "fail_flow": flow("fail", [{"param": "message", "slot": "name"}], CITY_OUT),
    "slow_flow": flow("slow", [{"param": "seconds", "slot": "delay"}], CITY_OUT),
    "unlisted_flow": flow("not_a_tool", NAME_IN, CITY_OUT),
    "very_slow_flow": {"steps": [
        {"set_slots": [{"delay": 60.0}]},
        {"id": "the_call", "call": "slow", "mcp_server": "tools",
         "mapping": {"input": [{"param": "seconds", "slot": "delay"}], "output": CITY_OUT},
         "next": "after"},
        {"id": "after", "action": "utter_done"}]},
    "down_flow": flow("echo", NAME_IN, CITY_OUT, server="down"),
}


@pytest.fixture
def project(tmp_path, tools_url):
    flows = json.dumps({"flows": {name: {"description": name, **body}
                                   for name, body in FLOWS.items()}}, indent=2)
    return write_project(tmp_path / "p", tools_url, {
        "data/flows.yml": flows,
        "data/domain.yml": f"""
            slots:
              name: {{type: text}}
              city: {{type: text}}
              lookup_result: {{type: any}}
              delay: {{type: float}}
            responses:
              utter_done: [{{text: "{DONE}"}}]
            actions: [action_lookup]
            """,
        "endpoints.yml": f"""
            model_groups:
              - id: llm
                models: [{{provider: openai, model: gpt-test}}]
            mcp_servers:
              - {{name: tools, type: http, url: {tools_url}}}
              - {{name: down, type: http, url: "http://127.0.0.1:9/mcp"}}
            """,
    })


async def run_flow(project, flow: str):
    script = {"command_generator": [f"start flow {flow}"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("go")
    return texts, events


def said_sorry(events, text: str) -> bool:
    """The user heard the internal-error response."""
    return any(e["event"] == "bot" and e["text"] == text and
               e["metadata"].get("utter_action") == "utter_internal_error_rasa" for e in events)


def tool_events(events):
    return [e for e in events if e["event"] == "mcp_tool_executed"]


async def test_inputs_from_slots_outputs_into_slots_and_the_flow_continues(project):
    texts, events = await run_flow(project, "echo_flow")
    flow = names(events)
    at = flow.index("tool:echo")
    assert flow[at + 1:at + 3] == ["slot:city=Ada", 'slot:lookup_result={"result": "Ada"}']
    assert texts[0] == DONE
    assert "flow_completed:echo_flow" in flow
    (event,) = tool_events(events)
    assert event["arguments"] == {"text": "Ada"}
    assert event["is_error"] is False
    assert event["result"]["structuredContent"] == {"result": "Ada"}
    assert event["metadata"]["flow_id"] == "echo_flow"
    assert event["metadata"]["step_id"] == "the_call"


async def test_jinja_expressions_over_the_content(project):
    _, events = await run_flow(project, "text_flow")
    assert "slot:city=ADA" in names(events)


async def test_a_missing_path_sets_none_and_an_unset_slot_is_sent_as_null(project):
    _, events = await run_flow(project, "missing_flow")
    assert "slot:city=None" in names(events)
    _, events = await run_flow(project, "null_flow")
    assert tool_events(events)[0]["arguments"] == {"text": None}


@pytest.mark.parametrize(("flow", "with_arguments"), [
    ("fail_flow", True),        # the tool reports an error
    ("slow_flow", False),       # the tool times out
    ("unlisted_flow", False),   # the server does not list the tool
    ("down_flow", False),       # the server is unreachable
])
async def test_failures_run_the_internal_error_pattern_and_the_flow_goes_on(
        project, monkeypatch, flow, with_arguments):
    monkeypatch.setattr(mcp_tool_steps, "TOOL_STEP_TIMEOUT", 0.5)
    texts, events = await run_flow(project, flow)
    assert texts[1] == DONE
    assert said_sorry(events, texts[0])
    order = names(events)
    assert order.index("flow_started:pattern_internal_error") < order.index(f"bot:{DONE}")
    assert not any(n.startswith("slot:city") for n in order)
    (event,) = tool_events(events)
    assert event["is_error"] is True
    assert event["result"] is None
    assert bool(event["arguments"]) is with_arguments
    pattern = next(e for e in events if e.get("flow_id") == "pattern_internal_error")
    assert pattern is not None
    assert f"flow_completed:{flow}" in order


async def test_the_turn_s_deadline_bounds_the_tool_call(project):
    """A tool slower than what is left of the turn is cut before the turn's own deadline, so
    the turn still ends in the internal-error pattern and the rest of the flow."""
    script = {"command_generator": ["start flow very_slow_flow"]}
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, turn_timeout=4.0) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("go")
    assert DONE in texts
    assert said_sorry(events, texts[0])
    (event,) = tool_events(events)
    assert event["is_error"] is True
    assert "flow_completed:very_slow_flow" in names(events)


@pytest.mark.parametrize("flow", ["deeper_flow", "empty_output_flow"])
async def test_a_result_that_cannot_be_mapped_keeps_the_success_event(project, flow):
    texts, events = await run_flow(project, flow)
    assert texts[1] == DONE
    assert said_sorry(events, texts[0])
    (event,) = tool_events(events)
    assert event["is_error"] is False
    assert json.dumps(event["result"])
