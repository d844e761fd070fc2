"""Flow steps that call an MCP tool directly, recorded and replayed: the recorded call goes into
the exported test's ``tool_script``, and the test replays it with the MCP server stopped; a
hand-written ``tool_script`` answers a flow tool step too."""

from __future__ import annotations

import textwrap
from pathlib import Path

import anyio
import pytest
from subagents.recording import turn as recording
from subagents.testing import FakeModelServer
from subagents.testing.e2e import Runner
from subagents.testing.export import build_fixture, dump_fixture
from subagents.testing.fixtures import load_file
from subagents.testing.mcp_http import serve_mcp

from tests.dialogue_harness import assistant_for, write_project
from tests.servers.tools_server import server as tools_server

FLOWS = """
    flows:
      lookup_flow:
        description: Look the name up.
        steps:
          - set_slots: [{name: Ada}]
          - id: the_call
            call: echo
            mcp_server: tools
            mapping:
              input: [{param: text, slot: name}]
              output:
                - {slot: city, value: result.structuredContent.result}
                - {slot: shout, value: "result.content[0].text | upper"}
            next: after
          - id: after
            action: utter_found
    """
DOMAIN = """
    slots:
      name: {type: text}
      city: {type: text}
      shout: {type: text}
    responses:
      utter_found: [{text: "Found {city} ({shout})."}]
    """


@pytest.fixture(autouse=True)
def _recording_off():
    recording.reset()
    yield
    recording.reset()


def _project(root: Path, url: str) -> Path:
    return write_project(root, url, {"data/flows.yml": FLOWS, "data/domain.yml": DOMAIN})


async def _record(url: str, tmp_path: Path) -> list[dict]:
    recording.enable()
    project = _project(tmp_path / "recorded", url)
    script = {"command_generator": ["start flow lookup_flow"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            await assistant.handle_message("flow-1", "look Ada up")
        fake.assert_done()
        return list((await assistant.state("flow-1"))["events"])


async def _run(root: Path, path: Path) -> list[str]:
    loaded = load_file(path, root=root)
    assert not loaded.issues, [i.format() for i in loaded.issues]
    with anyio.fail_after(60):
        async with Runner(root, strict=True) as runner:
            result = await runner.run_case(loaded.cases[0])
    return result.failures


async def test_a_recorded_flow_tool_step_replays_with_the_server_stopped(tmp_path):
    async with serve_mcp(tools_server, "http") as url:
        events = await _record(url, tmp_path)
    said = [e["text"] for e in events if e["event"] == "bot"]
    assert said[0] == "Found Ada (ADA)."

    document = build_fixture("flow-1", events)
    (case,) = document["test_cases"]
    (entry,) = case["tool_script"]["tools"]
    assert entry["tool"] == "echo"
    assert entry["arguments"] == {"text": "Ada"}
    assert entry["result"] == "Ada"
    assert entry["structured_content"] == {"result": "Ada"}
    assert entry["description"] == "Echo the text back."
    assert "is_error" not in entry
    # the replay must produce the recorded slots, not just some bot message
    case["steps"][0]["assertions"] = [
        {"tool_executed": {"tool_name": "echo", "arguments": {"text": "Ada"}, "is_error": False}},
        {"slot_was_set": [{"name": "city", "value": "Ada"}, {"name": "shout", "value": "ADA"}]}]

    # the same project, with the server it recorded against no longer running
    offline = _project(tmp_path / "offline", url)
    path = offline / "tests" / "e2e" / "recorded.yml"
    path.parent.mkdir(parents=True)
    path.write_text(dump_fixture(document, "flow-1"), encoding="utf-8")
    assert await _run(offline, path) == []


async def test_a_failed_flow_tool_call_is_recorded_as_an_error(tmp_path):
    recording.enable()
    async with serve_mcp(tools_server, "http") as url:
        project = _project(tmp_path / "failing", url)
        flows = (project / "data" / "flows.yml").read_text().replace(
            "call: echo", "call: fail").replace("param: text", "param: message")
        (project / "data" / "flows.yml").write_text(flows)
        script = {"command_generator": ["start flow lookup_flow"]}
        async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
            with anyio.fail_after(30):
                await assistant.handle_message("flow-2", "look Ada up")
            failed = list((await assistant.state("flow-2"))["events"])
    (entry,) = build_fixture("flow-2", failed)["test_cases"][0]["tool_script"]["tools"]
    assert entry["tool"] == "fail"
    assert entry["arguments"] == {"message": "Ada"}
    assert entry["is_error"] is True
    assert "Ada" in entry["result"]
    recorded = [e for turn in recording.recorded_entries(failed) for e in turn
                if e["kind"] == "tool"]
    assert recorded[0]["flow_step"] == {"flow_id": "lookup_flow", "step_id": "the_call"}


HAND_WRITTEN = """
    test_cases:
      - test_case: scripted_flow_tool_step
        llm_script:
          command_generator: ["start flow lookup_flow"]
        tool_script:
          tools:
            - tool: echo
              arguments: {text: %s}
              result: "scripted"
              structured_content: {result: Zed}
        steps:
          - user: look Ada up
            assertions:
              - slot_was_set: [{name: city, value: Zed}, {name: shout, value: SCRIPTED}]
          - bot: "Found Zed (SCRIPTED)."
    """


async def test_a_hand_written_tool_script_answers_a_flow_tool_step(tmp_path):
    root = _project(tmp_path / "p", "http://127.0.0.1:9/mcp")  # nothing listens there
    path = root / "tests" / "e2e" / "scripted.yml"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(HAND_WRITTEN % "Ada"), encoding="utf-8")
    assert await _run(root, path) == []

    path.write_text(textwrap.dedent(HAND_WRITTEN % "Bob"), encoding="utf-8")
    failures = await _run(root, path)
    assert "tool script: echo on tools was called with {\"text\": \"Ada\"}, recorded with " \
           "{\"text\": \"Bob\"}" in failures
