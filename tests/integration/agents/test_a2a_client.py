"""``protocol: A2A`` sub agents against a real a2a-sdk server on 127.0.0.1 (the demo dealer):
task states, streaming and non-streaming cards, slots sent as data, auth, card errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from subagents.demo.a2a_dealer import build_app
from subagents.exceptions import AgentInitializationError
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import _RequireHeader, serve_app

from tests.dialogue_harness import (
    SESSION_START,
    Conversation,
    assistant_for,
    names,
    write_project,
)

ASK_MODEL = ("Which model are you looking for? We have the Corolla, the Civic and the "
             "Model 3.")
FLOWS = """
    flows:
      buy_car:
        description: find a car at the dealer
        steps:
          - call: car_dealer
          - action: utter_dealer_done
      buy_known_car:
        description: find a known car model at the dealer
        steps:
          - set_slots:
              - car_model: corolla
          - call: car_dealer
          - action: utter_dealer_done
    """
DOMAIN = """
    slots:
      car_model: {type: text}
    responses:
      utter_dealer_done: [{text: "Anything else about cars?"}]
    """
"""Beside the dialogue harness's own domain file (domain files are merged)."""


def dealer_config(card: str, extra: str = "") -> str:
    return f"""
        agent: {{name: car_dealer, protocol: a2a, description: Checks cars at a dealer.}}
        configuration:
          agent_card: {card}
          max_retries: 1
          timeout: 20
        {extra}
        """


def project_with(root: Path, tools_url: str, card: str, extra: str = "") -> Path:
    return write_project(root, tools_url, {
        "data/flows.yml": FLOWS, "data/a2a_domain.yml": DOMAIN,
        "sub_agents/car_dealer/config.yml": dealer_config(card, extra)})


@pytest.fixture
async def dealer() -> AsyncIterator[str]:
    async with serve_app(build_app()) as base:
        yield base


