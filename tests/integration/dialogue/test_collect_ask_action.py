"""A collect step asks with the custom action ``action_ask_<slot>`` when the domain lists one:
after the ``utter_ask_<slot>`` response if there is one, instead of it otherwise (as Rasa's
collect pattern does)."""

from __future__ import annotations

import anyio
from subagents.config import collect_issues
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "data/ask_flows.yml": """
        flows:
          pick_city:
            description: picks a city
            steps:
              - collect: city
              - action: utter_booked
          pick_guests:
            description: picks the number of guests
            steps:
              - collect: guests
              - action: utter_guests
          pick_date:
            description: picks a date
            steps:
              - collect: date
              - action: utter_guests
        """,
    "data/ask_domain.yml": """
        slots:
          guests: {type: float}
          date: {type: text}
        responses:
          utter_ask_guests: [{text: "How many guests?"}]
          utter_guests: [{text: "Noted."}]
        actions: [action_ask_city, action_ask_guests, action_ask_date]
        """,
    "actions/ask.py": """
        from rasa_sdk import Action


        class AskCity(Action):
            def name(self):
                return "action_ask_city"

            async def run(self, dispatcher, tracker, domain):
                dispatcher.utter_message(
                    text="Which city, " + tracker.sender_id + "?",
                    buttons=[{"title": "Paris", "payload": "/SetSlots(city=Paris)"}])
                return []


        class AskGuests(Action):
            def name(self):
                return "action_ask_guests"

            async def run(self, dispatcher, tracker, domain):
                dispatcher.utter_message(text="(up to 8)")
                return []


        class AskDate(Action):
            def name(self):
                return "action_ask_date"

            async def run(self, dispatcher, tracker, domain):
                raise RuntimeError("the calendar is down")
        """,
}


def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def test_the_ask_action_asks_for_a_slot_without_a_response(tmp_path, tools_url):
    script = {"command_generator": ["start flow pick_city"]}
    async with FakeModelServer(script) as fake, \
            assistant_for(project(tmp_path, tools_url), fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            texts, events = await conversation.say("I want to pick a city")
            answer, _ = await conversation.say("/SetSlots(city=Paris)")
        fake.assert_done()
    assert texts == ["Which city, user-1?"]
    bot = next(e for e in events if e["event"] == "bot")
    assert bot["data"]["buttons"][0]["payload"] == "/SetSlots(city=Paris)"
    assert "action:action_ask_city" in names(events)
    assert "action:utter_ask_city" not in names(events)
    assert answer[0] == "Booked in Paris."


async def test_the_ask_action_runs_after_the_response(tmp_path, tools_url):
    script = {"command_generator": ["start flow pick_guests"]}
    async with FakeModelServer(script) as fake, \
            assistant_for(project(tmp_path, tools_url), fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("guests")
        fake.assert_done()
    assert texts == ["How many guests?", "(up to 8)"]
    n = names(events)
    assert n.index("action:utter_ask_guests") < n.index("action:action_ask_guests")


async def test_a_failing_ask_action_cancels_the_flow_and_runs_the_error_pattern(
        tmp_path, tools_url):
    script = {"command_generator": ["start flow pick_date"]}
    async with FakeModelServer(script) as fake, \
            assistant_for(project(tmp_path, tools_url), fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("a date")
        fake.assert_done()
    n = names(events)
    assert "flow_cancelled:pick_date" in n
    assert "flow_started:pattern_internal_error" in n
    assert texts == [assistant.internal_error_text()]


def test_validate_no_longer_warns_about_the_ask_action(tmp_path, tools_url):
    _, issues = collect_issues(project(tmp_path, tools_url))
    codes = {(i.code, i.key) for i in issues}
    assert not [c for c in codes if c[0] in ("flow.collect.ask_action_not_run",
                                             "flow.collect.no_question")], codes
