"""The response rephraser: responses that ask for it are rewritten by the `rephraser` model;
on a failure or an empty answer they go out as written."""

from __future__ import annotations

import pytest
from subagents.config.project import collect_issues
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, write_project

FLOWS = """
    flows:
      ready_flow:
        description: tells that the order is ready
        steps:
          - action: utter_ready
          - action: utter_plain
    """
DOMAIN = """
    responses:
      utter_ready:
        - text: "Your order {order} is ready."
          metadata: {rephrase: true}
      utter_plain:
        - text: "Goodbye."
    slots:
      order: {type: text, initial_value: A-7}
    """


def _project(tmp_path, tools_url, nlg: str):
    endpoints = f"""
        model_groups:
          - id: llm
            models: [{{provider: openai, model: gpt-test}}]
        mcp_servers:
          - name: tools
            type: http
            url: {tools_url}
        nlg: {nlg}
        """
    return write_project(tmp_path / "assistant", tools_url, {
        "endpoints.yml": endpoints, "data/ready_flows.yml": FLOWS, "data/ready.yml": DOMAIN})


@pytest.fixture
def project(tmp_path, tools_url):
    return _project(tmp_path, tools_url, "{type: rephrase}")


async def test_a_response_that_asks_for_it_is_rephrased(project):
    script = {"rephraser": [{"text": "Good news: order A-7 is ready for you!",
                             "expect": {"messages_contain": ["Your order A-7 is ready.",
                                                             "USER: /ready_flow"]}}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/ready_flow")
        fake.assert_done()
    assert texts[:2] == ["Good news: order A-7 is ready for you!", "Goodbye."]
    bots = [e for e in events if e["event"] == "bot"]
    assert bots[0]["metadata"]["utter_source"] == "ContextualResponseRephraser"
    assert bots[1]["metadata"]["utter_source"] == "TemplatedNaturalLanguageGenerator"


@pytest.mark.parametrize("reply", [{"error": {"status": 500, "message": "down"}}, ""])
async def test_on_failure_the_response_goes_out_as_written(project, reply):
    async with FakeModelServer({"rephraser": [reply]}) as fake, \
            assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/ready_flow")
        fake.assert_done()
    assert texts[:2] == ["Your order A-7 is ready.", "Goodbye."]


async def test_rasa_3_7s_rephraser_class_name_rephrases(tmp_path, tools_url):
    project = _project(tmp_path, tools_url,
                       "{type: rasa_plus.ml.ContextualResponseRephraser}")
    _, issues = collect_issues(project)
    assert [i.code for i in issues if i.code.startswith("endpoints.nlg")] == []
    async with FakeModelServer({"rephraser": ["Order A-7: ready!"]}) as fake, \
            assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/ready_flow")
        fake.assert_done()
    assert texts[:2] == ["Order A-7: ready!", "Goodbye."]


async def test_rephrase_all_rephrases_every_response(tmp_path, tools_url):
    project = _project(tmp_path, tools_url, "{type: rephrase, rephrase_all: true}")
    script = {"rephraser": ["Ready!", "Bye!", "Anything else?"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        texts, _ = await Conversation(assistant).say("/ready_flow")
        fake.assert_done()
    assert texts == ["Ready!", "Bye!", "Anything else?"]


async def test_without_an_nlg_section_nothing_is_rephrased(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url,
                            {"data/ready_flows.yml": FLOWS, "data/ready.yml": DOMAIN})
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant:
        texts, events = await Conversation(assistant).say("/ready_flow")
        fake.assert_done()
    assert texts[0] == "Your order A-7 is ready."
    assert "utter_source" not in next(e for e in events if e["event"] == "bot")["metadata"]
