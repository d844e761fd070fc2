"""Recording conversations (per conversation via the API, redaction), exporting them, and
replaying recorded tool results with the `tool_script` stand-in."""

from __future__ import annotations

import textwrap

import httpx2
import pytest
from subagents.exceptions import ConfigError
from subagents.recording import turn as recording
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.e2e import Runner
from subagents.testing.export import build_fixture, dump_fixture
from subagents.testing.fixtures import load_file
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

NOWHERE = "http://127.0.0.1:9/mcp"
"""No MCP server listens here: replayed cases must not need one."""

TURN = [
    {"text": "Checking.", "tool_calls": [{"echo": {"text": "Riga"}}]},
    {"text": "Sunny in Riga.", "tool_calls": [{"task_completed": {}}]},
]


@pytest.fixture(autouse=True)
def _recording_off():
    recording.reset()
    yield
    recording.reset()


def _listens(state: dict) -> list[dict]:
    """The turns' closing ``action_listen`` events (not the recording switches, nor the listen
    of the session start before the first message)."""
    events = state["events"]
    return [e for i, e in enumerate(events) if e["event"] == "action"
            and e["name"] == "action_listen" and not recording.is_switch_event(e)
            and not (i and events[i - 1]["event"] == "session_started")]


async def test_recording_is_turned_on_per_conversation_through_the_api(project):
    script = {"command_generator": ["start flow weather_flow"] * 2, "weather_agent": TURN * 2}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        turned_on = (await client.put("/conversations/c1/recording")).json()
        for sender in ("c1", "c2"):
            await client.post("/webhooks/rest/webhook", json={"sender": sender,
                                                               "message": "weather?"})
        recorded = (await client.get("/conversations/c1/tracker")).json()
        plain = (await client.get("/conversations/c2/tracker")).json()
        saved = await client.get("/conversations/c1/test")
        refused = await client.get("/conversations/c2/test")
        unknown = await client.get("/conversations/nobody/test")
        turned_off = (await client.delete("/conversations/c1/recording")).json()
        fake.assert_done()
    assert saved.status_code == 200
    assert "tool_script:" in saved.text
    assert "test_case: recorded_c1" in saved.text
    assert (refused.status_code, refused.json()["code"]) == (409, "export.not_recorded")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "export.no_conversation")
    assert turned_on == {"sender": "c1", "recording": True}
    assert turned_off == {"sender": "c1", "recording": False}
    entries = _listens(recorded)[0]["metadata"][recording.METADATA_KEY]
    assert [(e["kind"], e.get("caller") or e.get("tool_name")) for e in entries] == [
        ("model", "command_generator"), ("model", "weather_agent"), ("tool", "echo"),
        ("model", "weather_agent")]
    tool = entries[2]
    assert tool["source"] == "mcp:tools"
    assert tool["arguments"] == {"text": "Riga"}
    assert tool["result"]["result"] == "Riga"
    assert entries[1]["response"]["tool_calls"][0]["name"] == "echo"
    assert recording.METADATA_KEY not in (_listens(plain)[0].get("metadata") or {})


