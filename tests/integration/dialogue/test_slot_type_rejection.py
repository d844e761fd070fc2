"""An answer that does not fit the collected slot's type is rejected with the type's response."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "data/guests_flows.yml": """
        flows:
          table_flow:
            description: books a table
            steps:
              - collect: guests
              - action: utter_table
        """,
    "data/guests_domain.yml": """
        slots:
          guests: {type: float}
        responses:
          utter_ask_guests: [{text: "How many guests?"}]
          utter_table: [{text: "A table for {guests}."}]
          utter_float_slot_rejection:
            - text: "{{ value }} is not a number."
              metadata: {template: jinja}
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def test_a_value_of_the_wrong_type_is_rejected_and_asked_again(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("/table_flow")
        texts, events = await convo.say("/SetSlots(guests=many)")
        final, _ = await convo.say("/SetSlots(guests=4)")
        fake.assert_done()
    assert texts == ["many is not a number.", "How many guests?"]
    assert not [n for n in names(events) if n.startswith("slot:guests")]
    assert final[0] == "A table for 4.0."
