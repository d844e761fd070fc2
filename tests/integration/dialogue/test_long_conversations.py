"""A turn of a long conversation loads its snapshot and latest events only; what lies further
back still counts: budgets, an interrupted agent's question, a custom action's tracker, the
tracker route.

Each test first talks long enough that the event it depends on is out of the window the
next turn loads (and asserts so), on the SQLite store a served assistant uses.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

ASK_CITY = "Which city?"
DIGRESSIONS = 8
"""Turns of another flow: 24 transcript lines, more than a window holds (20)."""


@pytest.fixture
async def store(tmp_path):
    sql = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}")
    yield sql
    await sql.close()


async def window_start(convo: Conversation) -> int:
    return (await convo.assistant.tracker_store.load(convo.sender)).start


def position(events: list[dict[str, Any]], predicate: Any) -> int:
    return next(i for i, e in enumerate(events) if predicate(e))


async def test_a_per_conversation_tool_cap_counts_calls_far_back_in_the_conversation(
        tmp_path, tools_url, store):
    project = write_project(tmp_path / "assistant", tools_url, {
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Tells the weather.}
            configuration:
              include_date_time: false
              budgets: {per_conversation: {tool_calls: 1}}
            connections:
              mcp_servers: [{name: tools, include_tools: [echo]}]
            """})
    script = {"command_generator": ["start flow weather_flow",
                                    *["start flow opening_hours"] * DIGRESSIONS,
                                    "start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "Berlin"}}]},
                                {"text": "Sunny.", "tool_calls": [{"task_completed": {}}]},
                                {"tool_calls": [{"echo": {"text": "Rome"}}]},
                                "I could not look up Rome."]}
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(60):
            await convo.say("weather in Berlin?")
            for _ in range(DIGRESSIONS):
                await convo.say("when are you open?")
            stored = await assistant.tracker(convo.sender)
            start = await window_start(convo)
            texts, events = await convo.say("and in Rome?")
        fake.assert_done()
    assert start > position(stored, lambda e: e["event"] == "mcp_tool_executed")
    [hit] = [e for e in events if e["event"] == "agent_budget_exceeded"]
    assert (hit["cap"], hit["used"]) == ("per_conversation.tool_calls", 1)
    assert "tool:echo" not in names(events)
    assert texts[0] == "I could not look up Rome."


async def test_an_agent_resumed_after_a_long_digression_sees_its_question_not_the_digression(
        tmp_path, tools_url, store):
    project = write_project(tmp_path / "assistant", tools_url)
    script = {
        "command_generator": ["start flow weather_flow",
                              *["start flow opening_hours"] * DIGRESSIONS, ""],
        "weather_agent": [
            ASK_CITY,
            {"text": "Sorry, which city was it?",
             "expect": {"system_contains": [f'You had asked: "{ASK_CITY}"'],
                        "messages_contain": [ASK_CITY],
                        "messages_not_contain": ["when are you open?"]}},
            {"text": "Sunny in Rome.", "tool_calls": [{"task_completed": {}}]}],
    }
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(60):
            await convo.say("weather please")
            for _ in range(DIGRESSIONS):
                await convo.say("when are you open?")
            stored = await assistant.tracker(convo.sender)
            start = await window_start(convo)
            resumed, _ = await convo.say("/SetSlots(continue_interrupted_flow_confirmation=true)")
            answered, _ = await convo.say("Rome")
        fake.assert_done()
    assert start > position(stored, lambda e: e["event"] == "bot" and e["text"] == ASK_CITY)
    assert resumed == ["Sorry, which city was it?"]
    assert answered[:1] == ["Sunny in Rome."]


async def test_a_custom_action_gets_every_event_and_the_tracker_route_returns_them(
        tmp_path, tools_url, store):
    project = write_project(tmp_path / "assistant", tools_url, {
        "data/domain.yml": """
            responses:
              utter_hours: [{text: "We are open 9 to 5."}]
            actions: [action_count]
            """,
        "data/flows.yml": """
            flows:
              opening_hours:
                description: opening hours
                steps:
                  - action: utter_hours
              count_flow:
                description: counts the events
                steps:
                  - action: action_count
            """,
        "sub_agents/weather/config.yml": None, "sub_agents/booking/config.yml": None,
        "sub_agents/flaky/config.yml": None, "sub_agents/quitter/config.yml": None,
        "sub_agents/flaky/agent.py": None, "sub_agents/flaky/__init__.py": None,
        "actions/lookup.py": None,
        "actions/count.py": """
            from rasa_sdk import Action


            class Count(Action):
                def name(self):
                    return "action_count"

                async def run(self, dispatcher, tracker, domain):
                    first = tracker.events[0].get("name")
                    dispatcher.utter_message(text=f"{len(tracker.events)} events from {first}")
                    return []
            """})
    async with FakeModelServer({}) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(60):
            for _ in range(DIGRESSIONS + 4):
                await convo.say("/opening_hours")
            stored = await assistant.tracker(convo.sender)
            start = await window_start(convo)
            texts, events = await convo.say("/count_flow")
            state = await assistant.state(convo.sender)
    assert start > 0
    # every stored event, and this turn's up to the action's own
    seen = len(stored) + position(events, lambda e: e.get("name") == "action_count") + 1
    assert texts[0] == f"{seen} events from action_session_start"
    assert state["events"] == [*stored, *events]
