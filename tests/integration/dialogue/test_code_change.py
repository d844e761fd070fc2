"""A conversation saved while a flow ran meets a project whose flows changed: the next turn runs
``pattern_code_change`` (the user is told, every flow on the stack ends) instead of acting on
the message, as in Rasa. Conversations are kept in the project's SQLite tracker store between
the two loads, as they are between two server runs."""

from __future__ import annotations

import contextlib
import textwrap

import anyio
import pytest
from subagents.dialogue.processor import Assistant
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, names, write_project

UPDATED = "The assistant was just updated, so I have to start this conversation over."
FLOWS = """
    flows:
      pick_city:
        description: picks a city
        steps:
          - collect: city
          - action: utter_booked
      other_flow:
        description: something else
        steps:
          - action: utter_hours
    """
WITHOUT_PICK_CITY = """
    flows:
      other_flow:
        description: something else
        steps:
          - action: utter_hours
    """


@contextlib.asynccontextmanager
async def loaded(root, fake):
    async with Assistant.load(root, llm_factory=fake.llm_factory(),
                              retry_delays=(0.0,)) as assistant:
        yield assistant


def set_flows(root, text):
    (root / "data/code_change_flows.yml").write_text(textwrap.dedent(text), encoding="utf-8")


async def start_pick_city(root, fake):
    async with loaded(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("pick a city")
    assert texts == ["Please tell me your city."]


@pytest.fixture
def root(tmp_path, tools_url):
    root = write_project(tmp_path / "assistant", tools_url)
    set_flows(root, FLOWS)
    return root


@pytest.mark.parametrize("changed", [
    FLOWS.replace("- action: utter_booked", "- action: utter_hours"),  # a step changed
    FLOWS.replace("description: picks a city", "description: picks a town"),
    WITHOUT_PICK_CITY,
], ids=["step", "description", "gone"])
async def test_a_changed_flow_on_the_stack_runs_the_code_change_pattern(root, changed):
    script = {"command_generator": ["start flow pick_city", "set slot city Paris"]}
    async with FakeModelServer(script) as fake:
        await start_pick_city(root, fake)
        set_flows(root, changed)
        async with loaded(root, fake) as assistant:
            with anyio.fail_after(30):
                texts, events = await Conversation(assistant).say("Paris")
            state = await assistant.state("user-1")
        fake.assert_done()
    n = names(events)
    assert texts[0] == UPDATED
    assert "flow_started:pattern_code_change" in n
    assert "slot:city=Paris" not in n
    assert "Booked in Paris." not in texts
    assert [f for f in state["stack"] if not f["flow_id"].startswith("pattern_")] == []
    started = next(e for e in events if e["event"] == "flow_started"
                   and e["flow_id"] == "pattern_code_change")
    assert started["metadata"]["changed_flows"] == ["pick_city"]


async def test_an_unchanged_project_goes_on_where_it_was(root):
    script = {"command_generator": ["start flow pick_city", "set slot city Paris"]}
    async with FakeModelServer(script) as fake:
        await start_pick_city(root, fake)
        set_flows(root, FLOWS.replace("other_flow", "another_flow"))  # not on the stack
        async with loaded(root, fake) as assistant:
            with anyio.fail_after(30):
                texts, events = await Conversation(assistant).say("Paris")
        fake.assert_done()
    assert texts[0] == "Booked in Paris."
    assert "flow_started:pattern_code_change" not in names(events)


async def test_the_change_is_reported_once(root):
    script = {"command_generator": ["start flow pick_city", "set slot city Paris",
                                    "start flow other_flow"]}
    async with FakeModelServer(script) as fake:
        await start_pick_city(root, fake)
        set_flows(root, FLOWS.replace("- action: utter_booked", "- action: utter_hours"))
        async with loaded(root, fake) as assistant:
            conversation = Conversation(assistant)
            with anyio.fail_after(30):
                first, _ = await conversation.say("Paris")
                second, events = await conversation.say("something else")
        fake.assert_done()
    assert first[0] == UPDATED
    assert second[0] == "We are open 9 to 5."
    assert "flow_started:pattern_code_change" not in names(events)
