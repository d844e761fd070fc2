"""Simulated users: a (scripted) model plays the user towards a goal."""

from __future__ import annotations

import textwrap

from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

from tests.dialogue_harness import write_project

CASE = """
    test_cases:
      - test_case: shopper
        simulated_user:
          goal: learn the opening hours
          persona: a hurried shopper
          max_turns: {max_turns}
          assertions:
            - flow_completed: {{flow_id: opening_hours}}
        llm_script:
          command_generator: ["start flow opening_hours"]
          simulated_user:
            - text: "when are you open?"
              expect:
                system_contains: ["learn the opening hours", "a hurried shopper", "GOAL_REACHED"]
            - text: {last}
              expect:
                messages_contain: ["We are open 9 to 5."]
                roles: [system, user, assistant, user]
"""


def _load(tmp_path, body: str):
    # An empty tool_script: every MCP server is a replay stand-in, nothing else has to run.
    body = body.replace("        llm_script:", "        tool_script: {}\n        llm_script:", 1)
    root = write_project(tmp_path / "p", "http://127.0.0.1:9/mcp")
    path = root / "tests" / "e2e" / "sim.yml"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(body))
    loaded = load_file(path, root=root)
    return root, loaded


async def _run(root, case):
    async with Runner(root) as runner:
        return await runner.run_case(case)


async def test_the_simulated_user_reaches_its_goal_and_the_assertions_hold(tmp_path):
    root, loaded = _load(tmp_path, CASE.format(max_turns=3, last="GOAL_REACHED"))
    assert not loaded.issues
    result = await _run(root, loaded.cases[0])
    assert result.passed, result.failures
    assert result.transcript[0] == "user (simulated): when are you open?"


async def test_a_simulated_user_who_gives_up_fails_the_case(tmp_path):
    root, loaded = _load(tmp_path, CASE.format(max_turns=3, last="GIVE_UP"))
    result = await _run(root, loaded.cases[0])
    assert not result.passed
    assert "gave up after 1 message" in result.failures[0]


async def test_the_goal_must_be_reached_within_max_turns(tmp_path):
    body = CASE.format(max_turns=1, last="again, when?")
    root, loaded = _load(tmp_path, body)
    result = await _run(root, loaded.cases[0])
    assert not result.passed
    assert "within max_turns=1" in result.failures[0]


async def test_a_failing_assertion_fails_the_simulated_case(tmp_path):
    body = CASE.format(max_turns=3, last="GOAL_REACHED").replace(
        "flow_completed: {flow_id: opening_hours}", "flow_completed: {flow_id: weather_flow}")
    root, loaded = _load(tmp_path, body)
    result = await _run(root, loaded.cases[0])
    assert not result.passed
    assert "simulated_user assertion flow_completed failed" in result.failures[0]


def test_a_malformed_simulated_user_is_an_error_of_the_file(tmp_path):
    _, loaded = _load(tmp_path, """
        test_cases:
          - test_case: bad
            simulated_user: {persona: nobody, max_turns: 0, mood: grumpy}
        """)
    codes = sorted(issue.code for issue in loaded.issues)
    assert codes == ["e2e.validation.invalid_simulated_user"] * 3
