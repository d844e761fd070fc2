"""Correcting a collected slot rewinds the flow to that slot's collect step."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "data/correction_flows.yml": """
        flows:
          order_pizza:
            description: orders a pizza
            steps:
              - collect: size
              - collect: topping
              - action: utter_order
          pattern_correction:
            description: a slot was corrected
            steps:
              - action: action_correct_flow_slot
                next:
                  - if: not context.is_reset_only
                    then:
                      - action: utter_corrected_previous_input
                        next: END
                  - else: END
        """,
    "data/correction_domain.yml": """
        slots:
          size: {type: text}
          topping: {type: text}
        responses:
          utter_ask_size: [{text: "Which size?"}]
          utter_ask_topping: [{text: "Which topping?"}]
          utter_order: [{text: "Ordering a {size} pizza with {topping}."}]
          utter_corrected_previous_input:
            - text: >-
                Ok, {% for slot, value in context.corrected_slots.items() %}{{ slot }}
                is now {{ value }}{% endfor %}.
              metadata: {template: jinja}
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def test_a_corrected_slot_rewinds_the_flow_and_later_steps_run_again(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        assert (await convo.say("/order_pizza"))[0] == ["Which size?"]
        assert (await convo.say("/SetSlots(size=large)"))[0] == ["Which topping?"]
        texts, events = await convo.say("/SetSlots(size=small)")
        assert texts == ["Ok, size is now small.", "Which topping?"]
        assert "flow_started:pattern_correction" in names(events)
        assert "slot:size=small" in names(events)
        final, _ = await convo.say("/SetSlots(topping=ham)")
        fake.assert_done()
    assert final[0] == "Ordering a small pizza with ham."


async def test_answering_the_current_question_is_not_a_correction(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("/order_pizza")
        texts, events = await convo.say("/SetSlots(size=large)")
        fake.assert_done()
    assert texts == ["Which topping?"]
    assert "flow_started:pattern_correction" not in names(events)
