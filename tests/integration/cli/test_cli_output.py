"""What the commands print: no log noise between PASSED lines, tool calls in the shell, our debug
events without the libraries' (unless asked), and ``shell --script`` (a scripted model, typed
user messages) whose script problems read as script problems.

Each runs the real command in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ORDER = "What did I order? My email is ada@example.com\n"


def cli(*args: str, cwd: Path, typed: str = "",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``subagents ARGS`` as a user runs it (``-m subagents.cli.main`` would add runpy's
    warning about a module imported twice)."""
    return subprocess.run([sys.executable, "-m", "subagents.cli", *args], cwd=cwd, input=typed,
                          capture_output=True, text=True, timeout=120, check=False, env=env)


def shell(root: Path, *args: str, typed: str) -> subprocess.CompletedProcess[str]:
    return cli("shell", *args, cwd=root, typed=typed)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    assert cli("init", "p", cwd=tmp_path).returncode == 0
    return tmp_path / "p"


def only_results(output: str) -> list[str]:
    """The lines that are neither a PASSED line, nor the closing summary, nor a note printed
    after the last case (``note: ...``, about the run as a whole)."""
    lines = [line for line in output.splitlines() if line.strip()]
    passed = [i for i, line in enumerate(lines) if line.startswith("PASSED ")]
    last = passed[-1] if passed else -1
    return [line for i, line in enumerate(lines)
            if not line.startswith("PASSED ") and not line.endswith(" failed")
            and not (i > last and line.startswith("note: "))]


def test_a_new_projects_tests_print_nothing_but_their_results(project):
    result = cli("test", cwd=project)
    assert result.returncode == 0
    assert only_results(result.stdout) == []
    assert result.stderr == ""


def test_the_examples_tests_print_no_warnings_between_passed_lines():
    result = cli("test", cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert only_results(result.stdout) == []
    assert result.stderr == ""  # its cases that provoke warnings keep them to themselves


def test_a_failing_case_shows_the_log_of_its_run_readably(project):
    tests = project / "tests" / "e2e" / "conversations.yml"
    tests.write_text(tests.read_text().replace('- "continue agent"', '- ""').replace(
        '- bot: "Opening the return for order 1002."',
        '- bot: "Opening the return for order 1003."'))
    result = cli("test", cwd=project)
    assert result.returncode == 1
    assert result.stderr == ""
    failure = result.stdout[result.stdout.index("__ return_an_item"):]
    log = failure[failure.index("log while it ran:"):]
    assert "dialogue.commands.none_parsed" in log
    assert "{" not in log.splitlines()[1]  # key=value, not JSON
    # the other cases' logs are not shown, and the messages are quoted once
    assert failure.count("dialogue.commands.none_parsed") == 1
    assert "bot messages this turn: 'Opening the return for order 1002.', " in failure


def test_the_shell_shows_tool_calls_unless_hidden(project):
    shown = shell(project, "--script", "demo.yml", typed=ORDER)
    assert shown.returncode == 0, shown.stderr
    assert '⚙ list_orders(email="ada@example.com") → 1001, 1002' in shown.stdout
    assert "◆ slot" not in shown.stdout  # slot changes are for --debug
    hidden = shell(project, "--script", "demo.yml", "--hide-tools", typed=ORDER)
    assert "bot> Let me find your orders." in hidden.stdout
    assert "⚙" not in hidden.stdout


def loggers(stderr: str) -> set[str]:
    return {json.loads(line).get("logger", "") for line in stderr.splitlines()
            if line.startswith("{")}


def test_shell_debug_shows_our_events_and_the_libraries_only_when_asked(project):
    ours = shell(project, "--script", "demo.yml", "--debug", typed=ORDER)
    assert ours.returncode == 0, ours.stderr
    names = loggers(ours.stderr)
    assert "subagents.llm" in names  # the model calls' events
    assert all(name.startswith("subagents") for name in names), names
    both = shell(project, "--script", "demo.yml", "--debug", "--debug-libraries", typed=ORDER)
    assert [name for name in loggers(both.stderr) if not name.startswith("subagents")]


def test_shell_script_plays_the_model_and_says_when_the_script_is_used_up(project):
    typed = ORDER + "I'd like to return the mugs from order 1002\nand one more thing\n"
    result = shell(project, "--script", "demo.yml", typed=typed)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "The model answers from the script demo.yml::demo" in out
    assert "bot> Opening a return for order 1002." in out
    assert "has no command generator reply left: it played all 2" in out
    assert "language model" not in out


def test_a_script_that_runs_out_mid_turn_is_reported_as_a_script_problem(project, tmp_path):
    script = tmp_path / "short.yml"
    script.write_text("""\
test_cases:
  - test_case: short
    llm_script:
      command_generator: ["start flow order_help"]
      order_assistant:
        - text: "Let me find your orders."
          tool_calls: [{list_orders: {email: ada@example.com}}]
    steps:
      - user: hi
""")
    result = shell(project, "--script", f"{script}::short", typed=ORDER)
    out = result.stdout
    assert "script problem: unexpected model call by order_assistant, request 2: the script" \
           f" {script}::short has 1 reply for order_assistant, all played" in out
    assert "language model" not in out


def test_shell_script_without_a_key_needs_no_model_check(project):
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = cli("shell", "--script", "demo.yml", cwd=project, typed=ORDER, env=env)
    assert result.returncode == 0, result.stderr
    assert "preflight" not in result.stderr
    assert "bot> Let me find your orders." in result.stdout


def test_a_filter_that_matches_nothing_blames_the_filter(project):
    result = cli("test", "-k", "nothing", cwd=project)
    assert result.returncode == 1
    assert "no test case name contains 'nothing' (-k)" in result.stderr
    assert "order_status" in result.stderr
    assert "top-level test_cases" not in result.stderr


def test_demo_structure_calls_an_agent_without_exit_if_general_purpose(project):
    result = cli("demo", "--structure", cwd=project)
    assert "call: order_assistant  <- general-purpose agent" in result.stdout
    assert "open agent" not in result.stdout


def test_help_shows_test_export_and_an_inspect_example_that_init_projects_have(project):
    usage = cli("test", "--help", cwd=project).stdout
    assert "subagents test export SENDER_ID [--out FILE]" in usage.split("\n\n", 1)[0]
    examples = cli("inspect", "--help", cwd=project).stdout
    replay = next(line for line in examples.splitlines()
                  if line.strip().startswith("subagents inspect --replay"))
    file, case = replay.split("--replay", 1)[1].split()[0].split("::")
    assert (project / file).is_file()
    assert f"test_case: {case}" in (project / file).read_text()


def test_a_misspelled_key_gets_a_did_you_mean(project):
    config = project / "sub_agents" / "order_assistant" / "config.yml"
    config.write_text(config.read_text().replace("  timeout: 60", "  timout: 60"))
    result = cli("validate", cwd=project)
    assert "unknown key 'timout' (fix: did you mean 'timeout'?)" in result.stderr


@pytest.mark.parametrize("script", ["run.py", "bench_import.py", "bench_loop.py"])
def test_the_benchmarks_answer_help_without_running(script):
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:")
    assert "median" not in result.stdout
