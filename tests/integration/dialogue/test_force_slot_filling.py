"""``force_slot_filling: true`` on a collect step, as in Rasa: while it asks, only the model's
``set slot`` for that slot counts (anything else cannot be handled), and a slot with a
``from_text`` mapping takes the message as it is, without a model call."""

from __future__ import annotations

import re

import anyio
import pytest
from subagents.config.project import collect_issues
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "data/forced_flows.yml": """
        flows:
          pin_flow:
            description: asks for a pin
            steps:
              - collect: pin
                force_slot_filling: true
              - action: utter_pin_ok
          secret_flow:
            description: asks for a secret word, taken as typed
            steps:
              - collect: secret
                force_slot_filling: true
              - action: utter_secret
        """,
    "data/forced_domain.yml": """
        slots:
          pin:
            type: text
            mappings: [{type: from_llm}]
          secret:
            type: text
            mappings: [{type: from_text}]
        responses:
          utter_ask_pin: [{text: "Your pin?"}]
          utter_pin_ok: [{text: "Pin {pin} accepted."}]
          utter_ask_secret: [{text: "Your secret word?"}]
          utter_secret: [{text: "Secret noted: {secret}"}]
        """,
}
REPHRASE = "I didn't quite get that. Could you say it another way?"


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, EXTRA)


async def test_other_commands_are_dropped_while_a_forced_collect_asks(project):
    script = {"command_generator": ["cancel flow\nstart flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("/pin_flow")
            texts, events = await conversation.say("forget it, when are you open?")
        fake.assert_done()
    assert texts == [REPHRASE, "Your pin?"]
    assert "flow_cancelled:pin_flow" not in names(events)
    assert "flow_started:opening_hours" not in names(events)


async def test_the_set_slot_for_the_asked_slot_is_kept(project):
    script = {"command_generator": ["start flow opening_hours\nset slot pin 4711"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("/pin_flow")
            texts, events = await conversation.say("4711, and when are you open?")
        fake.assert_done()
    assert texts[0] == "Pin 4711 accepted."
    assert "flow_started:opening_hours" not in names(events)


async def test_a_from_text_slot_takes_the_message_as_typed_without_a_model_call(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("/secret_flow")
            texts, _ = await conversation.say("start over please")
        fake.assert_done()  # no model call: the message is the value
    assert texts[0] == "Secret noted: start over please"


def test_a_from_text_slot_collected_with_force_slot_filling_is_not_reported(project):
    _, issues = collect_issues(project)
    assert [i.key for i in issues if i.code == "domain.slot.nlu_mapping_unsupported"] == []
    flows = project / "data" / "forced_flows.yml"
    flows.write_text(re.sub(r"(collect: secret\n)\s*force_slot_filling: true\n", r"\1",
                            flows.read_text()))
    _, issues = collect_issues(project)
    assert [i.key for i in issues if i.code == "domain.slot.nlu_mapping_unsupported"] == [
        "flows.secret_flow.steps[0].collect"]
