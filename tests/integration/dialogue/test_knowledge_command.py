"""Rasa's knowledge command (``search and reply``, ``provide info``, ``SearchAndReply()``) starts
``pattern_search``; without a search backend it answers as Rasa's default pattern does, and a
backend plugs in through ``action_trigger_search``."""

from __future__ import annotations

import anyio
import pytest
from subagents.dialogue.commands import KnowledgeAnswer, parse_commands
from subagents.dialogue.results import Advance
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

NO_KB = "I can't look that up: there is no knowledge base I can search."
ANYTHING_ELSE = "Is there anything else I can help you with?"
TRIGGERING_PATTERN = """
    flows:
      pattern_search:
        description: hands knowledge questions to the search backend
        steps:
          - action: action_trigger_search
    """


@pytest.mark.parametrize("line", [
    "search and reply", "provide info", "SearchAndReply()", "- search and reply",
    "1. provide info", "`search and reply`", "Search And Reply", "provide info'"])
def test_every_spelling_of_the_knowledge_command_is_parsed(line):
    assert parse_commands(line) == [KnowledgeAnswer()]


@pytest.mark.parametrize("reply", ["search and reply", "provide info", "SearchAndReply()"])
async def test_the_knowledge_command_runs_the_default_search_pattern(tmp_path, tools_url, reply):
    project = write_project(tmp_path / "assistant", tools_url)
    async with FakeModelServer({"command_generator": [reply]}) as fake, \
            assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("What is your refund policy?")
        fake.assert_done()
    # as Rasa's default pattern_search says without a knowledge base; then, as in Rasa, the
    # search pattern leaves the stack empty and pattern_completed follows
    assert texts == [NO_KB, ANYTHING_ELSE]
    assert "flow_started:pattern_search" in names(events)
    assert "flow_started:pattern_cannot_handle" not in names(events)


async def test_an_override_that_triggers_search_without_a_backend_says_so(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url,
                            {"data/search.yml": TRIGGERING_PATTERN})
    async with FakeModelServer({"command_generator": ["provide info"]}) as fake, \
            assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("Do you deliver on Sundays?")
        fake.assert_done()
    assert texts[0] == NO_KB
    assert "action:action_trigger_search" in names(events)


async def test_a_search_backend_plugs_in_through_action_trigger_search(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url,
                            {"data/search.yml": TRIGGERING_PATTERN})
    asked: list[str] = []

    async def search(turn, frame):
        asked.append(turn.user_text)
        await executor.responder.say(turn, "We deliver every day.",
                                     {"utter_source": "EnterpriseSearchPolicy"})
        return Advance.NEXT

    async with FakeModelServer({"command_generator": ["search and reply"]}) as fake, \
            assistant_for(project, fake) as assistant:
        executor = assistant.executor
        executor.use_search(search)
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("Do you deliver on Sundays?")
        fake.assert_done()
    assert asked == ["Do you deliver on Sundays?"]
    assert texts == ["We deliver every day.", ANYTHING_ELSE]


async def test_a_knowledge_question_interrupts_a_waiting_agent(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url)
    script = {"command_generator": ["start flow weather_flow", "search and reply"],
              "weather_agent": ["Which city?"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("weather please")
            texts, events = await conversation.say("Wait, what is your refund policy?")
        fake.assert_done()
    assert texts[0] == NO_KB
    assert "agent_interrupted:weather_agent" in names(events)
    assert "flow_started:pattern_continue_interrupted" in names(events)
