"""Responses: variation choice by condition, channel and seeded chance; `{slot}` and sandboxed
Jinja filling; buttons, images and custom payloads reaching the channel; agent-owned slots."""

from __future__ import annotations

import random
from typing import Any

import pytest
from subagents.channels.collecting import CollectingOutputChannel
from subagents.config.project import load_project
from subagents.dialogue.command_effects import agent_owned_slots
from subagents.dialogue.responses import SEED_ENV, Responder
from subagents.dialogue.stack import Stack
from subagents.dialogue.turn import Turn
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

EXTRA = {
    "data/responses_flows.yml": """
        flows:
          status_flow:
            description: tells the member status
            steps:
              - action: utter_status
          card_flow:
            description: shows a card
            steps:
              - action: utter_card
          jinja_flow:
            description: a jinja response
            steps:
              - action: utter_jinja
              - action: utter_format
          only_conditional_flow:
            description: a response whose conditions do not hold
            steps:
              - action: utter_only_conditional
        """,
    "data/responses_domain.yml": """
        slots:
          tier: {type: text}
          balance: {type: float}
          vip: {type: bool}
        responses:
          utter_status:
            - text: "Gold caller."
              condition: "slots.tier = 'gold'"
              channel: browser_audio
            - text: "Hello, caller."
              channel: browser_audio
            - text: "Gold member with {balance}."
              condition: "slots.tier = 'gold' and slots.balance > 100"
            - text: "Silver member."
              condition: [{type: slot, name: tier, value: SILVER}]
            - text: "Welcome."
            - text: "Never: another channel."
              channel: socketio
          utter_card:
            - text: "Your card, {name}"
              buttons:
                - {title: "Call {name}", payload: "/SetSlots(tier=gold)"}
              image: "https://example.com/{tier}.png"
              custom: {kind: card, owner: "{name}", items: ["{tier}", 3]}
          utter_jinja:
            - text: "{% if vip %}Welcome back, {{ name | title }}!{% else %}Hi.{% endif %}"
              metadata: {template: jinja}
            - text: "{{ ''.__class__.__mro__[1].__subclasses__() }}"
              condition: "slots.tier = 'escape'"
              metadata: {template: jinja}
          utter_format:
            - text: "{name} has {{braces}} and {balance}"
          utter_only_conditional:
            - text: "Never sent."
              condition: "slots.tier = 'platinum'"
          utter_a_or_b:
            - text: "A"
            - text: "B"
            - text: "C"
        """,
}


class NamedChannel(CollectingOutputChannel):
    """A collecting channel with a name, as real channels have."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, dict(EXTRA))


async def _say(assistant: Any, text: str, channel: CollectingOutputChannel,
               sender: str = "user-1") -> list[dict[str, Any]]:
    return await assistant.handle_message(sender, text, None, channel)


@pytest.mark.parametrize(("slots", "channel", "expected"), [
    ("tier=gold, balance=150", None, "Gold member with 150.0."),
    ("tier=gold, balance=50", None, "Welcome."),
    ("tier=silver", None, "Silver member."),  # list conditions compare text case-insensitively
    ("tier=gold", "browser_audio", "Gold caller."),
    ("tier=bronze", "browser_audio", "Hello, caller."),
    ("tier=bronze", "rest", "Welcome."),
])
async def test_a_variation_is_chosen_by_condition_and_channel(project, slots, channel, expected):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        out = NamedChannel(channel) if channel else CollectingOutputChannel()
        await _say(assistant, f"/SetSlots({slots})", out)
        await _say(assistant, "/status_flow", out)
        fake.assert_done()
    assert out.texts[0] == expected


async def test_buttons_images_and_custom_payloads_reach_the_channel_filled_in(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        out = CollectingOutputChannel()
        await _say(assistant, "/SetSlots(name=Ada, tier=gold)", out)
        events = await _say(assistant, "/card_flow", out)
        fake.assert_done()
    message = out.messages[0]
    assert message["text"] == "Your card, Ada"
    assert message["buttons"] == [{"title": "Call Ada", "payload": "/SetSlots(tier=gold)"}]
    assert message["image"] == "https://example.com/gold.png"
    assert message["custom"] == {"kind": "card", "owner": "Ada", "items": ["gold", 3]}
    bot = next(e for e in events if e["event"] == "bot")
    assert bot["data"]["image"] == "https://example.com/gold.png"
    assert bot["data"]["custom"]["owner"] == "Ada"
    assert bot["metadata"]["utter_action"] == "utter_card"


async def test_jinja_and_format_filling(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        out = CollectingOutputChannel()
        await _say(assistant, "/SetSlots(name=ada lovelace, vip=true, balance=3)", out)
        await _say(assistant, "/jinja_flow", out)
        fake.assert_done()
    assert out.texts[:2] == ["Welcome back, Ada Lovelace!",
                             "ada lovelace has {braces} and 3.0"]


async def test_an_unset_slot_in_a_format_response_reads_none_as_in_rasa(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        out = CollectingOutputChannel()
        await _say(assistant, "/SetSlots(vip=true)", out)
        await _say(assistant, "/jinja_flow", out)
        fake.assert_done()
    # neither name nor balance is set: Rasa's interpolation writes None for both
    assert out.texts[1] == "None has {braces} and None"


async def test_a_jinja_response_cannot_leave_the_sandbox(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        out = CollectingOutputChannel()
        await _say(assistant, "/SetSlots(tier=escape)", out)
        await _say(assistant, "/jinja_flow", out)
        fake.assert_done()
    assert out.texts[0] == "{{ ''.__class__.__mro__[1].__subclasses__() }}"  # sent as written


async def test_without_an_eligible_variation_the_internal_error_response_is_sent(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/only_conditional_flow")
        fake.assert_done()
    assert texts[0] == "Sorry, something went wrong on my side. Please try again in a little while."
    bot = next(e for e in events if e["event"] == "bot")
    assert bot["metadata"]["utter_action"] == "utter_only_conditional"


def _turn(project_dir):
    project = load_project(project_dir)
    return project, Turn("u", [], Stack(), project.domain, None)


def test_the_choice_among_eligible_variations_is_random_and_seedable(project):
    loaded, turn = _turn(project)

    def picks(responder: Responder) -> list[str | None]:
        return [v.text for v in (responder.choose(turn, "utter_a_or_b") for _ in range(30))
                if v is not None]

    first = picks(Responder(loaded, rng=random.Random(11)))
    assert first == picks(Responder(loaded, rng=random.Random(11)))
    assert set(first) == {"A", "B", "C"}


def test_the_seed_can_come_from_the_environment(project, monkeypatch):
    loaded, turn = _turn(project)
    monkeypatch.setenv(SEED_ENV, "5")
    one, two = Responder(loaded), Responder(loaded)
    assert [one.choose(turn, "utter_a_or_b") for _ in range(10)] == \
        [two.choose(turn, "utter_a_or_b") for _ in range(10)]


def test_slots_read_by_exit_conditions_and_never_collected_belong_to_agents(project):
    loaded, _ = _turn(project)
    owned = agent_owned_slots(loaded)
    assert "city" in owned  # booking_flow: exit_if slots.city, no collect step asks for it
    assert "name" not in owned  # collected by ask_name


async def test_the_command_generator_cannot_set_an_agent_owned_slot(project):
    script = {"command_generator": ["set slot city Paris"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("my city is Paris, trust me")
        fake.assert_done()
    assert not [n for n in names(events) if n.startswith("slot:city")]
    assert texts == ["I didn't quite get that. Could you say it another way?"]
