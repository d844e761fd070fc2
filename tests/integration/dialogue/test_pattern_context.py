"""Patterns carry a context that their conditions and Jinja responses read as `context.*`."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, write_project

EXTRA = {
    "data/patterns.yml": """
        flows:
          pattern_cannot_handle:
            description: says why it could not help
            steps:
              - noop: true
                next:
                  - if: context.reason = 'cannot_handle_default'
                    then:
                      - action: utter_default_reason
                        next: END
                  - else:
                      - action: utter_ask_rephrase
                        next: END
        """,
    "data/pattern_responses.yml": """
        responses:
          utter_default_reason:
            - text: "No command ({{ context.reason }})."
              metadata: {template: jinja}
          utter_ask_continue_interrupted_flow_confirmation:
            - text: "Back to {{ context.interrupted_flow_options }}?"
              metadata: {template: jinja}
          utter_can_do_something_else:
            - text: "Done with {{ context.previous_flow_name }}. Anything else?"
              metadata: {template: jinja}
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def test_a_pattern_branches_on_its_context(project):
    async with FakeModelServer({"command_generator": [""]}) as fake, \
            assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("hmm")
        fake.assert_done()
    assert texts == ["No command (cannot_handle_default)."]


async def test_the_continue_question_names_the_interrupted_flow(project):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours"],
              "weather_agent": ["Which city?"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("weather please")
        texts, _ = await convo.say("when are you open?")
        fake.assert_done()
    assert texts == ["We are open 9 to 5.", "Back to weather flow?"]


async def test_the_completed_pattern_knows_the_previous_flow(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/opening_hours")
        fake.assert_done()
    assert texts == ["We are open 9 to 5.", "Done with opening hours. Anything else?"]
