"""`pattern_cannot_handle` answers by the reason it was pushed with, as Rasa's default does."""

from __future__ import annotations

import pytest
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.patterns import Patterns
from subagents.dialogue.stack import Stack
from subagents.dialogue.turn import Turn
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

REPHRASE = "I didn't quite get that. Could you say it another way?"
CANNOT = "Sorry, that is something I can't help with."
NO_ANSWER = "Sorry, I could not find an answer to that."
CHITCHAT_OVERRIDE = {
    "data/chitchat.yml": """
        flows:
          pattern_chitchat:
            description: hands small talk to a free-form chitchat component
            steps:
              - action: utter_before_chitchat
              - action: action_trigger_chitchat
        """,
    "data/chitchat_domain.yml": """
        responses:
          utter_before_chitchat: [{text: "Let me think of something nice to say."}]
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@pytest.mark.parametrize(("reason", "expected"), [
    ("cannot_handle_chitchat", CANNOT),
    ("cannot_handle_not_supported", CANNOT),
    ("cannot_handle_no_relevant_answer", NO_ANSWER),
    ("cannot_handle_invalid_intent", REPHRASE),
    (None, REPHRASE),
])
async def test_the_default_pattern_answers_by_reason(project, reason, expected):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        channel = CollectingOutputChannel()
        turn = Turn("u", [], Stack(), assistant.project.domain, channel)
        Patterns(assistant.project).cannot_handle(turn, reason)
        await assistant.executor.advance(turn)
        fake.assert_done()
    assert channel.texts == [expected]


async def test_an_unknown_intent_asks_to_rephrase(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/no_such_intent")
        fake.assert_done()
    assert texts == [REPHRASE]


async def test_small_talk_gets_the_cannot_handle_reply_by_default(project):
    async with FakeModelServer({"command_generator": ["offtopic reply"]}) as fake, \
            assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("nice weather today")
        fake.assert_done()
    assert texts == [CANNOT]
    assert "flow_started:pattern_chitchat" in names(events)


async def test_chitchat_handed_to_a_missing_component_never_runs_the_chitchat_pattern(
        tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url, CHITCHAT_OVERRIDE)
    async with FakeModelServer({"command_generator": ["offtopic reply"]}) as fake, \
            assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("tell me a joke")
        fake.assert_done()
    assert texts == [CANNOT]
    assert "flow_started:pattern_chitchat" not in names(events)
    assert "flow_started:pattern_cannot_handle" in names(events)


async def test_setting_a_slot_the_domain_lacks_asks_to_rephrase(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/SetSlots(no_such_slot=1)")
        fake.assert_done()
    assert texts == [REPHRASE]


async def test_cancelling_while_no_flow_runs_asks_to_rephrase(project):
    async with FakeModelServer({"command_generator": ["cancel flow"]}) as fake, \
            assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("stop it")
        fake.assert_done()
    assert texts == [REPHRASE]


@pytest.mark.parametrize("reply", ["", "Sure, happy to help with that!"])
async def test_a_reply_without_a_command_mid_flow_runs_cannot_handle(tmp_path, tools_url, reply):
    project = write_project(tmp_path / "assistant", tools_url, {"data/ask_city.yml": """
        flows:
          ask_city:
            description: asks for a city
            steps:
              - collect: city
              - action: utter_booked
        """})
    script = {"command_generator": [reply]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        asked, _ = await convo.say("/ask_city")
        texts, events = await convo.say("hmm")
        fake.assert_done()
    assert texts[0] == REPHRASE
    assert texts[1:] == asked  # the flow goes on: its question is asked again
    assert "pattern_cannot_handle" in str(events)
