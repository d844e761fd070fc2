"""The command generator's config.yml keys at run time: a project's own ``prompt_template`` with
the variables Rasa passes, ``user_input.max_characters``, and intents sent in message
metadata for ``nlu_trigger``."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

TEMPLATE = """\
{% for flow in available_flows %}FLOW {{ flow.name }}: {{ flow.description }}\
{% for slot in flow.slots %} [{{ slot.name }}]{% endfor %}
{% endfor %}CURRENT {{ current_flow }} / {{ current_slot }} ({{ current_slot_type }})
{% for slot in flow_slots %}SLOT {{ slot.name }}={{ slot.value }}
{% endfor %}MESSAGE {{ user_message | to_json_escaped_string }}
UNDEFINED[{{ car_research_agent_active }}]
DATE {{ current_datetime is defined }}
CONVERSATION
{{ current_conversation }}
"""


def config(generator: str = "") -> str:
    return ("assistant_id: test_assistant\npipeline:\n  - name: CompactLLMCommandGenerator\n"
            "    llm: {model_group: llm}\n" + generator)


INTENT_FLOWS = """
    flows:
      balance_flow:
        description: tells the balance
        nlu_trigger:
          - intent: {name: check_balance, confidence_threshold: 0.8}
        steps:
          - action: utter_balance
    """
INTENT_DOMAIN = """
    responses:
      utter_balance: [{text: "Your balance is 10."}]
    """


def project_with(tmp_path, tools_url, generator: str = "", files: dict[str, str] | None = None):
    extra = {"config.yml": config(generator), "data/intent_flows.yml": INTENT_FLOWS,
             "data/intent_domain.yml": INTENT_DOMAIN, **(files or {})}
    return write_project(tmp_path / "assistant", tools_url, extra)


def pattern_context(events, flow_id):
    started = [e for e in events if e["event"] == "flow_started" and e["flow_id"] == flow_id]
    assert started, names(events)
    return started[0].get("metadata") or {}


# ---------------------------------------------------------------- prompt_template
async def test_a_custom_prompt_template_gets_rasas_variables_and_its_reply_is_parsed(
        tmp_path, tools_url):
    root = project_with(tmp_path, tools_url, "    prompt_template: prompts/commands.jinja2\n",
                        {"prompts/commands.jinja2": TEMPLATE})
    script = {"command_generator": [
        {"text": "StartFlow(ask_name)", "expect": {
            "messages_contain": ["FLOW ask_name: asks a name and greets [name]\n",
                                 "FLOW balance_flow: tells the balance\n",
                                 "CURRENT None / None (None)\n",
                                 'MESSAGE "I want to say \\"hi\\""\n', "UNDEFINED[]",
                                 "DATE True", "CONVERSATION\nUSER: I want to say\n"],
            "messages_not_contain": ["FLOW hidden_flow", "pattern_", "You route messages"]}},
        {"text": "set slot name Bob", "expect": {
            "messages_contain": ["CURRENT ask_name / name (text)\n", "SLOT name=undefined\n",
                                 'MESSAGE "Bob"\n',
                                 "AI: What is your name?\nUSER: Bob"]}},
    ]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            first, _ = await conversation.say('I want to say\n"hi"')
            second, _ = await conversation.say("Bob")
        fake.assert_done()
    assert first == ["What is your name?"]
    assert second[0] == "Hello Bob!"


async def test_a_template_that_fails_to_render_runs_the_internal_error_pattern(
        tmp_path, tools_url):
    root = project_with(tmp_path, tools_url, "    prompt_template: broken.jinja2\n",
                        {"broken.jinja2": "{{ current_flow.no_such.attribute }}"})
    async with FakeModelServer({}) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("hello")
        fake.assert_done()
    assert pattern_context(events, "pattern_internal_error")["error_type"] == \
        "rasa_internal_error_default"
    assert texts == [assistant.internal_error_text()]


# ---------------------------------------------------------------- user_input
async def test_a_message_over_max_characters_gets_the_too_long_reply_without_a_model_call(
        tmp_path, tools_url):
    root = project_with(tmp_path, tools_url, "    user_input: {max_characters: 10}\n")
    async with FakeModelServer({}) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("this is eleven+")
        fake.assert_done()
    context = pattern_context(events, "pattern_internal_error")
    assert context["error_type"] == "rasa_internal_error_user_input_too_long"
    assert context["info"] == {"max_characters": 10}
    assert texts == ["That message is too long for me; please keep it under 10 characters."]
    assert "user:this is eleven+" in names(events)


async def test_the_default_limit_is_420_characters(tmp_path, tools_url):
    root = project_with(tmp_path, tools_url)
    script = {"command_generator": ["start flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            accepted, _ = await conversation.say("x" * 420)
            _, events = await conversation.say("x" * 421)
        fake.assert_done()
    assert accepted[0] == "We are open 9 to 5."
    assert pattern_context(events, "pattern_internal_error")["error_type"] == \
        "rasa_internal_error_user_input_too_long"


@pytest.mark.parametrize("text", ["", "  \n\t "])
async def test_an_empty_message_gets_the_empty_input_reply_without_a_model_call(
        tmp_path, tools_url, text):
    root = project_with(tmp_path, tools_url)
    async with FakeModelServer({}) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say(text)
        fake.assert_done()
    assert pattern_context(events, "pattern_internal_error")["error_type"] == \
        "rasa_internal_error_user_input_empty"
    assert texts == ["Your message seems to be empty. What would you like to say?"]


async def test_a_negative_max_characters_disables_the_limit(tmp_path, tools_url):
    root = project_with(tmp_path, tools_url, "    user_input: {max_characters: -1}\n")
    long_text = "please tell me the opening hours " * 40
    script = {"command_generator": [{"text": "start flow opening_hours",
                                     "expect": {"messages_contain": long_text.strip()}}]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say(long_text)
        fake.assert_done()
    assert texts[0] == "We are open 9 to 5."


async def test_a_too_long_message_does_not_reach_a_waiting_agent(tmp_path, tools_url):
    root = project_with(tmp_path, tools_url, "    user_input: {max_characters: 30}\n")
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": ["Which city?"]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        conversation = Conversation(assistant)
        with anyio.fail_after(30):
            await conversation.say("weather please")
            texts, events = await conversation.say("a" * 31)
        fake.assert_done()
    assert texts == ["That message is too long for me; please keep it under 30 characters."]
    assert not [e for e in events if e["event"].startswith("agent_")]


# ---------------------------------------------------------------- intents in metadata
@pytest.mark.parametrize("intent", [{"name": "check_balance", "confidence": 0.9},
                                    {"name": "check_balance"}, "check_balance"])
async def test_an_intent_in_the_metadata_starts_its_flow_without_a_model(
        tmp_path, tools_url, intent):
    root = project_with(tmp_path, tools_url)
    async with FakeModelServer({}) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, events = await Conversation(assistant).say("how much money do I have",
                                                              intent=intent)
        fake.assert_done()
    assert texts[0] == "Your balance is 10."
    user = next(e for e in events if e["event"] == "user")
    assert user["metadata"]["intent"] == intent


@pytest.mark.parametrize("intent", [{"name": "check_balance", "confidence": 0.5},
                                    {"name": "no_such_intent", "confidence": 1.0},
                                    {"confidence": 0.9}, 42])
async def test_an_intent_that_triggers_nothing_leaves_the_message_to_the_model(
        tmp_path, tools_url, intent):
    root = project_with(tmp_path, tools_url)
    script = {"command_generator": ["start flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant:
        with anyio.fail_after(30):
            texts, _ = await Conversation(assistant).say("when are you open", intent=intent)
        fake.assert_done()
    assert texts[0] == "We are open 9 to 5."


async def test_a_rest_client_sends_an_intent_in_the_message_metadata(tmp_path, tools_url):
    root = project_with(tmp_path, tools_url)
    async with FakeModelServer({}) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(30):
            response = await client.post("/webhooks/rest/webhook", json={
                "sender": "rest-user", "message": "balance?",
                "metadata": {"intent": {"name": "check_balance", "confidence": 0.95}}})
        fake.assert_done()
    assert response.status_code == 200
    assert response.json()[0]["text"] == "Your balance is 10."
