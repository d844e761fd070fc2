"""Budgets: at each cap (per run and per conversation) the agent ends with a real reply, the
run's exit reason is ``budget``, and an ``agent_budget_exceeded`` event names the cap."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from subagents.agents.budgets import BUDGET_SENTENCE
from subagents.config.project import load_project
from subagents.exceptions import ProjectInvalidError
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

AFTER = "Anything else about the weather?"


def project_with(tmp_path, tools_url: str, budgets: str):
    return write_project(tmp_path / "assistant", tools_url, {
        "sub_agents/weather/config.yml": f"""
            agent: {{name: weather_agent, description: Tells the weather.}}
            configuration:
              include_date_time: false
              budgets: {budgets}
            connections:
              mcp_servers: [{{name: tools, include_tools: [echo]}}]
            """})


async def talk(project, script: dict[str, list[Any]],
               messages: list[str]) -> tuple[list[list[str]], list[list[dict[str, Any]]],
                                             FakeModelServer]:
    texts, turns = [], []
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(30):
            for message in messages:
                said, events = await convo.say(message)
                texts.append(said)
                turns.append(events)
        fake.assert_done()
    return texts, turns, fake


def budget_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "agent_budget_exceeded"]


async def test_the_run_tool_call_cap_stops_before_the_calls_and_asks_for_a_closing_reply(
        tmp_path, tools_url):
    project = project_with(tmp_path, tools_url, "{per_run: {tool_calls: 2}}")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [
                  {"tool_calls": [{"echo": {"text": "Berlin"}}]},
                  {"tool_calls": [{"echo": {"text": "Paris"}}, {"echo": {"text": "Rome"}}]},
                  "Berlin is sunny; I could not check Paris and Rome."]}
    texts, turns, fake = await talk(project, script, ["weather in three cities?"])
    events = turns[0]
    assert [n for n in names(events) if n.startswith("tool:")] == ["tool:echo"]
    [hit] = budget_events(events)
    assert (hit["cap"], hit["limit"], hit["used"]) == ("per_run.tool_calls", 2, 1)
    assert texts[0][:2] == ["Berlin is sunny; I could not check Paris and Rome.", AFTER]
    closing = fake.requests[-1]
    assert not closing.body.get("tools")
    assert "could not finish" in closing.messages[-1]["content"]
    # the closing call does not see the calls that never ran
    assert all(m.get("role") != "assistant" or len(m.get("tool_calls") or []) < 2
               for m in closing.messages)


async def test_the_run_model_call_cap_makes_the_last_allowed_call_the_closing_reply(
        tmp_path, tools_url):
    project = project_with(tmp_path, tools_url, "{per_run: {model_calls: 2}}")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "Berlin"}}]},
                                "Berlin is sunny; that is all I could check."]}
    texts, turns, fake = await talk(project, script, ["weather?"])
    [hit] = budget_events(turns[0])
    assert hit["cap"] == "per_run.model_calls"
    assert texts[0][0] == "Berlin is sunny; that is all I could check."
    assert not fake.requests[-1].body.get("tools")
    bot = next(e for e in turns[0] if e["event"] == "bot")
    assert bot["metadata"]["agent_name"] == "weather_agent"


async def test_a_spent_token_cap_ends_with_the_fixed_sentence_and_no_further_model_call(
        tmp_path, tools_url):
    project = project_with(tmp_path, tools_url, "{per_run: {model_tokens: 5}}")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "Berlin"}}]}]}
    texts, turns, _ = await talk(project, script, ["weather?"])
    [hit] = budget_events(turns[0])
    assert hit["cap"] == "per_run.model_tokens"
    assert hit["used"] >= 5
    assert texts[0][:2] == [BUDGET_SENTENCE, AFTER]
    assert "tool:echo" in names(turns[0])


async def test_the_cost_cap_uses_the_configured_price_of_the_model(tmp_path, tools_url):
    # 1000 USD per million input tokens: the first call costs far more than the cap
    project = project_with(tmp_path, tools_url,
                           "{per_run: {cost_usd: 0.001},"
                           " prices: {gpt-test: {input: 1000, output: 1000}}}")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "Berlin"}}]}]}
    texts, turns, _ = await talk(project, script, ["weather?"])
    [hit] = budget_events(turns[0])
    assert hit["cap"] == "per_run.cost_usd"
    assert texts[0][0] == BUDGET_SENTENCE


async def test_without_a_price_the_cost_cap_does_not_stop_the_run(tmp_path, tools_url,
                                                                   monkeypatch):
    monkeypatch.delenv("SUBAGENTS_MODEL_PRICES", raising=False)
    project = project_with(tmp_path, tools_url, "{per_run: {cost_usd: 0.001}}")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "Berlin"}}]},
                                {"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}]}
    texts, turns, _ = await talk(project, script, ["weather?"])
    assert budget_events(turns[0]) == []
    assert texts[0][0] == "Sunny."


async def test_the_conversation_model_call_cap_counts_earlier_turns_and_other_callers(
        tmp_path, tools_url):
    # turn 1: command generator + the agent's question = 2 calls; turn 2: command generator = 3
    project = project_with(tmp_path, tools_url, "{per_conversation: {model_calls: 3}}")
    script = {"command_generator": ["start flow weather_flow", ""],
              "weather_agent": ["Which city?"]}
    texts, turns, _ = await talk(project, script, ["weather?", "Berlin"])
    assert texts[0] == ["Which city?"]
    [hit] = budget_events(turns[1])
    assert (hit["cap"], hit["used"]) == ("per_conversation.model_calls", 3)
    assert texts[1][:2] == [BUDGET_SENTENCE, AFTER]


async def test_the_conversation_tool_call_cap_counts_the_tool_calls_of_earlier_turns(
        tmp_path, tools_url):
    project = project_with(tmp_path, tools_url, "{per_conversation: {tool_calls: 1}}")
    script = {"command_generator": ["start flow weather_flow", ""],
              "weather_agent": [
                  {"tool_calls": [{"echo": {"text": "Berlin"}}]}, "Which day?",
                  {"tool_calls": [{"echo": {"text": "Monday"}}]},
                  "I could not look up Monday."]}
    texts, turns, _ = await talk(project, script, ["weather?", "Monday"])
    assert budget_events(turns[0]) == []
    [hit] = budget_events(turns[1])
    assert (hit["cap"], hit["used"]) == ("per_conversation.tool_calls", 1)
    assert "tool:echo" not in names(turns[1])
    assert texts[1][0] == "I could not look up Monday."


async def test_a_run_below_every_cap_is_not_affected(tmp_path, tools_url):
    project = project_with(tmp_path, tools_url,
                           "{per_run: {tool_calls: 5, model_calls: 5, model_tokens: 100000},"
                           " per_conversation: {model_calls: 50}}")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "Berlin"}}]},
                                {"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}]}
    texts, turns, _ = await talk(project, script, ["weather?"])
    assert budget_events(turns[0]) == []
    assert texts[0][:2] == ["Sunny.", AFTER]


def test_an_unknown_budget_key_is_a_config_error_naming_file_line_and_key(tmp_path):
    project = project_with(tmp_path, "http://127.0.0.1:1/mcp", "{per_run: {dollars: 3}}")
    with pytest.raises(ProjectInvalidError) as caught:
        load_project(project)
    [issue] = [i for i in caught.value.issues if i.severity == "error"]
    assert issue.code == "agent.validation.structure.additional_configuration_keys"
    assert issue.key == "configuration.budgets.per_run.dollars"
    assert issue.file is not None
    assert issue.file.replace("\\", "/").endswith(
        "sub_agents/weather/config.yml")
    assert issue.line == 4


async def test_the_cost_cap_prices_the_routed_model_that_answered(tmp_path, tools_url):
    # the group's first model is free; it fails, and the priced second model answers
    project = project_with(tmp_path, tools_url,
                           "{per_run: {cost_usd: 0.001},"
                           " prices: {gpt-free: {input: 0, output: 0},"
                           " gpt-dear: {input: 1000, output: 1000}}}")
    (project / "endpoints.yml").write_text(f"""
model_groups:
  - id: llm
    models:
      - {{provider: openai, model: gpt-free, input_cost_per_token: 0.0}}
      - {{provider: openai, model: gpt-dear, input_cost_per_token: 0.001}}
    router: {{routing_strategy: cost-based-routing}}
mcp_servers:
  - {{name: tools, type: http, url: "{tools_url}"}}
""")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"error": {"status": 500, "message": "down"}},
                                {"tool_calls": [{"echo": {"text": "Berlin"}}]}]}
    texts, turns, fake = await talk(project, script, ["weather?"])
    assert [r.body["model"] for r in fake.requests_of("weather_agent")] == \
        ["gpt-free", "gpt-dear"]
    [hit] = budget_events(turns[0])
    assert hit["cap"] == "per_run.cost_usd"
    assert hit["used"] > 0.001
    assert texts[0][0] == BUDGET_SENTENCE
