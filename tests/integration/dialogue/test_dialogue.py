"""Flows call sub agents: two-turn runs, silent task completion, digression and resume,
restart, cancel, fatal errors, linked flows, custom actions, serialised senders."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import (
    SESSION_START,
    Conversation,
    assistant_for,
    names,
    write_project,
)

ASK_CITY = "Which city?"


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


async def test_an_open_agent_runs_over_two_turns_and_the_flow_continues(project):
    script = {
        "command_generator": ["start flow weather_flow", ""],
        "weather_agent": [
            ASK_CITY,
            {"text": "Let me check.", "tool_calls": [{"echo": {"text": "sunny"}}]},
            {"text": "It is sunny in Berlin.", "tool_calls": [{"task_completed": {}}]},
        ],
    }
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(30):
            texts1, turn1 = await convo.say("what's the weather?")
            texts2, turn2 = await convo.say("Berlin")
        fake.assert_done()
    assert texts1 == [ASK_CITY]
    assert names(turn1) == [*SESSION_START, "user:what's the weather?",
                            "flow_started:weather_flow", "agent_started:weather_agent",
                            f"bot:{ASK_CITY}",
                            "action:action_agent_request_user_input", "action:action_listen"]
    assert texts2 == ["Let me check.", "It is sunny in Berlin.",
                      "Anything else about the weather?",
                      "Is there anything else I can help you with?"]
    assert names(turn2) == [
        "user:Berlin", "agent_started:weather_agent", "bot:Let me check.", "tool:echo",
        "bot:It is sunny in Berlin.", "agent_completed:weather_agent",
        "bot:Anything else about the weather?", "action:utter_after_weather",
        "flow_completed:weather_flow", "flow_started:pattern_completed",
        "bot:Is there anything else I can help you with?", "action:utter_can_do_something_else",
        "flow_completed:pattern_completed", "action:action_listen"]
    started = turn1[len(SESSION_START) + 2]
    assert started["metadata"]["protocol"] == "mcp_open"
    assert started["metadata"]["mcp_tools"] == ["echo", "timed_read"]
    for event in turn2[1:6]:
        assert event["metadata"]["step_id"] == "weather_flow_0_call_weather_agent"
        assert event["metadata"]["active_flow"] == "weather_flow"
    assert turn2[5]["metadata"]["protocol"] == "mcp_open"


async def test_a_task_agent_completes_silently_and_the_flow_uses_its_slot(project):
    script = {"command_generator": ["start flow booking_flow"],
              "booking_agent": [{"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}}]}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("book a table in Berlin")
        fake.assert_done()
        state = await assistant.state("user-1")
    assert texts == ["Booked in Berlin.", "Is there anything else I can help you with?"]
    assert "slot:city=Berlin" in names(events)
    assert names(events).index("slot:city=Berlin") < names(events).index(
        "agent_completed:booking_agent")
    started = next(e for e in events if e["event"] == "agent_started")
    assert started["metadata"]["exit_conditions"] == ["slots.city is not null"]
    assert started["metadata"]["protocol"] == "mcp_task"
    assert state["slots"]["city"] == "Berlin"
    assert state["stack"] == []


async def test_a_digression_interrupts_and_the_resumed_agent_knows_its_question(project):
    script = {
        "command_generator": ["start flow weather_flow", "start flow opening_hours", ""],
        "weather_agent": [
            ASK_CITY,
            {"text": "Sorry, which city was it?",
             "expect": {"system_contains": [f'You had asked: "{ASK_CITY}"'],
                        "messages_contain": [ASK_CITY]}},
            {"text": "Sunny in Rome.", "tool_calls": [{"task_completed": {}}]},
        ],
    }
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(30):
            await convo.say("weather please")
            texts2, turn2 = await convo.say("when are you open?")
            texts3, turn3 = await convo.say(
                "/SetSlots(continue_interrupted_flow_confirmation=true)")
            texts4, turn4 = await convo.say("Rome")
        fake.assert_done()
    assert texts2 == ["We are open 9 to 5.", "Shall we pick up where we left off before?"]
    assert names(turn2)[1:4] == ["flow_interrupted:weather_flow",
                                 "agent_interrupted:weather_agent", "flow_started:opening_hours"]
    assert "flow_completed:opening_hours" in names(turn2)
    assert "flow_started:pattern_continue_interrupted" in names(turn2)
    assert texts3 == ["Sorry, which city was it?"]
    n3 = names(turn3)
    assert n3.index("flow_resumed:weather_flow") < n3.index("agent_resumed:weather_agent")
    assert "agent_started:weather_agent" not in n3
    resume_request = fake.requests_of("weather_agent")[1]
    users = [m["content"] for m in resume_request.messages if m["role"] == "user"]
    assert "when are you open?" not in users  # the digression is cut away
    assert texts4[:1] == ["Sunny in Rome."]
    assert "agent_completed:weather_agent" in names(turn4)


async def test_declining_to_resume_cancels_the_interrupted_flow(project):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours"],
              "weather_agent": [ASK_CITY]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("weather please")
        await convo.say("when are you open?")
        texts, events = await convo.say(
            "/SetSlots(continue_interrupted_flow_confirmation=false)")
        fake.assert_done()
        state = await assistant.state("user-1")
    assert "agent_cancelled:weather_agent" in names(events)
    assert "flow_cancelled:weather_flow" in names(events)
    assert texts[0] == "Okay, I've stopped weather flow."
    assert state["stack"] == []


async def test_cancel_flow_cancels_the_waiting_agent(project):
    script = {"command_generator": ["start flow weather_flow", "cancel flow"],
              "weather_agent": [ASK_CITY]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("weather please")
        texts, events = await convo.say("forget it")
        fake.assert_done()
        state = await assistant.state("user-1")
    n = names(events)
    assert n.index("agent_cancelled:weather_agent") < n.index("flow_cancelled:weather_flow")
    cancelled = next(e for e in events if e["event"] == "agent_cancelled")
    assert cancelled["reason"] is None
    assert texts == ["Okay, I've stopped weather flow."]
    assert state["stack"] == []


async def test_restarting_a_completed_task_agent_resets_its_slots(project):
    script = {
        "command_generator": ["start flow booking_flow", "restart agent booking_agent"],
        "booking_agent": [
            {"tool_calls": [{"set_slot_city": {"slot_value": "Berlin"}}]},
            {"tool_calls": [{"set_slot_city": {"slot_value": "Paris"}}],
             "expect": {"system_contains": ["Starting over"],
                        "last_user": "actually make it Paris"}},
        ]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("book in Berlin")
        texts, events = await convo.say("actually make it Paris")
        fake.assert_done()
    n = names(events)
    assert n.index("slot:city=None") < n.index("agent_started:booking_agent")
    assert "slot:city=Paris" in n
    assert texts[0] == "Booked in Paris."


async def test_a_fatal_agent_error_runs_the_internal_error_pattern(project):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"error": {"status": 500, "message": "model down"}}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("weather please")
        fake.assert_done()
        state = await assistant.state("user-1")
    n = names(events)
    assert n.index("agent_cancelled:weather_agent") < n.index("flow_cancelled:weather_flow")
    cancelled = next(e for e in events if e["event"] == "agent_cancelled")
    assert "model down" in cancelled["reason"]
    assert "flow_started:pattern_internal_error" in n
    assert texts == ["Sorry, something went wrong on my side. Please try again in a little "
                     "while."]
    assert "flow_completed:weather_flow" not in n
    assert state["stack"] == []


async def test_two_agents_in_one_flow(project):
    script = {"command_generator": ["start flow two_agents"],
              "weather_agent": [{"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}],
              "booking_agent": [{"tool_calls": [{"set_slot_city": {"slot_value": "Oslo"}}]}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("weather and a table in Oslo")
        fake.assert_done()
    n = names(events)
    assert n.index("agent_completed:weather_agent") < n.index("agent_started:booking_agent")
    assert texts[:2] == ["Sunny.", "Booked in Oslo."]


async def test_an_agent_inside_a_linked_flow(project):
    script = {"command_generator": ["start flow outer_flow"],
              "weather_agent": [{"text": "Cloudy.", "tool_calls": [{"task_completed": {}}]}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("start")
        fake.assert_done()
    n = names(events)
    assert n.index("flow_completed:outer_flow") < n.index("flow_started:weather_flow")
    started = next(e for e in events if e["event"] == "agent_started")
    assert started["flow_id"] == "weather_flow"
    assert texts[:3] == ["Starting.", "Cloudy.", "Anything else about the weather?"]


async def test_a_recoverable_error_is_retried(project):
    script = {"command_generator": ["start flow flaky_flow"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("go")
        fake.assert_done()
    assert "agent_completed:flaky_agent" in names(events)
    assert texts[0] == "Anything else about the weather?"


async def test_collect_asks_and_uses_the_answer_without_a_model(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        texts1, _ = await convo.say("/ask_name")
        texts2, events = await convo.say("/SetSlots(name=Ada)")
        fake.assert_done()
    assert texts1 == ["What is your name?"]
    assert texts2[0] == "Hello Ada!"
    assert "slot:name=None" in names(events)  # collected slots reset when the flow ends


async def test_a_custom_action_runs_in_process_and_its_events_apply(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant, "order-7").say("/custom_action_flow")
    assert texts[:2] == ["Looking it up...", "Found order order-7."]
    assert "slot:lookup_result=order order-7" in names(events)


async def test_messages_of_one_sender_are_serialised(project):
    script = {"command_generator": [{"text": "start flow opening_hours", "delay_ms": 200},
                                    "start flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        a, b = Conversation(assistant), Conversation(assistant)
        with anyio.fail_after(30):
            await asyncio.gather(a.say("first"), b.say("second"))
        events = await assistant.tracker("user-1")
    users = [i for i, e in enumerate(events) if e["event"] == "user"]
    listens = [i for i, e in enumerate(events) if e.get("name") == "action_listen"]
    assert len(users) == 2
    # the session start listens first; the second turn started after the first ended
    assert listens[0] < users[0] < listens[1] < users[1]


async def test_the_command_generator_sees_flows_agents_and_state(project):
    script = {"command_generator": [
        "start flow weather_flow",
        {"text": "", "expect": {"messages_contain": [
            "weather_flow: tell the weather", "active sub agent: weather_agent",
            "continue agent", f"weather_agent: {ASK_CITY}"]}}],
        "weather_agent": [ASK_CITY, ASK_CITY]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("weather")
        _, events = await convo.say("hmm")
        fake.assert_done()
    assert "agent_started:weather_agent" in names(events)


async def test_a_cancelled_status_ends_the_flow_silently(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/quitting_flow")
        fake.assert_done()
        state = await assistant.state("user-1")
    n = names(events)
    assert n.index("agent_cancelled:quitter") < n.index("flow_cancelled:quitting_flow")
    assert texts == []
    assert "flow_started:pattern_internal_error" not in n
    assert state["stack"] == []


async def test_collect_rejections_and_flow_guards(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        guarded, _ = await convo.say("/hidden_flow")
        await convo.say("/ask_name")
        rejected, events = await convo.say("/SetSlots(name=42)")
        accepted, _ = await convo.say("/SetSlots(name=Ada)")
        fake.assert_done()
    assert guarded == ["I didn't quite get that. Could you say it another way?"]
    assert rejected == ["A name is not a number.", "What is your name?"]
    assert names(events)[1:3] == ["slot:name=42", "bot:A name is not a number."]
    assert accepted[0] == "Hello Ada!"


async def test_reaching_max_agent_steps_shows_on_the_completion_event(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url, {
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Tells the weather.}
            configuration: {include_date_time: false, max_agent_steps: 1}
            connections:
              mcp_servers: [{name: tools, include_tools: [echo, timed_read]}]
            """})
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"echo": {"text": "sunny"}}]},
                                "It seems sunny."]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            _, events = await Conversation(assistant).say("weather?")
        fake.assert_done()
    completed = next(e for e in events if e["event"] == "agent_completed")
    assert completed["metadata"]["exit_reason"] == "max_steps"
