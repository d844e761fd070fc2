"""A custom action that fails inside a flow started by a ``call:`` step cancels the called flow
and its caller, so the caller does not start the failing flow again (Rasa behaves the same)."""

from __future__ import annotations

import pytest
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA_FILES = {
    "actions/broken.py": """
        from rasa_sdk import Action


        class Broken(Action):
            def name(self):
                return "action_broken"

            async def run(self, dispatcher, tracker, domain):
                raise RuntimeError("the action server is on fire")
        """,
    "data/called_flows.yml": """
        flows:
          outer_caller:
            description: calls a flow whose action fails
            steps:
              - action: utter_starting
              - call: failing_child
              - action: utter_hours
          failing_child:
            description: runs a failing custom action
            if: false
            steps:
              - action: action_broken
        """,
    "data/called_domain.yml": """
        actions: [action_broken]
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, EXTRA_FILES)


async def test_a_failing_action_in_a_called_flow_cancels_its_caller_once(project):
    script = {"command_generator": ["start flow outer_caller"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("go")
        fake.assert_done()
        state = await assistant.state("user-1")
    n = names(events)
    assert n.count("flow_started:failing_child") == 1
    assert n.count("flow_started:pattern_internal_error") == 1
    assert n.index("flow_cancelled:failing_child") < n.index("flow_cancelled:outer_caller")
    assert "flow_completed:outer_caller" not in n
    assert texts == ["Starting.", "Sorry, something went wrong on my side. Please try again in a "
                     "little while."]
    assert state["stack"] == []
