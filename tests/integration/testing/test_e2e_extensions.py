"""Our additions to the fixture format (agent, tool, event and streaming assertions, request
checks), the judged generative assertions, runtime errors that fail a case, and tolerance of
the files Rasa accepts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from subagents.testing.fixtures import load_file, load_files

from tests.dialogue_harness import write_project
from tests.integration.testing.test_e2e_semantics import (
    EXTRA_FILES,
    assert_named_outcomes,
    outcomes,
    write,
)


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, EXTRA_FILES)


AGENT_CASES = """
test_cases:
  - test_case: pass_a_plain_agent_turn
    llm_script:
      weather_agent: &weather
        - &weather_first {text: "Let me check.", tool_calls: [{echo: {text: sunny}}]}
        - {text: "Sunny in Berlin.", tool_calls: [{task_completed: {}}]}
    steps:
      - user: /weather_flow
      - bot: "Let me check."
  - test_case: pass_agent_tool_event_and_streaming_assertions
    streaming: true
    llm_script:
      weather_agent:
        - text: "Let me check."
          tool_calls: [{echo: {text: sunny}}]
          expect:
            tools_schema: {echo: {parameters: {required: [text]}}}
            roles: [system, user]
            messages_not_contain: ["rainy"]
        - {text: "Sunny in Berlin.", tool_calls: [{task_completed: {}}]}
    steps:
      - user: /weather_flow
        assertions:
          - agent_started: {agent_id: weather_agent, flow_id: weather_flow}
          - agent_completed: {agent_id: weather_agent}
          - agent_not_started: {agent_id: booking_agent}
          - tool_executed: {tool_name: echo, arguments: {text: sunny}, is_error: false,
                            agent_id: weather_agent}
          - tool_not_called: {tool_name: add}
          - bot_uttered: {text_matches: "^Sunny",
                          metadata: {agent_message_type: final_response,
                                     utter_source: MCPOpenAgent}}
          - bot_did_not_utter: {text_matches: "Rainy"}
          - event_happened: {event: agent_completed, agent_id: weather_agent,
                             metadata: {protocol: mcp_open}}
          - event_not_happened: {event: agent_cancelled}
          - streamed: {min_chunks: 2, text_matches: "Sunny in"}
  - test_case: fail_agent_started
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - agent_started: {agent_id: booking_agent}
  - test_case: fail_agent_not_started
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - agent_not_started: {agent_id: weather_agent}
  - test_case: fail_tool_executed_with_other_arguments
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - tool_executed: {tool_name: echo, arguments: {text: rainy}}
  - test_case: fail_tool_not_called
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - tool_not_called: {tool_name: echo}
  - test_case: fail_bot_message_metadata
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - bot_uttered: {metadata: {agent_message_type: no_such_type}}
  - test_case: fail_bot_did_not_utter_agent_text
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - bot_did_not_utter: {text_matches: "Sunny"}
  - test_case: fail_event_happened
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - event_happened: {event: agent_cancelled, agent_id: weather_agent}
  - test_case: fail_event_not_happened
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - event_not_happened: {event: agent_completed, agent_id: weather_agent}
  - test_case: fail_streamed_without_streaming
    llm_script: {weather_agent: *weather}
    steps:
      - user: /weather_flow
        assertions:
          - streamed: {min_chunks: 1}
  - test_case: fail_expect_tools_schema
    llm_script:
      weather_agent:
        - text: "Let me check."
          tool_calls: [{echo: {text: sunny}}]
          expect: {tools_schema: {echo: {parameters: {required: [city]}}}}
        - {text: "Sunny in Berlin.", tool_calls: [{task_completed: {}}]}
    steps:
      - user: /weather_flow
  - test_case: fail_expect_messages_not_contain
    llm_script:
      weather_agent:
        - *weather_first
        - text: "Sunny in Berlin."
          tool_calls: [{task_completed: {}}]
          expect: {messages_not_contain: ["sunny"]}
    steps:
      - user: /weather_flow
  - test_case: fail_expect_roles
    llm_script:
      weather_agent:
        - text: "Let me check."
          tool_calls: [{echo: {text: sunny}}]
          expect: {roles: [system, user, assistant]}
        - {text: "Sunny in Berlin.", tool_calls: [{task_completed: {}}]}
    steps:
      - user: /weather_flow
