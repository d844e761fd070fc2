"""`/intent` payloads start flows through `nlu_trigger`; session start, restart, clarification
and repeating run their patterns."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import (
    SESSION_START,
    Conversation,
    assistant_for,
    names,
    write_project,
)

EXTRA = {
    "data/intent_flows.yml": """
        flows:
          greet_flow:
            description: greets
            nlu_trigger:
              - intent: greet
            steps:
              - action: utter_hello
          balance_flow:
            description: tells the balance
            nlu_trigger:
              - intent: {name: check_balance, confidence_threshold: 0.8}
            steps:
              - action: utter_balance
          pattern_session_start:
            description: greets at the start of a session (no nlu_trigger kept)
            steps:
              - action: action_session_start
              - action: utter_welcome
          pattern_clarification:
            description: asks which flow was meant
            steps:
              - action: action_clarify_flows
              - action: utter_clarification_options_rasa
          pattern_repeat_bot_messages:
            description: repeats
            steps:
              - action: action_repeat_bot_messages
        """,
    "data/intent_domain.yml": """
        responses:
          utter_hello: [{text: "Hello!"}]
          utter_balance: [{text: "Your balance is 10."}]
          utter_welcome: [{text: "Welcome!"}]
          utter_clarification_options_rasa:
            - text: "Did you mean {{ context.clarification_options }}?"
              metadata: {template: jinja}
        """,
}
REPHRASE = "I didn't quite get that. Could you say it another way?"


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


@pytest.mark.parametrize(("payload", "expected"), [
    ("/greet", "Hello!"),
    ("/check_balance", "Your balance is 10."),
    ("/no_such_intent", REPHRASE),
])
async def test_an_intent_payload_starts_its_flow_without_a_model(project, payload, expected):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say(payload)
        fake.assert_done()
    assert texts[0] == expected


async def test_session_start_runs_the_session_start_pattern(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/session_start")
        fake.assert_done()
    assert texts == ["Welcome!"]
    assert "session_started" in names(events)


async def test_restart_without_a_restart_pattern_starts_afresh(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("/SetSlots(name=Ada)")
        _, events = await convo.say("/restart")
        fake.assert_done()
        state = await assistant.state("user-1")
    assert "restart" in names(events)
    assert state["slots"]["name"] is None


async def test_clarification_offers_the_flows_that_exist(project):
    script = {"command_generator": [{
        "text": "disambiguate flows weather_flow opening_hours no_such_flow",
        "expect": {"messages_contain": ["- disambiguate flows <flow_id>"]}}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("hours or weather?")
        fake.assert_done()
    assert texts == ["Did you mean weather flow or opening hours?"]


async def test_clarification_with_one_valid_flow_starts_it(project):
    script = {"command_generator": ["disambiguate flows opening_hours no_such_flow"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("hours?")
        fake.assert_done()
    assert texts[0] == "We are open 9 to 5."


async def test_repeat_message_sends_the_last_messages_again(project):
    script = {"command_generator": ["repeat message"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        first, _ = await convo.say("/opening_hours")
        again, _ = await convo.say("say that again")
        fake.assert_done()
    assert again == first


async def test_skip_question_runs_the_default_skip_pattern(project):
    script = {"command_generator": ["skip question"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("skip that")
        fake.assert_done()
    assert texts == ["I need an answer to this question before we can go on."]


async def test_a_new_conversation_starts_its_session_without_the_pattern(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        texts, first = await convo.say("/greet")
        _, second = await convo.say("/greet")
        fake.assert_done()
    assert texts[0] == "Hello!"  # the overridden session start pattern's welcome is not said
    assert names(first)[:4] == [*SESSION_START, "user:/greet"]
    assert "flow_started:pattern_session_start" not in names(first)
    assert "session_started" not in names(second)


async def test_session_start_as_the_first_message_starts_one_session(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/session_start")
        fake.assert_done()
    assert texts == ["Welcome!"]
    assert names(events)[:4] == [*SESSION_START, "user:/session_start"]
    # the pattern's action_session_start step finds the session started for this message
    assert names(events).count("session_started") == 1
