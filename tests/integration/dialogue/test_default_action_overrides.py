"""A project's own action named like a default action runs in its place, as in Rasa (D18):
the domain lists it under ``actions`` and the project's code (rasa-sdk) defines it."""

from __future__ import annotations

import anyio
import pytest
from subagents.config.project import collect_issues
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "actions/defaults.py": """
        from rasa_sdk import Action
        from rasa_sdk.events import ActionExecuted, Restarted, SessionStarted, SlotSet


        class Restart(Action):
            def name(self):
                return "action_restart"

            async def run(self, dispatcher, tracker, domain):
                dispatcher.utter_message(text="Fresh start: what would you like to do?")
                return [Restarted()]


        class SessionStart(Action):
            def name(self):
                return "action_session_start"

            async def run(self, dispatcher, tracker, domain):
                metadata = tracker.get_slot("session_started_metadata") or \
                    tracker.latest_message.get("metadata") or {}
                tier = metadata.get("tier", "basic")
                return [SessionStarted(), SlotSet("tier", tier), ActionExecuted("action_listen")]


        class Search(Action):
            def name(self):
                return "action_trigger_search"

            async def run(self, dispatcher, tracker, domain):
                question = tracker.latest_message.get("text")
                dispatcher.utter_message(text=f"Our FAQ on {question!r}: yes.")
                return []


        class Fallback(Action):
            def name(self):
                return "action_default_fallback"

            async def run(self, dispatcher, tracker, domain):
                dispatcher.utter_message(text="Our own fallback.")
                return []
        """,
    "data/defaults_domain.yml": """
        slots:
          tier: {type: text}
        actions:
          - action_restart
          - action_session_start
          - action_default_fallback
          - action_trigger_search
        """,
    "data/defaults_flows.yml": """
        flows:
          fallback_flow:
            description: falls back
            steps:
              - action: action_default_fallback
          pattern_search:
            description: answers from the project's own search action
            steps:
              - action: action_trigger_search
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, EXTRA)


async def test_the_projects_action_restart_runs_and_restarts(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("/SetSlots(name=Ada)")
            texts, events = await conversation.say("/restart")
            state = await assistant.state("user-1")
        fake.assert_done()
    assert texts == ["Fresh start: what would you like to do?"]
    assert names(events)[names(events).index("action:action_restart") + 1:][:2] == [
        "bot:Fresh start: what would you like to do?", "restart"]
    assert state["slots"]["name"] is None
    assert state["stack"] == []


async def test_a_new_conversation_starts_with_the_projects_action_session_start(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            _, events = await Conversation(assistant).say("/opening_hours", tier="gold")
        fake.assert_done()
    assert names(events)[:6] == ["slot:session_started_metadata={'tier': 'gold'}",
                                 "action:action_session_start", "session_started",
                                 "slot:tier=gold", "action:action_listen",
                                 "user:/opening_hours"]


async def test_session_start_mid_conversation_runs_the_projects_action_once(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("/opening_hours")
            _, events = await conversation.say("/session_start", tier="silver")
        fake.assert_done()
    assert names(events).count("action:action_session_start") == 1
    assert "slot:tier=silver" in names(events)


async def test_the_projects_action_default_fallback_runs_in_a_flow(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("/fallback_flow")
        fake.assert_done()
    assert texts[0] == "Our own fallback."


async def test_the_projects_action_trigger_search_answers_knowledge_questions(project):
    async with FakeModelServer({"command_generator": ["search and reply"]}) as fake, \
            assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("Can I bring my dog?")
        fake.assert_done()
    assert texts[0] == "Our FAQ on 'Can I bring my dog?': yes."
    _, issues = collect_issues(project)
    assert "flow.action.search_unsupported" not in [i.code for i in issues]


def test_listing_a_default_action_loads_without_a_warning_except_action_listen(project):
    (project / "data/listen.yml").write_text("actions: [action_listen]\n", encoding="utf-8")
    _, issues = collect_issues(project)
    found = [(i.code, i.file, i.key) for i in issues if i.code == "domain.action.builtin_override"]
    assert found == [("domain.action.builtin_override", "data/listen.yml", "actions[0]")]