"""


async def test_agent_tool_event_and_streaming_assertions(project, tmp_path):
    results = await outcomes(project, write(tmp_path, AGENT_CASES))
    assert_named_outcomes(results)
    problems = "\n".join(results["fail_expect_tools_schema"].failures)
    assert "tools_schema: 'echo' is offered as" in problems
    assert "messages_not_contain: 'sunny'" in "\n".join(
        results["fail_expect_messages_not_contain"].failures)
    assert "roles: expected ['system', 'user', 'assistant']" in "\n".join(
        results["fail_expect_roles"].failures)


JUDGED = """
test_cases:
  - test_case: pass_relevant
    llm_script:
      weather_agent: &weather
        - {text: "Let me check.", tool_calls: [{echo: {text: sunny}}]}
        - {text: "Sunny in Berlin.", tool_calls: [{task_completed: {}}]}
      judge:
        - '{"question_variations": ["weather in Berlin?", "the weather flow", "Berlin weather"]}'
    steps:
      - user: weather flow
        assertions:
          - generative_response_is_relevant: {threshold: 0.4, utter_source: MCPOpenAgent}
  - test_case: fail_relevant_below_the_threshold
    llm_script:
      weather_agent: *weather
      judge: ['{"question_variations": ["how do I bake bread", "bread recipe", "oven time"]}']
    steps:
      - user: weather flow
        assertions:
          - generative_response_is_relevant: {threshold: 0.4, utter_source: MCPOpenAgent}
  - test_case: pass_grounded
    llm_script:
      weather_agent: *weather
      judge:
        - |
          ```json
          {"statements": [{"statement": "It is sunny", "score": 1},
                          {"statement": "in Berlin", "score": 1}]}
          ```
    steps:
      - user: weather flow
        assertions:
          - generative_response_is_grounded:
              threshold: 0.9
              utter_source: MCPOpenAgent
              ground_truth: "Berlin: sunny, 24 degrees"
  - test_case: fail_grounded_below_the_threshold
    llm_script:
      weather_agent: *weather
      judge: ['{"statements": [{"statement": "It is sunny", "score": 1},
                               {"statement": "in Paris", "score": 0}]}']
    steps:
      - user: weather flow
        assertions:
          - generative_response_is_grounded: {threshold: 0.9, utter_source: MCPOpenAgent,
                                              ground_truth: "Berlin: sunny"}
  - test_case: fail_the_judge_answers_no_json
    llm_script:
      weather_agent: *weather
      judge: ["They look fine to me."]
    steps:
      - user: weather flow
        assertions:
          - generative_response_is_grounded: {threshold: 0.5, utter_source: MCPOpenAgent,
                                              ground_truth: "Berlin: sunny"}
  - test_case: fail_no_generative_message_to_judge
    llm_script:
      weather_agent: *weather
    steps:
      - user: weather flow
        assertions:
          - generative_response_is_relevant: {threshold: 0.1}
"""


async def test_generative_assertions_are_judged_by_the_scripted_judge(project, tmp_path):
    text = JUDGED.replace("      weather_agent: &weather\n",
                          "      command_generator: &start [\"start flow weather_flow\"]\n"
                          "      weather_agent: &weather\n", 1)
    text = text.replace("      weather_agent: *weather\n",
                        "      command_generator: *start\n      weather_agent: *weather\n")
    write(tmp_path, "llm_judge:\n  llm: {model_group: llm}\n"
          "  embeddings: {provider: openai, model: embedder}\n", "conftest.yml")
    results = await outcomes(project, write(tmp_path, text), root=tmp_path)
    assert_named_outcomes(results)
    assert any("score 1.00" in note for note in results["pass_grounded"].notes)
    assert "score 0.50, threshold 0.90" in results["fail_grounded_below_the_threshold"] \
        .failures[0]
    assert "did not answer with a JSON object" in \
        results["fail_the_judge_answers_no_json"].failures[0]


ERRORS = """
test_cases:
  - test_case: fail_a_failing_custom_action
    steps:
      - user: /broken_flow
  - test_case: pass_the_internal_error_is_expected
    expected_errors: [pattern_internal_error]
    steps:
      - user: /broken_flow
  - test_case: pass_the_internal_error_message_is_asserted
    steps:
      - user: /broken_flow
      - utter: utter_internal_error_rasa
  - test_case: fail_a_crashing_agent
    expected_errors: [pattern_internal_error]
    steps:
      - user: /crashing_flow
  - test_case: pass_a_crashing_agent_is_expected
    expected_errors: [dialogue.agent.crashed, pattern_internal_error]
    steps:
      - user: /crashing_flow