async def _two_turns(project: Path) -> tuple[list[list[str]], list[list[dict[str, Any]]]]:
    script = {"command_generator": ["start flow buy_car", ""]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(30):
            texts1, turn1 = await convo.say("I want to buy a car")
            texts2, turn2 = await convo.say("the Civic please")
        fake.assert_done()
    return [texts1, texts2], [turn1, turn2]


@pytest.mark.parametrize("streaming", [True, False])
async def test_input_required_waits_for_the_user_then_the_task_completes(
        tmp_path, tools_url, streaming):
    async with serve_app(build_app(streaming=streaming)) as base:
        project = project_with(tmp_path / "a", tools_url, f"{base}/.well-known/agent-card.json")
        texts, turns = await _two_turns(project)
    assert texts[0] == [ASK_MODEL]
    assert names(turns[0]) == [
        *SESSION_START, "user:I want to buy a car", "flow_started:buy_car",
        "agent_started:car_dealer", f"bot:{ASK_MODEL}", "action:action_agent_request_user_input",
        "action:action_listen"]
    assert turns[0][len(SESSION_START) + 2]["metadata"]["protocol"] == "a2a"
    offer = "The Civic is in stock at $26,900."
    if streaming:  # the working status text reaches the user as an intermediate message
        assert texts[1][:2] == ["Checking our stock for the Civic...", offer]
    else:
        assert texts[1][0] == offer
    assert "agent_completed:car_dealer" in names(turns[1])
    assert "Anything else about cars?" in texts[1]
    assert "flow_completed:buy_car" in names(turns[1])


async def test_slots_with_values_reach_the_remote_agent_as_a_data_part(
        tmp_path, tools_url, dealer):
    project = project_with(tmp_path / "a", tools_url, f"{dealer}/.well-known/agent-card.json")
    script = {"command_generator": ["start flow buy_known_car"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("a corolla")
    assert "The Corolla is in stock at $24,500." in texts
    assert "agent_completed:car_dealer" in names(events)


async def test_a_plain_message_reply_is_a_question_to_the_user(tmp_path, tools_url, dealer):
    project = project_with(tmp_path / "a", tools_url, f"{dealer}/.well-known/agent-card.json")
    script = {"command_generator": ["start flow buy_car"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("what are your opening hours?")
    assert texts == ["We are open Monday to Saturday, 9:00 to 18:00."]
    assert "action:action_agent_request_user_input" in names(events)


@pytest.mark.parametrize("word", ["broken", "forbidden", "call it off"])
async def test_failed_rejected_and_canceled_tasks_end_in_the_internal_error_pattern(
        tmp_path, tools_url, dealer, word):
    project = project_with(tmp_path / "a", tools_url, f"{dealer}/.well-known/agent-card.json")
    script = {"command_generator": ["start flow buy_car"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say(f"it is {word}")
    flow = names(events)
    assert flow.count("agent_started:car_dealer") == 1
    assert "agent_cancelled:car_dealer" in flow
    assert "flow_cancelled:buy_car" in flow
    assert "flow_started:pattern_internal_error" in flow
    assert texts  # the user hears the internal-error reply


async def test_a_card_file_with_a_legacy_url_field_works(tmp_path, tools_url, dealer):
    card = json.loads(await _get(f"{dealer}/.well-known/agent-card.json"))
    legacy = {k: v for k, v in card.items() if k != "supportedInterfaces"}
    legacy["url"] = f"{dealer}/"
    root = tmp_path / "a"
    project = project_with(root, tools_url, "sub_agents/car_dealer/card.json")
    (root / "sub_agents/car_dealer/card.json").write_text(json.dumps(legacy))
    script = {"command_generator": ["start flow buy_car"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("I want a car")
    assert texts == [ASK_MODEL]


async def _get(url: str) -> str:
    import httpx

    async with httpx.AsyncClient() as client:
        return (await client.get(url)).text


@pytest.mark.parametrize(("card", "code"), [
    ("http://127.0.0.1:9/.well-known/agent-card.json", "agent.a2a.card_unreachable"),
    ("sub_agents/car_dealer/missing.json", "agent.a2a.card_not_found"),
])
async def test_an_unreachable_card_stops_the_start_with_a_clear_error(
        tmp_path, tools_url, card, code):
    project = project_with(tmp_path / "a", tools_url, card)
    async with FakeModelServer({}) as fake:
        with anyio.fail_after(30), pytest.raises(AgentInitializationError) as info:
            async with assistant_for(project, fake):
                pass
    assert info.value.code == code


async def test_the_health_check_fails_when_the_agent_is_unreachable(tmp_path, tools_url, dealer):
    card = json.loads(await _get(f"{dealer}/.well-known/agent-card.json"))
    card["supportedInterfaces"][0]["url"] = "http://127.0.0.1:9/"
    root = tmp_path / "a"
    project = project_with(root, tools_url, "sub_agents/car_dealer/card.json")
    (root / "sub_agents/car_dealer/card.json").write_text(json.dumps(card))
    async with FakeModelServer({}) as fake:
        with anyio.fail_after(30), pytest.raises(AgentInitializationError) as info:
            async with assistant_for(project, fake):
                pass
    assert info.value.code == "agent.a2a.unreachable"


async def test_auth_token_from_the_environment_reaches_the_remote_agent(
        tmp_path, tools_url, monkeypatch):
    monkeypatch.setenv("DEALER_TOKEN", "s3cret")
    app = _RequireHeader(build_app(), "authorization", "Bearer s3cret")
    async with serve_app(app) as base:
        card = f"{base}/.well-known/agent-card.json"
        good = project_with(tmp_path / "good", tools_url, card,
                            "  auth: {token: '${DEALER_TOKEN}'}")
        script = {"command_generator": ["start flow buy_car"]}
        async with FakeModelServer(script) as fake, assistant_for(good, fake) as assistant:
            with anyio.fail_after(30):
                texts, _ = await Conversation(assistant).say("I want a car")
        assert texts == [ASK_MODEL]
        bad = project_with(tmp_path / "bad", tools_url, card)
        async with FakeModelServer({}) as fake:
            with anyio.fail_after(30), pytest.raises(AgentInitializationError):
                async with assistant_for(bad, fake):
                    pass


async def test_an_agent_that_goes_away_mid_conversation_ends_in_the_internal_error_pattern(
        tmp_path, tools_url):
    script = {"command_generator": ["start flow buy_car", ""]}
    async with contextlib.AsyncExitStack() as dealer_stack:
        base = await dealer_stack.enter_async_context(serve_app(build_app()))
        project = project_with(tmp_path / "a", tools_url, f"{base}/.well-known/agent-card.json")
        async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
            convo = Conversation(assistant)
            with anyio.fail_after(30):
                texts1, _ = await convo.say("I want a car")
            await dealer_stack.aclose()
            with anyio.fail_after(30):
                texts2, turn2 = await convo.say("the Civic")
    assert texts1 == [ASK_MODEL]
    assert "flow_started:pattern_internal_error" in names(turn2)
    assert texts2


async def test_a_failing_output_hook_ends_in_the_internal_error_pattern(tmp_path, tools_url,
                                                                         dealer):
    root = tmp_path / "a"
    project = project_with(root, tools_url, f"{dealer}/.well-known/agent-card.json",
                           "  module: hooks_pkg.bad.BadDealer")
    (root / "hooks_pkg").mkdir()
    (root / "hooks_pkg" / "__init__.py").write_text("")
    (root / "hooks_pkg" / "bad.py").write_text(
        "from subagents.agents.a2a_agent import A2AAgent\n\n\n"
        "class BadDealer(A2AAgent):\n"
        "    async def process_agent_output(self, output):\n"
        "        raise RuntimeError('boom')\n")
    script = {"command_generator": ["start flow buy_car"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("a civic please")
    assert "agent_cancelled:car_dealer" in names(events)
    assert "flow_started:pattern_internal_error" in names(events)
    assert texts  # the user hears the internal-error reply


async def test_with_exit_if_the_agent_runs_as_a_task_agent_without_the_remote(tmp_path,
                                                                               tools_url):
    flows = FLOWS + """
      buy_with_exit:
        description: the dealer step with an exit condition
        steps:
          - call: car_dealer
            exit_if:
              - slots.car_model is not null
          - action: utter_dealer_done
    """
    flows = flows.replace("""      buy_car:
        description: find a car at the dealer
        steps:
          - call: car_dealer
          - action: utter_dealer_done
""", "").replace("""      buy_known_car:
        description: find a known car model at the dealer
        steps:
          - set_slots:
              - car_model: corolla
          - call: car_dealer
          - action: utter_dealer_done
""", "")
    project = write_project(tmp_path / "a", tools_url, {
        "data/flows.yml": flows, "data/a2a_domain.yml": DOMAIN,
        # unreachable: an A2A connection would stop the start
        "sub_agents/car_dealer/config.yml": dealer_config("http://127.0.0.1:9/card.json")})
    script = {"command_generator": ["start flow buy_with_exit"],
              "car_dealer": [{"tool_calls": [{"set_slot_car_model": {"slot_value": "civic"}}]}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("a civic")
        fake.assert_done()
    assert "slot:car_model=civic" in names(events)
    started = next(e for e in events if e["event"] == "agent_started")
    assert started["metadata"]["protocol"] == "mcp_task"
    assert "Anything else about cars?" in texts


@pytest.mark.parametrize(("hook", "tier"), [("good", "gold"), ("bad", None)])
async def test_the_pre_call_hook_adds_message_metadata_or_stops_the_call(
        tmp_path, tools_url, dealer, hook, tier):
    root = tmp_path / "a"
    project = project_with(root, tools_url, f"{dealer}/.well-known/agent-card.json",
                           f"  pre_call_hook: dealer_hooks.{hook}")
    (root / "dealer_hooks.py").write_text(
        "def good(context):\n"
        "    assert context['agent_id'] == 'car_dealer'\n"
        "    return {'customer_tier': 'gold'}\n\n\n"
        "def bad(context):\n"
        "    raise RuntimeError('no tier')\n")
    script = {"command_generator": ["start flow buy_car"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("show my account")
    if tier:
        assert texts == [f"Your customer tier: {tier}."]
    else:
        assert "flow_started:pattern_internal_error" in names(events)
        assert names(events).count("agent_started:car_dealer") == 1


async def test_after_a_digression_the_remote_task_resumes_with_the_transcript(tmp_path,
                                                                              tools_url, dealer):
    flows = FLOWS + """
      opening_hours:
        description: opening hours
        steps:
          - action: utter_hours
    """
    project = write_project(tmp_path / "a", tools_url, {
        "data/flows.yml": flows, "data/a2a_domain.yml": DOMAIN,
        "sub_agents/car_dealer/config.yml": dealer_config(
            f"{dealer}/.well-known/agent-card.json")})
    script = {"command_generator": ["start flow buy_car", "start flow opening_hours", ""]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(30):
            texts1, _ = await convo.say("I want to buy a car")
            task_before = _waiting_task(await assistant.state(convo.sender))
            _, turn2 = await convo.say("when are you open?")
            texts3, turn3 = await convo.say(
                "/SetSlots(continue_interrupted_flow_confirmation=true)")
            task_after = _waiting_task(await assistant.state(convo.sender))
            texts4, turn4 = await convo.say("the Model 3")
        fake.assert_done()
    assert texts1 == [ASK_MODEL]
    assert "agent_interrupted:car_dealer" in names(turn2)
    assert texts3 == [ASK_MODEL]  # asked again: the transcript's last user line names no model
    assert "agent_resumed:car_dealer" in names(turn3)
    assert "The Model 3 is in stock at $41,990." in texts4
    assert "agent_completed:car_dealer" in names(turn4)
    assert task_before is not None
    assert task_after == task_before  # the same remote task went on


def _waiting_task(state: dict[str, Any]) -> str | None:
    for frame in state["stack"]:
        task = (frame.get("metadata") or {}).get("a2a_task_id")
        if task:
            return str(task)
    return None
