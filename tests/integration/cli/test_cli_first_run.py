"""A new user's first run: `subagents init`, clear failures before any prompt, CLI conventions."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from subagents.cli.main import build_parser
from subagents.testing import FakeModelServer

from tests.integration.cli.test_shell_and_demo import Terminal, shell_project


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "subagents.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def no_key_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("template", ["support", "minimal"])
def test_init_writes_a_project_whose_tests_and_demo_pass(tmp_path, template):
    made = cli("init", "assistant", "--template", template, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    root = tmp_path / "assistant"
    assert (root / ".gitignore").exists()
    assert not list(root.rglob("*.tmpl"))
    assert list((root / "mcp_servers").glob("*.py"))

    validated = cli("validate", cwd=root)
    assert validated.returncode == 0, validated.stderr
    tested = cli("test", cwd=root)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert " 0 failed" in tested.stdout
    played = cli("demo", cwd=root)
    assert played.returncode == 0, played.stdout + played.stderr
    assert "bot> " in played.stdout


def test_init_support_has_an_open_and_a_task_agent(tmp_path):
    assert cli("init", str(tmp_path / "p"), cwd=tmp_path).returncode == 0
    structure = cli("demo", "--structure", "--project", str(tmp_path / "p"), cwd=tmp_path)
    assert "call: order_assistant  <- general-purpose agent" in structure.stdout
    assert "call: returns_agent  <- task agent" in structure.stdout


def test_init_refuses_a_folder_with_files_unless_forced(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    refused = cli("init", cwd=tmp_path)
    assert refused.returncode == 1
    assert "[init.folder_not_empty]" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]

    forced = cli("init", "--force", "--template", "minimal", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "endpoints.yml").exists()


async def test_the_shell_without_a_key_explains_the_fix_before_any_prompt(tmp_path):
    assert cli("init", "p", cwd=tmp_path).returncode == 0
    term = Terminal()
    await term.start(sys.executable, "-m", "subagents.cli.main", "shell", "--project",
                     str(tmp_path / "p"), env=no_key_env())
    await term.expect("subagents demo")
    code = await term.close()
    output = term.buffer.decode(errors="replace")
    assert code == 1
    assert "[preflight.api_key_missing]" in output
    assert "OPENAI_API_KEY" in output
    assert "api_base" in output
    assert "you>" not in output
    assert "Traceback" not in output


@pytest.mark.parametrize("command", ["shell", "serve"])
def test_an_unreachable_model_is_reported_before_starting(tmp_path, command):
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    endpoints = tmp_path / "p" / "endpoints.yml"
    endpoints.write_text(endpoints.read_text().replace(
        "model: gpt-4.1-mini", f"model: gpt-4.1-mini\n        api_base: "
                               f"http://127.0.0.1:{closed_port()}/v1"))
    result = cli(command, "--project", "p", "--port", str(closed_port()), cwd=tmp_path,
                 env=no_key_env()) if command == "serve" else \
        cli(command, "--project", "p", cwd=tmp_path, env=no_key_env())
    assert result.returncode == 1
    assert "[preflight.model_unreachable]" in result.stderr
    assert "you>" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


HELLO = "test_cases:\n  - test_case: hello\n    steps:\n      - user: hi\n"


@pytest.mark.parametrize("command", ["shell", "serve", "demo", "test"])
def test_every_command_lists_project_errors_without_a_traceback(make_project, command):
    root = make_project({
        "sub_agents/weather/config.yml": "agent:\n  name: weather_agent\n",
        "tests/e2e/hello.yml": HELLO,
        "demo.yml": HELLO,
    })
    result = cli(command, "--project", str(root), cwd=root)
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert "[agent.validation.mandatory.fields_missing]" in output
    assert "Traceback" not in output


async def test_the_prompt_waits_until_the_answer_is_complete(tmp_path):
    script = {"command_generator": ["start flow help_flow"],
              "helper": [{"text": "What do you need help with today?", "delay_ms": 300}]}
    async with FakeModelServer(script) as fake:
        root = shell_project(tmp_path / "p", fake)
        term = Terminal()
        await term.start(sys.executable, "-m", "subagents.cli.main", "shell", "--project",
                         str(root))
        await term.expect("you> ")
        term.send("I need help\n")
        await term.expect("bot> What do you need help with today?")
        await term.expect("\nyou> ")
        term.send("\x04")
        await term.expect("bye")
        assert await term.close() == 0
    after = term.buffer.decode(errors="replace").split("I need help", 1)[1]
    assert after.index("bot> What do you need help with today?") < after.index("you> ")


@pytest.mark.parametrize("argv", [
    ["validate", "--log-level", "debug", "-v", "--debug"],
    ["--log-level", "DEBUG", "-v", "--debug", "validate"],
])
def test_global_flags_work_before_and_after_the_command(argv):
    args = build_parser().parse_args(argv)
    assert (args.command, args.log_level, args.verbose, args.debug) == \
        ("validate", "DEBUG", 1, True)


@pytest.mark.parametrize("command", ["init", "validate", "test", "demo", "shell", "serve"])
def test_every_command_documents_examples_and_defaults(command, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = capsys.readouterr().out
    assert "examples:\n" in text
    assert f"subagents {command}" in text.split("examples:")[1]
    if command != "init":
        assert "--project DIR" in text
        assert "(default: .)" in text
    if command == "serve":
        assert "(default: 127.0.0.1)" in text
        assert "(default: 5005)" in text
