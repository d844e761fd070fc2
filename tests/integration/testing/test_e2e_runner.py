"""`subagents test` on failing fixtures: the diff says what broke, the exit status is 1."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

from tests.dialogue_harness import write_project

HAPPY = """
strict: true
test_cases:
  - test_case: weather
    llm_script:
      command_generator: ["start flow weather_flow"]
      weather_agent:
        - text: "Let me check."
          tool_calls: [{echo: {text: sunny}}]
        - {text: "Sunny.", tool_calls: [{task_completed: {}}]}
    steps:
      - user: "weather?"
      - bot: "Let me check."
      - bot: "Sunny."
      - utter: utter_after_weather
      - utter: utter_can_do_something_else
        assertions:
          - agent_completed: {agent_id: weather_agent, flow_id: weather_flow}
          - tool_executed: {tool_name: echo, arguments: {text: sunny}}
"""


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


def fixture_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.yml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


async def run(project: Path, path: Path):
    loaded = load_file(path)
    assert loaded.issues == []
    async with Runner(project) as runner:
        return [await runner.run_case(case) for case in loaded.cases]


async def test_a_passing_case_passes(project, tmp_path):
    [result] = await run(project, fixture_file(tmp_path, HAPPY))
    assert result.passed, result.failures


@pytest.mark.parametrize(("change", "expected"), [
    (("bot: \"Sunny.\"", "bot: \"Rainy.\""),
     "expected bot 'Rainy.', got 'Sunny.'"),
    (("agent_id: weather_agent, flow_id: weather_flow", "agent_id: booking_agent"),
     "assertion agent_completed failed: no agent_completed event for agent 'booking_agent'"),
    (("      command_generator: [\"start flow weather_flow\"]",
      "      command_generator: [\"start flow weather_flow\", \"cancel flow\"]"),
     "1 scripted reply for command_generator never requested"),
    (("          tool_calls: [{echo: {text: sunny}}]",
      "          tool_calls: [{echo: {text: sunny}}]\n          expect: {tools: [echo]}"),
     "expect failed for weather_agent, request 1: tools: expected ['echo'], offered "
     "['echo', 'task_completed', 'timed_read']"),
    (("      - utter: utter_can_do_something_else\n",
      "      - utter: utter_can_do_something_else\n      - user: \"more\"\n"),
     "unexpected model call by command_generator, request 2"),
    (("      - utter: utter_after_weather\n", ""),
     "expected utter 'utter_can_do_something_else', got 'Anything else about the weather?'"),
])
async def test_failing_cases_report_what_broke(project, tmp_path, change, expected):
    old, new = change
    assert old in HAPPY
    [result] = await run(project, fixture_file(tmp_path, HAPPY.replace(old, new)))
    assert not result.passed
    assert any(expected in failure for failure in result.failures), result.failures


async def test_unmatched_bot_messages_fail_before_the_next_user_step(project, tmp_path):
    text = """
    strict: true
    test_cases:
      - test_case: skips_messages
        steps:
          - user: "/opening_hours"
          - user: "/opening_hours"
    """
    [result] = await run(project, fixture_file(tmp_path, text))
    assert not result.passed
    assert "unmatched bot messages before the next user step" in result.failures[0]
    assert "We are open 9 to 5." in result.failures[0]


async def test_a_broken_expect_shows_the_request(project, tmp_path):
    text = HAPPY.replace('      weather_agent:\n        - text: "Let me check."',
                         '      weather_agent:\n        - text: "Let me check."\n'
                         '          expect: {system_contains: ["NOT THERE"]}')
    [result] = await run(project, fixture_file(tmp_path, text))
    dump = "\n".join(result.failures)
    assert "system_contains: 'NOT THERE'" in dump
    assert "the request 1 of weather_agent was:" in dump
    assert "user: weather?" in dump


async def test_fixtures_metadata_and_stubbed_actions(project, tmp_path):
    text = """
    fixtures:
      - known_city: [{city: Lisbon}]
    metadata:
      - tenant: {tenant_id: t-1}
    stub_custom_actions:
      action_lookup:
        events: [{event: slot, name: lookup_result, value: stubbed}]
        responses: [{text: "Stub speaking."}]
    test_cases:
      - test_case: uses_presets
        fixtures: [known_city]
        steps:
          - user: "/custom_action_flow"
            metadata: tenant
          - bot: "Stub speaking."
          - bot: "Found stubbed."
            assertions:
              - slot_was_set: [{name: lookup_result, value: stubbed}]
              - action_executed: action_lookup
          - slot_was_not_set: [city]
          - utter: utter_can_do_something_else
    """
    [result] = await run(project, fixture_file(tmp_path, text))
    assert result.passed, result.failures


def test_fixture_files_are_validated_with_file_line_and_code(tmp_path):
    path = fixture_file(tmp_path, """
    test_cases:
      - test_case: bad
        fixtures: [missing]
        llm_script:
          agent: [{txt: oops}]
        steps:
          - user: hi
            assertions:
              - agent_finished: {agent_id: x}
          - say: hello
    """)
    loaded = load_file(path, display="cases.yml")
    found = {(i.code, i.line) for i in loaded.issues}
    assert ("e2e.validation.unknown_fixture", 3) in found
    assert ("e2e.validation.invalid_reply", 5) in found
    assert ("e2e.validation.unknown_key", 10) in found
    assert ("e2e.validation.invalid_step", 10) in found
    assert all(i.file == "cases.yml" for i in loaded.issues)
    # an unknown assertion type fails only its own test case (see test_e2e_semantics.py)


def test_a_rasa_e2e_file_loads_unchanged(tmp_path):
    path = fixture_file(tmp_path, """
    test_cases:
      - test_case: user books a restaurant
        steps:
          - user: I want to book a table for 4 at Xaigon for 8pm tonight
          - slot_was_set:
              - book_restaurant_name_of_restaurant: Xaigon
              - book_restaurant_number_of_people: "4"
          - utter: utter_ask_book_restaurant_eating_preferences
          - user: No
          - bot: Thank you, booking confirmed.
          - slot_was_not_set:
              - book_restaurant_eating_preferences
      - test_case: with assertions
        steps:
          - user: "I want to book a flight"
            assertions:
              - flow_started: "flight_booking"
              - bot_uttered:
                  utter_name: utter_ask_destination
                  buttons:
                    - title: "Yes"
                      payload: "/SetSlots(confirm=true)"
              - slot_was_set:
                  - name: destination
                    value: New York
              - flow_completed:
                  flow_id: pattern_search
                  flow_step_id: action_trigger_search
              - action_executed: action_agent_request_user_input
              - bot_did_not_utter:
                  text_matches: "sorry"
              - slot_was_not_set:
                  - name: origin
    """)
    loaded = load_file(path)
    assert loaded.issues == []
    assert [c.name for c in loaded.cases] == ["user books a restaurant", "with assertions"]


async def test_the_cli_exits_1_with_a_summary_line(project, tmp_path):
    path = fixture_file(tmp_path, HAPPY.replace('bot: "Sunny."', 'bot: "Rainy."'))
    # async, so that this event loop keeps serving the in-process MCP server meanwhile
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "test", str(path), "--project", str(project),
        "--junit", str(tmp_path / "j.xml"), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    with anyio.fail_after(120):
        out, _ = await proc.communicate()
    stdout = out.decode()
    assert proc.returncode == 1
    lines = stdout.strip().splitlines()
    assert lines[-1] == "0 passed, 1 failed"
    assert any(line.startswith("FAILED ") and "weather" in line for line in lines)
    assert "expected bot 'Rainy.', got 'Sunny.'" in stdout
    assert 'failures="1"' in (tmp_path / "j.xml").read_text()


@pytest.mark.parametrize(("order", "passes"), [
    (["flow_started: weather_flow", "agent_started: {agent_id: weather_agent}",
      "agent_completed: {agent_id: weather_agent}"], True),
    (["agent_completed: {agent_id: weather_agent}",
      "agent_started: {agent_id: weather_agent}"], False),
])
async def test_assertion_order_enabled_checks_the_order(project, tmp_path, order, passes):
    listed = "\n".join(f"          - {line}" for line in order)
    text = HAPPY.replace('      - user: "weather?"\n',
                         f'      - user: "weather?"\n        assertion_order_enabled: true\n'
                         f'        assertions:\n{listed}\n')
    [result] = await run(project, fixture_file(tmp_path, text))
    assert result.passed is passes, result.failures
    if not passes:
        assert "not after the assertions before it" in result.failures[0]
