"""The command generator under constrained output: it asks for JSON under the project's
command schema and reads the JSON reply; without it, the line format as before."""

from __future__ import annotations

import json

from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, write_project


def project(tmp_path, tools_url, mode: str | None):
    root = write_project(tmp_path, tools_url)
    setting = f", structured_output: {mode}" if mode else ""
    (root / "endpoints.yml").write_text(f"""
model_groups:
  - id: llm
    models: [{{provider: self-hosted, model: small, api_base: "http://127.0.0.1:9/v1"{setting}}}]
mcp_servers:
  - name: tools
    type: http
    url: {tools_url}
""")
    return root


async def test_a_self_hosted_model_is_asked_for_json_and_its_reply_is_read(tmp_path, tools_url):
    reply = json.dumps({"commands": [{"command": "start flow", "flow": "opening_hours"}]})
    async with FakeModelServer({"command_generator": [reply]}) as fake, \
            assistant_for(project(tmp_path, tools_url, None), fake) as assistant:
        texts, _ = await Conversation(assistant).say("when are you open?")
        fake.assert_done()
    request = fake.requests_of("command_generator")[0].body
    schema = request["response_format"]["json_schema"]["schema"]
    choices = schema["properties"]["commands"]["items"]["anyOf"]
    start = next(c for c in choices if c["properties"]["command"]["const"] == "start flow")
    assert "opening_hours" in start["properties"]["flow"]["enum"]
    assert '{"commands": [...]}' in request["messages"][0]["content"]
    assert texts[0] == "We are open 9 to 5."


async def test_a_set_slot_in_json_keeps_its_typed_value(tmp_path, tools_url):
    reply = json.dumps({"commands": [{"command": "start flow", "flow": "ask_name"},
                                     {"command": "set slot", "slot": "name", "value": "Ann"}]})
    async with FakeModelServer({"command_generator": [reply]}) as fake, \
            assistant_for(project(tmp_path, tools_url, "json_schema"), fake) as assistant:
        _, events = await Conversation(assistant).say("I'm Ann")
    assert {"event": "slot", "name": "name", "value": "Ann"}.items() <= next(
        e for e in events if e["event"] == "slot" and e["name"] == "name").items()


async def test_with_structured_output_off_the_line_format_is_asked_for(tmp_path, tools_url):
    async with FakeModelServer({"command_generator": ["start flow opening_hours"]}) as fake, \
            assistant_for(project(tmp_path, tools_url, "off"), fake) as assistant:
        texts, _ = await Conversation(assistant).say("when are you open?")
    request = fake.requests_of("command_generator")[0].body
    assert "response_format" not in request
    assert texts[0] == "We are open 9 to 5."


async def test_a_line_reply_is_still_read_when_json_was_asked_for(tmp_path, tools_url):
    async with FakeModelServer({"command_generator": ["start flow opening_hours"]}) as fake, \
            assistant_for(project(tmp_path, tools_url, "json_schema"), fake) as assistant:
        texts, _ = await Conversation(assistant).say("when are you open?")
    assert texts[0] == "We are open 9 to 5."
