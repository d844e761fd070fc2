"""A project's `validate_<slot>` custom action checks each new value of a collected slot."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, write_project

EXTRA = {
    "data/guests.yml": """
        flows:
          count_guests:
            description: asks how many guests come
            steps:
              - collect: guests
              - action: utter_guests_ok
        """,
    "data/guests_domain.yml": """
        slots:
          guests: {type: float, mappings: [{type: from_llm}]}
        responses:
          utter_ask_guests: [{text: "How many guests?"}]
          utter_guests_ok: [{text: "Table for {guests}."}]
        actions: [validate_guests]
        """,
    "actions/guests.py": """
        from rasa_sdk import Action
        from rasa_sdk.events import SlotSet


        class ValidateGuests(Action):
            def name(self):
                return "validate_guests"

            async def run(self, dispatcher, tracker, domain):
                if tracker.get_slot("guests") > 8:
                    dispatcher.utter_message(text="At most 8 guests, please.")
                    return [SlotSet("guests", None)]
                return []
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def test_the_validation_action_rejects_and_accepts_values(project):
    script = {"command_generator": ["start flow count_guests", "set slot guests 12",
                                    "set slot guests 4"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        first, _ = await convo.say("a table please")
        rejected, _ = await convo.say("twelve")
        accepted, events = await convo.say("four then")
        fake.assert_done()
    assert first == ["How many guests?"]
    assert rejected == ["At most 8 guests, please.", "How many guests?"]
    assert accepted[0] == "Table for 4.0."
    assert any(e["event"] == "action" and e.get("name") == "validate_guests" for e in events)