"""


async def test_runtime_errors_fail_a_case_unless_it_expects_them(project, tmp_path):
    results = await outcomes(project, write(tmp_path, ERRORS))
    assert_named_outcomes(results)
    action = "\n".join(results["fail_a_failing_custom_action"].failures)
    assert "pattern_internal_error ran 1 time(s)" in action
    assert "the action server is on fire" in action  # the reason, from the runtime's log
    crash = "\n".join(results["fail_a_crashing_agent"].failures)
    assert "the assistant logged an error: dialogue.agent.crashed" in crash


async def test_a_judge_with_an_unknown_model_group_fails_the_assertion(project, tmp_path):
    write(tmp_path, "llm_judge:\n  llm: {model_group: nowhere}\n", "conftest.yml")
    results = await outcomes(project, write(tmp_path, JUDGED), root=tmp_path)
    failure = results["pass_relevant"].failures[0]
    assert "the judge is misconfigured (llm_judge in conftest.yml)" in failure
    assert "nowhere" in failure


async def test_a_case_without_script_or_key_says_how_to_run_offline(project, tmp_path,
                                                                   monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = write(tmp_path, """
    test_cases:
      - test_case: needs_the_model
        steps:
          - user: "what is the weather like?"
          - bot: "Sunny."
    """)
    results = await outcomes(project, path)
    failures = "\n".join(results["needs_the_model"].failures)
    assert "has no llm_script and no API key is set" in failures


# ------------------------------------------------------------------ tolerance of files


def test_empty_and_commented_out_files_are_skipped(tmp_path):
    for name, text in {"empty.yml": "", "commented.yml": "# test_cases:\n#  - test_case: x\n",
                       "other.yml": "version: '3.1'\nnlu: []\n"}.items():
        loaded = load_file(write(tmp_path, text, name))
        assert loaded.skipped
        assert loaded.issues == []
        assert loaded.cases == []


def test_duplicate_names_warn_and_both_cases_run(tmp_path):
    loaded = load_file(write(tmp_path, """
    test_cases:
      - test_case: same
        steps: [{user: /opening_hours}]
      - test_case: same
        steps: [{user: /opening_hours}]
    """), display="dup.yml")
    assert loaded.issues == []
    assert [c.name for c in loaded.cases] == ["same", "same"]
    [warning] = loaded.warnings
    assert (warning.code, warning.line, warning.severity) == \
        ("e2e.validation.duplicate_test_case", 4, "warning")


def test_unknown_keys_name_file_line_and_key(tmp_path):
    loaded = load_file(write(tmp_path, """
    test_cases:
      - test_case: one
        stepz: []
        steps:
          - user: hi
            asserts: [{flow_started: x}]
    colour: blue
    """), display="bad.yml")
    found = {(i.code, i.line, i.key) for i in loaded.issues}
    assert ("e2e.validation.unknown_key", 3, "test_cases[0].stepz") in found
    assert ("e2e.validation.unknown_key", 6, "test_cases[0].steps[0].asserts") in found
    assert ("e2e.validation.unknown_key", 7, "colour") in found
    assert all(i.file == "bad.yml" for i in loaded.issues)


def test_invalid_assertion_keys_are_errors(tmp_path):
    loaded = load_file(write(tmp_path, """
    test_cases:
      - test_case: one
        steps:
          - user: hi
            assertions:
              - bot_uttered: {utter: utter_greet}
              - flow_completed: {flow_step_id: x}
              - slot_was_set: [city]
    """))
    found = {(i.code, i.line) for i in loaded.issues}
    assert found == {("e2e.validation.invalid_assertion", 6),
                     ("e2e.validation.invalid_assertion", 7),
                     ("e2e.validation.invalid_assertion", 8)}


async def test_an_unknown_assertion_type_fails_only_its_case(project, tmp_path):
    path = write(tmp_path, """
    test_cases:
      - test_case: fail_unknown_type
        steps:
          - user: /opening_hours
            assertions:
              - flow_finished: {flow_id: opening_hours}
      - test_case: fail_other_engine
        steps:
          - user: /opening_hours
            assertions:
              - skill_started: {skill_id: x}
      - test_case: pass_the_others_run
        steps:
          - user: /opening_hours
            assertions:
              - flow_completed: {flow_id: opening_hours}
    """)
    loaded = load_file(path)
    assert loaded.issues == []
    codes = {c.name: [p.code for p in c.problems] for c in loaded.cases}
    assert codes == {"fail_unknown_type": ["e2e.validation.unknown_assertion"],
                     "fail_other_engine": ["e2e.assertions.incompatible"],
                     "pass_the_others_run": []}
    assert_named_outcomes(await outcomes(project, path))


async def test_conftest_fixtures_apply_and_closer_files_win(project, tmp_path):
    suite = tmp_path / "suite" / "inner"
    suite.mkdir(parents=True)
    write(tmp_path / "suite", "fixtures:\n  - who: [{name: Outer}]\n  - where: [{city: Rome}]\n",
          "conftest.yml")
    write(suite, "fixtures:\n  - who: [{name: Inner}]\n", "conftest.yml")
    path = write(suite, """
    test_cases:
      - test_case: pass_uses_conftest_fixtures
        fixtures: [who, where]
        steps:
          - slot_was_set: [{name: Inner}, {city: Rome}]
    """)
    results = await outcomes(project, path, root=tmp_path)
    assert_named_outcomes(results)
    assert load_file(suite / "conftest.yml").skipped


def test_the_cli_says_when_there_are_no_test_cases(tmp_path):
    folder = tmp_path / "tests"
    folder.mkdir()
    write(folder, "# nothing here yet\n", "empty.yml")
    done = subprocess.run([sys.executable, "-m", "subagents.cli.main", "test", str(folder),
                           "--project", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1
    assert "no test cases found" in done.stderr


def test_a_fixture_named_twice_in_a_file_is_an_error(tmp_path):
    loaded = load_file(write(tmp_path, """
    fixtures:
      - who: [{name: Ada}]
      - who: [{name: Bob}]
    test_cases:
      - test_case: one
        steps: [{user: hi}]
    """))
    assert [(i.code, i.line) for i in loaded.issues] == [("e2e.validation.duplicate_fixtures", 3)]


async def test_an_actions_package_that_cannot_be_imported_fails_the_case_not_the_run(
        tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url, {
        **EXTRA_FILES, "actions/needs_rasa.py": "import rasa.core.policies  # not provided here\n"})
    results = await outcomes(project, write(tmp_path, """
    test_cases:
      - test_case: fail_the_custom_action_cannot_be_imported
        steps:
          - user: /custom_action_flow
      - test_case: pass_the_run_goes_on
        steps:
          - user: /opening_hours
          - utter: utter_hours
    """))
    assert_named_outcomes(results)
    failures = "\n".join(results["fail_the_custom_action_cannot_be_imported"].failures)
    assert "pattern_internal_error ran 1 time(s)" in failures


async def test_hook_calls_are_counted_per_turn(project, tmp_path):
    results = await outcomes(project, write(tmp_path, """
    test_cases:
      - test_case: pass_three_attempts_three_process_input_calls
        steps:
          - user: /flaky_flow
            assertions:
              - hook_called: {agent_id: flaky_agent, hook: process_input, times: 3}
              - hook_called: {hook: process_output}
              - hook_called: {agent_id: weather_agent, hook: process_input, times: 0}
      - test_case: fail_a_wrong_count
        steps:
          - user: /opening_hours
            assertions:
              - hook_called: {hook: process_input}
    """))
    assert_named_outcomes(results)
    assert "process_input was called 0 time(s), expected at least once" in \
        results["fail_a_wrong_count"].failures[0]


def test_metadata_presets_are_shared_by_the_files_of_a_run(tmp_path):
    first = write(tmp_path, "metadata:\n  - web: {channel: web}\n"
                  "test_cases:\n  - test_case: a\n    steps: [{user: hi, metadata: web}]\n",
                  "a.yml")
    second = write(tmp_path, "metadata:\n  - web: {channel: other}\n"
                   "test_cases:\n  - test_case: b\n    metadata: web\n    steps: [{user: hi}]\n"
                   "  - test_case: c\n    steps: [{user: hi, metadata: mobile}]\n", "b.yml")
    loaded = load_files([first, second], tmp_path)
    assert [(i.code, i.file) for i in loaded.issues] == [("e2e.validation.unknown_metadata",
                                                           "b.yml")]
    alone = load_file(second)
    assert alone.cases[0].metadata == {"channel": "other"}
    loaded = load_files([first, write(tmp_path, "test_cases:\n  - test_case: b\n"
                                      "    metadata: web\n    steps: [{user: hi}]\n", "b.yml")],
                        tmp_path)
    assert loaded.issues == []
    assert loaded.cases[1].metadata == {"channel": "web"}  # the first definition wins


def test_stubs_are_checked_like_action_server_replies(tmp_path):
    loaded = load_file(write(tmp_path, """
    stub_custom_actions:
      action_ok:
        events: [{event: slot, name: x, value: 1}]
        responses: [{text: "hi"}]
      action_typo:
        event: []
      action_bad_event:
        events: [{name: x, value: 1}]
    test_cases:
      - test_case: one
        steps: [{user: hi}]
    """))
    assert [(i.code, i.line) for i in loaded.issues] == [
        ("e2e.validation.invalid_stub", 5), ("e2e.validation.invalid_stub", 8)]