async def test_secrets_and_sensitive_fields_are_redacted_before_storing(project, monkeypatch):
    monkeypatch.setenv("ACME_SERVICE_TOKEN", "tok-abcdef-123")
    monkeypatch.setenv(recording.REDACT_FIELDS_ENV, "label, other")
    script = {"command_generator": ["start flow weather_flow"], "weather_agent": [
        {"text": "Using tok-abcdef-123.", "tool_calls": [
            {"timed_read": {"label": "Riga", "ms": 1}}, {"echo": {"text": "tok-abcdef-123"}}]},
        {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]}
    recording.enable()
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        await assistant.handle_message("s1", "weather?")
        state = await assistant.state("s1")
        fake.assert_done()
    entries = _listens(state)[0]["metadata"][recording.METADATA_KEY]
    stored = str(entries)
    assert "tok-abcdef-123" not in stored
    assert entries[1]["response"]["text"] == "Using [redacted]."
    assert entries[2]["arguments"] == {"label": recording.REDACTED, "ms": 1}
    assert entries[3]["arguments"] == {"text": recording.REDACTED}
    assert entries[3]["result"]["result"] == recording.REDACTED


def test_redaction_reaches_into_json_text_and_nested_fields():
    value = {"result": '{"user": "ann", "password": "pw1"}', "nested": [{"api_key": "k"}]}
    redacted = recording.redact(value)
    assert redacted["nested"] == [{"api_key": recording.REDACTED}]
    assert '"password": "[redacted]"' in redacted["result"]
    assert '"user": "ann"' in redacted["result"]


async def test_an_unrecorded_conversation_is_not_exported(project):
    script = {"command_generator": ["start flow weather_flow"], "weather_agent": TURN}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        await assistant.handle_message("u1", "weather?")
        events = (await assistant.state("u1"))["events"]
    with pytest.raises(ConfigError) as caught:
        build_fixture("u1", events)
    assert caught.value.code == "export.not_recorded"
    with pytest.raises(ConfigError) as missing:
        build_fixture("nobody", [])
    assert missing.value.code == "export.no_conversation"


async def test_an_exported_conversation_replays_without_model_or_mcp_server(project, tmp_path):
    script = {"command_generator": ["start flow weather_flow"], "weather_agent": TURN}
    recording.enable()
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        await assistant.handle_message("u/2", "weather?")
        events = (await assistant.state("u/2"))["events"]
    recording.reset()
    offline = write_project(tmp_path / "offline", NOWHERE)
    test_file = offline / "tests" / "e2e" / "recorded.yml"
    test_file.parent.mkdir(parents=True)
    test_file.write_text(dump_fixture(build_fixture("u/2", events), "u/2"))
    loaded = load_file(test_file, root=offline)
    assert not loaded.issues
    assert loaded.cases[0].tool_script == {"tools": [
        {"tool": "echo", "arguments": {"text": "Riga"}, "result": "Riga",
         "description": "Echo the text back.", "input_schema": loaded.cases[0].tool_script[
             "tools"][0]["input_schema"]}]}
    async with Runner(offline, strict=True) as runner:
        result = await runner.run_case(loaded.cases[0])
    assert result.passed, result.failures


def _case(tmp_path, body: str):
    root = write_project(tmp_path / "p", NOWHERE)
    path = root / "tests" / "e2e" / "case.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return root, load_file(path, root=root)


REPLAY = """
    test_cases:
      - test_case: replay
        llm_script:
          command_generator: ["start flow weather_flow"]
          weather_agent:
            - text: Checking.
              tool_calls: [{{echo: {{text: {city}}}}}]
            - text: "Result: {city}."
              tool_calls: [{{task_completed: {{}}}}]
              expect:
                messages_contain: ["{answer}"]
        tool_script:
          tools:
            - tool: echo
              arguments: {{text: Riga}}
              result: "recorded for Riga"
{extra}
        steps:
          - user: weather?
          - bot: Checking.
"""


async def test_the_stand_in_serves_the_recorded_result(tmp_path):
    root, loaded = _case(tmp_path, REPLAY.format(city="Riga", answer="recorded for Riga",
                                                 extra=""))
    async with Runner(root) as runner:
        result = await runner.run_case(loaded.cases[0])
    assert result.passed, result.failures


async def test_different_arguments_and_unused_recordings_fail_the_replayed_case(tmp_path):
    extra = """            - tool: echo
              arguments: {text: Oslo}
              result: "recorded for Oslo"
"""
    root, loaded = _case(tmp_path, REPLAY.format(city="Paris", answer="recorded for Riga",
                                                 extra=extra))
    async with Runner(root) as runner:
        result = await runner.run_case(loaded.cases[0])
    assert not result.passed
    text = "\n".join(result.failures)
    assert "tool script: echo on tools was called with" in text
    assert "recorded call echo" in text
    assert "was not made" in text


async def test_a_call_without_recorded_result_is_an_error_result_and_a_failure(tmp_path):
    body = REPLAY.format(city="Riga", answer="no recorded result", extra="").replace(
        "tool_calls: [{echo: {text: Riga}}]",
        "tool_calls: [{echo: {text: Riga}}, {echo: {text: Riga}}]")
    root, loaded = _case(tmp_path, body)
    async with Runner(root) as runner:
        result = await runner.run_case(loaded.cases[0])
    assert not result.passed
    assert any("unexpected call of echo" in failure for failure in result.failures)
    assert not any("expect failed" in failure for failure in result.failures)


def test_a_malformed_tool_script_is_an_error_of_the_file(tmp_path):
    _, loaded = _case(tmp_path, """
        test_cases:
          - test_case: bad
            tool_script:
              tools:
                - {arguments: {text: Riga}}
                - {tool: echo, arguments: [1], colour: red}
            steps:
              - user: hi
        """)
    codes = [issue.code for issue in loaded.issues]
    assert codes == ["e2e.validation.invalid_tool_script"] * 3
    assert all(issue.line for issue in loaded.issues)


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


def test_repeat_runs_each_case_n_times_and_reports_its_pass_rate(tmp_path, capsys):
    from subagents.cli.main import main

    passing = REPLAY.format(city="Riga", answer="recorded for Riga", extra="")
    failing = passing.replace("test_case: replay", "test_case: wrong_answer").replace(
        "- bot: Checking.", "- bot: Something else.")
    root, loaded = _case(tmp_path, passing + failing.split("test_cases:", 1)[1])
    assert [c.name for c in loaded.cases] == ["replay", "wrong_answer"]
    status = main(["test", str(root / "tests" / "e2e" / "case.yml"), "--project", str(root),
                   "--repeat", "3"])
    out = capsys.readouterr().out
    assert status == 1
    assert "replay (" in out
    assert "3/3 passed (100%)" in out
    assert "0/3 passed (0%)" in out
    assert "3 passed, 3 failed" in out


LIVE_CASE = """
    test_cases:
      - test_case: recorded
        llm_script:
          command_generator: ["start flow weather_flow", "start flow opening_hours"]
          weather_agent:
            - text: Checking.
              tool_calls: [{echo: {text: Riga}}]
            - text: Sunny in Riga.
              tool_calls: [{task_completed: {}}]
        tool_script:
          tools:
            - {tool: echo, arguments: {text: Riga}, result: Riga}
        steps:
          - user: weather?
          - bot: Checking.
          - bot: Sunny in Riga.
          - utter: utter_after_weather
          - user: and the hours?
          - utter: utter_hours
"""


async def test_live_model_replays_recorded_tools_and_reports_every_differing_step(tmp_path):
    """--live-model: the configured model answers (here a model server playing the live one,
    answering differently), the recorded tool results still replay."""
    live = {"live": [
        "start flow weather_flow",
        {"text": "Let me look.", "tool_calls": [{"echo": {"text": "Riga"}}]},
        {"text": "Cloudy in Riga.", "tool_calls": [{"task_completed": {}}]},
        "start flow opening_hours",
    ]}
    async with FakeModelServer(live) as fake:
        endpoints = f"""
            model_groups:
              - id: llm
                models: [{{provider: openai, model: live, api_base: "{fake.base_url('live')}"}}]
            mcp_servers:
              - {{name: tools, type: http, url: "{NOWHERE}"}}
            """
        root = write_project(tmp_path / "p", NOWHERE, {"endpoints.yml": endpoints})
        path = root / "tests" / "e2e" / "live.yml"
        path.parent.mkdir(parents=True)
        path.write_text(textwrap.dedent(LIVE_CASE))
        case = load_file(path, root=root).cases[0]
        async with Runner(root, live_model=True) as runner:
            result = await runner.run_case(case)
        fake.assert_done()
    assert not result.passed
    report = result.failures[0]
    assert report.startswith("2 difference(s) with the live model")
    assert "step 2 (line 16): expected bot 'Checking.'" in report
    assert "step 3 (line 17): expected bot 'Sunny in Riga.'" in report
    assert not result.notes  # the live model called the tool as recorded


async def test_a_recorded_call_matches_when_the_caller_fills_in_schema_defaults(tmp_path):
    """The model left out `ms`; the agent sends the schema's default; the recording still fits."""
    body = REPLAY.format(city="Riga", answer="read x", extra="").replace(
        "tool_calls: [{echo: {text: Riga}}]", "tool_calls: [{timed_read: {label: x}}]").replace(
        """            - tool: echo
              arguments: {text: Riga}
              result: "recorded for Riga"
""", """            - tool: timed_read
              arguments: {label: x}
              result: "read x"
              input_schema:
                type: object
                properties: {label: {type: string}, ms: {type: integer, default: 200}}
                required: [label]
""")
    root, loaded = _case(tmp_path, body)
    async with Runner(root) as runner:
        result = await runner.run_case(loaded.cases[0])
    assert result.passed, result.failures


async def test_the_projects_uncalled_a2a_agents_get_a_stand_in_that_expects_no_call(project):
    script = {"command_generator": ["start flow weather_flow"], "weather_agent": TURN}
    recording.enable()
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        await assistant.handle_message("u3", "weather?")
        events = (await assistant.state("u3"))["events"]
    case = build_fixture("u3", events, ["insurer", "weather_agent"])["test_cases"][0]
    assert case["a2a_script"] == {"insurer": []}
    assert list(case)[-1] == "steps"
    assert "a2a_script" not in build_fixture("u3", events)["test_cases"][0]
