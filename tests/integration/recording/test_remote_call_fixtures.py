"""Conversation fixtures with `a2a_script` (A2A agents answered by a local a2a-sdk stand-in) and
`tool_script` failures (tool errors, slow tools, a server that is down): the fixture project in
tests/fixtures/remote_calls passes offline, and broken scripts are reported clearly."""

from __future__ import annotations

import textwrap
from pathlib import Path

import anyio
import pytest
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

PROJECT = Path(__file__).resolve().parents[2] / "fixtures" / "remote_calls"


@pytest.fixture(autouse=True)
def _no_remote_address(monkeypatch):
    # the stand-in replaces the card: the real address is never needed
    monkeypatch.delenv("INSURER_URL", raising=False)


async def run_file(path: Path) -> dict[str, list[str]]:
    loaded = load_file(path, root=PROJECT)
    assert loaded.issues == [], [i.format() for i in loaded.issues]
    with anyio.fail_after(120):
        async with Runner(PROJECT) as runner:
            results = [await runner.run_case(case) for case in loaded.cases]
    return {r.case.name: r.failures for r in results}


@pytest.mark.parametrize("name", ["a2a_task_states.yml", "tool_step_failures.yml"])
async def test_the_fixture_conversations_pass(name):
    outcome = await run_file(PROJECT / "tests" / "e2e" / name)
    assert len(outcome) >= 6
    failed = {case: failures for case, failures in outcome.items() if failures}
    assert failed == {}, "\n".join(f"{k}: {v}" for k, v in failed.items())


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "case.yml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


async def test_a_script_that_is_not_followed_fails_the_case(tmp_path):
    outcome = await run_file(write(tmp_path, """
        test_cases:
          - test_case: one_reply_too_many
            llm_script: {command_generator: ["start flow check_cover"]}
            a2a_script:
              insurer:
                - {state: completed, text: "Covered.", expect: {text_contains: "policy"}}
                - {message: "never asked for"}
            steps:
              - user: "Does my insurance cover this?"
              - bot: "Covered."
          - test_case: no_reply_left
            expected_errors: [pattern_internal_error]
            llm_script: {command_generator: ["start flow check_cover"]}
            a2a_script: {insurer: []}
            steps:
              - user: "Does my insurance cover this?"
              - utter: utter_internal_error_rasa
        """))
    assert outcome["one_reply_too_many"] == [
        "a2a script: call 1 of insurer: the message 'Does my insurance cover this?' does not "
        "contain 'policy'",
        "a2a script: scripted reply 2 of insurer was not used"]
    assert outcome["no_reply_left"]
    assert all(f.startswith("a2a script: unexpected call of insurer")
               for f in outcome["no_reply_left"])


async def test_an_agent_that_is_not_an_a2a_agent_cannot_be_scripted(tmp_path):
    outcome = await run_file(write(tmp_path, """
        test_cases:
          - test_case: wrong_name
            llm_script: {command_generator: ["start flow check_cover"]}
            a2a_script: {insurer: [], insurance_agent: []}
            steps:
              - user: "Does my insurance cover this?"
        """))
    [failure] = outcome["wrong_name"]
    assert "[e2e.a2a_script.unknown_agent]" in failure
    assert "insurance_agent" in failure


def test_a_malformed_script_is_refused_with_file_line_and_code(tmp_path):
    loaded = load_file(write(tmp_path, """
        a2a_script:
          insurer: {state: completed}
        test_cases:
          - test_case: bad
            a2a_script:
              insurer:
                - {state: finished}
                - {message: "hi", artifacts: [{text: x}]}
                - {state: completed, artifacts: [{data: [1, 2]}]}
                - {text: "neither a message nor a state"}
            steps:
              - user: "hi"
        """))
    found = sorted((i.code, i.line, i.key) for i in loaded.issues)
    code = "e2e.validation.invalid_a2a_script"
    assert found == [
        (code, 2, "a2a_script.insurer"),
        (code, 7, "test_cases[0].a2a_script.insurer[0].state"),
        (code, 8, "test_cases[0].a2a_script.insurer[1]"),
        (code, 9, "test_cases[0].a2a_script.insurer[2].artifacts[0].data"),
        (code, 10, "test_cases[0].a2a_script.insurer[3]"),
    ]


async def test_a_case_without_a_script_for_an_unreachable_agent_says_how_to_add_one(tmp_path):
    outcome = await run_file(write(tmp_path, """
        test_cases:
          - test_case: no_script
            llm_script: {command_generator: ["start flow check_cover"]}
            steps:
              - user: "Does my insurance cover this?"
        """))
    assert any("add a2a_script: {insurer: [...]}" in f for f in outcome["no_script"])


async def test_stand_in_servers_leave_the_process_signal_handlers_alone():
    # a handler of a stopped server left behind makes later SSE responses in the process end
    # at once, as if the server were shutting down
    import signal

    from starlette.applications import Starlette
    from subagents.testing.mcp_http import serve_app

    before = signal.getsignal(signal.SIGTERM)
    outer = serve_app(Starlette())
    await outer.__aenter__()
    async with serve_app(Starlette()):
        assert signal.getsignal(signal.SIGTERM) == before
    await outer.__aexit__(None, None, None)
    assert signal.getsignal(signal.SIGTERM) == before
