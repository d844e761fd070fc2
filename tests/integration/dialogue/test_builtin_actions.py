"""Rasa's built-in actions run inside the assistant and never reach the custom action server."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "data/builtin_flows.yml": """
        flows:
          listen_flow:
            description: says A, waits, says B
            steps:
              - action: utter_a
              - action: action_listen
              - action: utter_b
          restart_flow:
            description: restarts the conversation
            steps:
              - action: action_restart
          repeat_flow:
            description: repeats the last bot messages
            steps:
              - action: action_repeat_bot_messages
          clean_flow:
            description: wraps up everything on the stack
            steps:
              - action: action_clean_stack
          hangup_flow:
            description: ends the session
            steps:
              - action: action_hangup
              - action: utter_b
          fallback_flow:
            description: NLU-era actions that change nothing here
            steps:
              - action: action_default_fallback
              - action: action_deactivate_loop
              - action: action_handoff_metric
              - action: utter_b
          chitchat_flow:
            description: free-form chitchat without a chitchat component
            steps:
              - action: action_trigger_chitchat
        """,
    "data/builtin_domain.yml": """
        responses:
          utter_a: [{text: "A"}]
          utter_b: [{text: "B"}]
          utter_restart: [{text: "Starting over."}]
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def test_action_listen_waits_for_the_user_mid_flow(project):
    async with FakeModelServer({"command_generator": [""]}) as fake, \
            assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        first, _ = await convo.say("/listen_flow")
        second, _ = await convo.say("go on")
        fake.assert_done()
    assert first == ["A"]
    # the model named no command: the cannot-handle pattern runs, then the flow goes on
    assert second[:2] == ["I didn't quite get that. Could you say it another way?", "B"]


async def test_action_restart_clears_slots_and_stack(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("/SetSlots(name=Ada)")
        texts, events = await convo.say("/restart_flow")
        fake.assert_done()
        state = await assistant.state("user-1")
    assert texts == ["Starting over."]
    assert "restart" in names(events)
    assert state["slots"]["name"] is None
    assert state["stack"] == []


async def test_action_repeat_bot_messages_sends_the_last_messages_again(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        first, _ = await convo.say("/opening_hours")
        again, _ = await convo.say("/repeat_flow")
        fake.assert_done()
    assert first == ["We are open 9 to 5.", "Is there anything else I can help you with?"]
    assert again[:2] == first


async def test_action_clean_stack_lets_every_flow_end(project):
    script = {"command_generator": ["start flow weather_flow", "start flow clean_flow"],
              "weather_agent": ["Which city?"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("weather please")
        _, events = await convo.say("start over")
        fake.assert_done()
        state = await assistant.state("user-1")
    assert "flow_completed:weather_flow" in names(events)
    assert state["stack"] == []


async def test_action_hangup_ends_the_session_and_the_turn(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/hangup_flow")
        fake.assert_done()
        state = await assistant.state("user-1")
    assert "session_ended" in names(events)
    assert texts == []
    assert state["stack"] == []


async def test_intent_era_actions_change_nothing_and_reach_no_action_server(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/fallback_flow")
        fake.assert_done()
    assert texts[0] == "B"
    assert "flow_completed:fallback_flow" in names(events)
    assert not any(e["event"] == "flow_cancelled" for e in events)


async def test_chitchat_without_a_chitchat_component_cannot_be_handled(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/chitchat_flow")
        fake.assert_done()
    assert texts[0] == "Sorry, that is something I can't help with."
