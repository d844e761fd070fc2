"""Conversation tests follow Rasa's matching rules by default, strict mode on request; every
assertion type passes and fails where it should.

Each fixture below holds cases named ``pass_*`` or ``fail_*``; one runner runs them all against
the dialogue test project (a real MCP server over HTTP, the fake model server), and the outcome
of every case must match its name.
"""

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

HOURS = "We are open 9 to 5."
ELSE = "Is there anything else I can help you with?"

EXTRA_FILES = {
    "actions/broken.py": """
        from rasa_sdk import Action


        class Broken(Action):
            def name(self):
                return "action_broken"

            async def run(self, dispatcher, tracker, domain):
                raise RuntimeError("the action server is on fire")
        """,
    "data/more_flows.yml": """
        flows:
          broken_flow:
            description: runs a failing custom action
            steps:
              - action: action_broken
          crashing_flow:
            description: an agent that crashes
            steps:
              - call: crasher
          choose_flow:
            description: offers a choice
            steps:
              - action: utter_choose
          spaced_flow:
            description: says a text that ends in a space
            steps:
              - action: utter_spaced
        """,
    "data/more_domain.yml": """
        actions: [action_broken]
        responses:
          utter_choose: [{text: "Pick one.", buttons: [{title: "Yes", payload: "/yes"},
                                                       {title: "No", payload: "/no"}]}]
          utter_spaced: [{text: "Mind the gap. "}]
        """,
    "sub_agents/crasher/config.yml": """
        agent: {name: crasher, description: Crashes.}
        configuration: {module: sub_agents.crasher.agent.Crasher}
        """,
    "sub_agents/crasher/__init__.py": "",
    "sub_agents/crasher/agent.py": """
        from subagents import MCPOpenAgent


        class Crasher(MCPOpenAgent):
            async def send_message(self, agent_input, output_channel=None):
                raise RuntimeError("boom")
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, EXTRA_FILES)


def write(tmp_path: Path, text: str, name: str = "cases.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


async def outcomes(project: Path, path: Path, *, strict: bool = False, root: Path | None = None):
    loaded = load_file(path, root=root)
    assert loaded.issues == [], [i.format() for i in loaded.issues]
    async with Runner(project, strict=strict) as runner:
        results = [await runner.run_case(case) for case in loaded.cases]
    return {r.case.name: r for r in results}


def assert_named_outcomes(results) -> None:
    wrong = {name: r.failures for name, r in results.items()
             if r.passed != name.startswith("pass")}
    assert not wrong, wrong


MATCHING = f"""
fixtures:
  - known: [{{name: Ada}}]
test_cases:
  - test_case: pass_extra_bot_messages_are_ignored
    steps:
      - user: /opening_hours
      - bot: "{HOURS}"
  - test_case: pass_order_within_a_turn_is_not_checked
    steps:
      - user: /opening_hours
      - bot: "{ELSE}"
      - utter: utter_hours
  - test_case: pass_one_message_satisfies_two_steps
    steps:
      - user: /opening_hours
      - bot: "{HOURS}"
      - bot: "{HOURS}"
  - test_case: pass_the_expected_text_is_stripped
    steps:
      - user: /opening_hours
      - bot: "  {HOURS}  "
  - test_case: pass_a_trailing_space_on_both_sides
    steps:
      - user: /spaced_flow
      - bot: "Mind the gap. "
  - test_case: pass_a_text_the_bot_says_with_a_trailing_space
    steps:
      - user: /spaced_flow
      - bot: "Mind the gap."
  - test_case: fail_a_different_text
    steps:
      - user: /opening_hours
      - bot: "We are open 9 to 6."
  - test_case: fail_an_utter_that_did_not_happen
    steps:
      - user: /opening_hours
      - utter: utter_greet
  - test_case: fail_a_later_turn_cannot_satisfy_an_earlier_step
    llm_script: {{}}
    steps:
      - user: /opening_hours
      - bot: "What is your name?"
      - user: /ask_name
  - test_case: pass_steps_before_the_first_message_see_the_fixtures
    fixtures: [known]
    steps:
      - slot_was_set: [name]
      - user: /opening_hours
      - slot_was_not_set: [name]
  - test_case: pass_slot_was_set_by_name_and_value
    steps:
      - user: /SetSlots(lookup_result=Berlin)
      - slot_was_set: [lookup_result]
      - slot_was_set: [{{lookup_result: Berlin}}]
      - slot_was_not_set: [{{lookup_result: Paris}}]
  - test_case: fail_slot_was_set_with_another_value
    steps:
      - user: /SetSlots(lookup_result=Berlin)
      - slot_was_set: [{{lookup_result: Paris}}]
  - test_case: fail_slot_was_not_set_but_it_was
    steps:
      - user: /SetSlots(lookup_result=Berlin)
      - slot_was_not_set: [lookup_result]
  - test_case: pass_bot_pattern_and_any_text
    steps:
      - user: /opening_hours
      - bot: {{matches: "open [0-9]+ to [0-9]+"}}
      - bot: {{any: true}}
  - test_case: fail_bot_pattern
    steps:
      - user: /opening_hours
      - bot: {{matches: "closed"}}
  - test_case: fail_any_text_in_a_silent_turn
    steps:
      - user: /SetSlots(lookup_result=Berlin)
      - bot: {{any: true}}
  - test_case: pass_an_empty_user_message_is_skipped
    steps:
      - user: ""
      - user: /opening_hours
      - bot: "{HOURS}"
  - test_case: pass_assertion_style_cases_do_not_check_bot_steps
    steps:
      - user: /opening_hours
        assertions:
          - flow_started: opening_hours
      - bot: "not what the bot said"
  - test_case: fail_a_mismatch_stops_later_user_messages_in_assertion_style
    llm_script: {{}}
    steps:
      - user: /opening_hours
      - bot: "not what the bot said"
      - user: /ask_name
        assertions:
          - flow_started: ask_name
"""


async def test_rasa_matching_rules(project, tmp_path):
    results = await outcomes(project, write(tmp_path, MATCHING))
    assert_named_outcomes(results)
    stopped = results["fail_a_mismatch_stops_later_user_messages_in_assertion_style"]
    assert "was never sent" in stopped.failures[0]
    assert "/ask_name" not in "\n".join(stopped.transcript)
    assert "empty user message skipped" in \
        results["pass_an_empty_user_message_is_skipped"].warnings[0]
    later = results["fail_a_later_turn_cannot_satisfy_an_earlier_step"]
    assert "user: /ask_name" not in later.transcript  # fail-fast: not sent after a mismatch


async def test_a_near_miss_shows_a_character_diff_and_the_turn(project, tmp_path):
    results = await outcomes(project, write(tmp_path, MATCHING))
    failure = results["fail_a_different_text"].failures[0]
    assert "near miss (- expected, + actual):" in failure
    assert "- We are open 9 to 6." in failure
    assert "+ We are open 9 to 5." in failure
    assert "?" in failure.split("+ We are open 9 to 5.")[1]  # the marker line under the diff
    assert "expected steps" in failure
    assert "actual events" in failure
    assert "> bot: \"We are open 9 to 6.\"" in failure


STRICT_CASES = f"""
test_cases:
  - test_case: extra_message
    steps:
      - user: /opening_hours
      - bot: "{HOURS}"
      - user: /opening_hours
  - test_case: out_of_order
    steps:
      - user: /opening_hours
      - bot: "{ELSE}"
      - bot: "{HOURS}"
"""


@pytest.mark.parametrize("how", ["file", "runner"])
async def test_strict_mode_matches_every_message_in_order(project, tmp_path, how):
    default = await outcomes(project, write(tmp_path, STRICT_CASES))
    assert all(r.passed for r in default.values()), {n: r.failures for n, r in default.items()}
    text = "strict: true\n" + STRICT_CASES if how == "file" else STRICT_CASES
    strict = await outcomes(project, write(tmp_path, text, "strict.yml"),
                            strict=how == "runner")
    assert not strict["extra_message"].passed
    assert "unmatched bot messages before the next user step" in \
        strict["extra_message"].failures[0]
    assert strict["extra_message"].transcript.count("user: /opening_hours") == 1  # not sent
    assert not strict["out_of_order"].passed


async def test_a_file_can_opt_out_of_the_runners_strict_mode(project, tmp_path):
    results = await outcomes(project, write(tmp_path, "strict: false\n" + STRICT_CASES),
                             strict=True)
    assert all(r.passed for r in results.values())


ASSERTIONS = """
test_cases:
  - test_case: pass_flow_assertions
    steps:
      - user: /opening_hours
        assertions:
          - flow_started: opening_hours
          - flow_started: {flow_ids: [weather_flow, opening_hours], operator: any}
          - flow_started: {flow_ids: [opening_hours], operator: all}
          - flow_completed: {flow_id: opening_hours}
          - flow_completed: {flow_id: opening_hours, flow_step_id: opening_hours_0_utter_hours}
          - action_executed: utter_hours
  - test_case: fail_flow_started
    steps:
      - user: /opening_hours
        assertions:
          - flow_started: {flow_ids: [weather_flow], operator: any}
  - test_case: fail_flow_completed_at_another_step
    steps:
      - user: /opening_hours
        assertions:
          - flow_completed: {flow_id: opening_hours, flow_step_id: somewhere_else}
  - test_case: fail_action_executed
    steps:
      - user: /opening_hours
        assertions:
          - action_executed: utter_greet
  - test_case: pass_flow_cancelled
    expected_errors: []
    steps:
      - user: /quitting_flow
        assertions:
          - flow_cancelled: {flow_id: quitting_flow}
          - agent_cancelled: {agent_id: quitter, flow_id: quitting_flow}
          - agent_started: {agent_id: quitter}
  - test_case: fail_flow_cancelled
    steps:
      - user: /opening_hours
        assertions:
          - flow_cancelled: {flow_id: opening_hours}
  - test_case: pass_slot_assertions
    steps:
      - user: /SetSlots(lookup_result=Berlin)
        assertions:
          - slot_was_set: [{name: lookup_result}, {name: lookup_result, value: Berlin}]
          - slot_was_not_set: [{name: name}, {name: lookup_result, value: Paris}]
  - test_case: fail_slot_was_set_value
    steps:
      - user: /SetSlots(lookup_result=Berlin)
        assertions:
          - slot_was_set: [{name: lookup_result, value: Paris}]
  - test_case: fail_slot_was_not_set
    steps:
      - user: /SetSlots(lookup_result=Berlin)
        assertions:
          - slot_was_not_set: [{name: lookup_result}]
  - test_case: pass_bot_uttered
    steps:
      - user: /choose_flow
        assertions:
          - bot_uttered: {utter_name: utter_choose}
          - bot_uttered: {text_matches: "^Pick"}
          - bot_uttered: {buttons: [{title: "Yes", payload: "/yes"}]}
          - bot_uttered: {metadata: {utter_action: utter_choose}}
          - bot_did_not_utter: {utter_name: utter_greet}
          - bot_did_not_utter: {buttons: [{title: "Maybe", payload: "/maybe"}]}
  - test_case: fail_bot_uttered_buttons
    steps:
      - user: /choose_flow
        assertions:
          - bot_uttered: {buttons: [{title: "No", payload: "/no"}]}
  - test_case: fail_bot_uttered_text
    steps:
      - user: /choose_flow
        assertions:
          - bot_uttered: {text_matches: "^Choose"}
  - test_case: fail_bot_did_not_utter
    steps:
      - user: /choose_flow
        assertions:
          - bot_did_not_utter: {buttons: [{title: "No", payload: "/no"}]}
  - test_case: fail_pattern_clarification_contains
    steps:
      - user: /opening_hours
        assertions:
          - pattern_clarification_contains: {flow_ids: [opening_hours], operator: any}
  - test_case: pass_assertion_order
    steps:
      - user: /opening_hours
        assertion_order_enabled: true
        assertions:
          - flow_started: opening_hours
          - action_executed: utter_hours
          - bot_did_not_utter: {utter_name: utter_greet}
          - flow_completed: {flow_id: opening_hours}
  - test_case: fail_assertion_order
    steps:
      - user: /opening_hours
        assertion_order_enabled: true
        assertions:
          - flow_completed: {flow_id: opening_hours}
          - flow_started: opening_hours
  - test_case: fail_the_first_failing_assertion_ends_the_case
    steps:
      - user: /opening_hours
        assertions:
          - action_executed: utter_greet
      - user: /opening_hours
        metadata: again
        assertions:
          - flow_started: opening_hours
metadata:
  - again: {round: 2}
"""

async def test_every_rasa_assertion_passes_and_fails(project, tmp_path):
    results = await outcomes(project, write(tmp_path, ASSERTIONS))
    assert_named_outcomes(results)
    first = results["fail_the_first_failing_assertion_ends_the_case"].failures
    assert len(first) == 1
    assert "step 1" in first[0]


async def test_session_start_runs_the_projects_session_start_pattern(project, tmp_path):
    (project / "data" / "session.yml").write_text(textwrap.dedent("""
        flows:
          pattern_session_start:
            description: greets
            steps:
              - action: utter_starting
        """), encoding="utf-8")
    results = await outcomes(project, write(tmp_path, """
    test_cases:
      - test_case: pass_session_start_in_an_assertion_style_case
        llm_script: {}
        steps:
          - user: /session_start
            assertions:
              - flow_started: pattern_session_start
              - bot_uttered: {text_matches: "^Starting"}
      - test_case: pass_session_start_in_a_step_style_case
        llm_script: {}
        steps:
          - user: /session_start
          - bot: "Starting."
    """))
    assert_named_outcomes(results)


@pytest.mark.parametrize(("flags", "status"), [([], 0), (["--strict"], 1)])
async def test_the_cli_strict_flag(project, tmp_path, flags, status):
    path = write(tmp_path, STRICT_CASES)
    # async, so that this event loop keeps serving the in-process MCP server meanwhile
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "test", str(path), "--project", str(project),
        *flags, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    with anyio.fail_after(120):
        out, _ = await proc.communicate()
    assert proc.returncode == status, out.decode()
    assert out.decode().strip().splitlines()[-1] == ("2 passed, 0 failed" if status == 0
                                                     else "0 passed, 2 failed")


async def test_step_metadata_overrides_the_cases_with_a_warning(project, tmp_path):
    results = await outcomes(project, write(tmp_path, """
    metadata:
      - base: {channel: web, tenant: a}
      - other: {tenant: b}
    test_cases:
      - test_case: pass_metadata_is_merged
        metadata: base
        steps:
          - user: /opening_hours
            metadata: other
          - utter: utter_hours
            assertions:
              - event_happened: {event: user, metadata: {channel: web, tenant: b}}
    """))
    assert_named_outcomes(results)
    [warning] = results["pass_metadata_is_merged"].warnings
    assert "overrides the test case's ['tenant']" in warning
