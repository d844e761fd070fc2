"""Ctrl-C (SIGINT) ends shell, serve, demo and test at any moment: exit status 130, no noise.

Each command runs as a real child process on a project whose MCP server is slow to start: the
server writes a line to stderr and then never answers, so the signal arrives while the command
is connecting its MCP servers (where it used to hang for 30-45 s and print asyncio's "Task was
destroyed but it is pending!"). The waits are bounded, never timed: a command that ignores
Ctrl-C fails the test by not ending within the bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli.test_cli_first_run import cli, closed_port
from tests.integration.cli.test_shell_and_demo import Terminal

SLOW_SERVER = """\
import sys, time
print("slow MCP server started", file=sys.stderr, flush=True)
time.sleep(120)
"""
NOISE = ("Traceback", "Task was destroyed", "was never awaited", "CancelledError",
         "Exception ignored")
BOUND = 20
"""Seconds a command may take to end after Ctrl-C before the test fails (it takes 1-2)."""


@pytest.fixture
def slow_project(tmp_path: Path) -> Path:
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    root = tmp_path / "p"
    (root / "mcp_servers" / "weather.py").write_text(SLOW_SERVER)
    return root


def command_args(command: str, root: Path) -> list[str]:
    extra = {"shell": ["--no-model-check"],
             "serve": ["--no-model-check", "--port", str(closed_port())],
             "demo": [], "test": []}[command]
    return [sys.executable, "-m", "subagents.cli.main", command, "--project", str(root), *extra]


async def interrupt_when(term: Terminal, text: str) -> tuple[int, str]:
    await term.expect(text)
    assert term.proc is not None
    term.proc.send_signal(signal.SIGINT)
    code = await term.close()  # bounded (30 s)
    return code, term.buffer.decode(errors="replace")


@pytest.mark.parametrize("command", ["shell", "serve", "demo", "test"])
async def test_ctrl_c_while_connecting_mcp_servers_ends_the_command(slow_project, command):
    term = Terminal()
    await term.start(*command_args(command, slow_project), env=dict(os.environ))
    code, output = await interrupt_when(term, "slow MCP server started")
    assert code == 130, output
    assert not [word for word in NOISE if word in output], output


async def test_ctrl_c_while_serving_ends_serve_with_130(tmp_path):
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    term = Terminal()
    await term.start(*command_args("serve", tmp_path / "p"), env=dict(os.environ))
    code, output = await interrupt_when(term, "serving on http://")
    assert code == 130, output
    assert not [word for word in NOISE if word in output], output


def test_sigterm_still_drains_and_ends_serve_with_0(tmp_path):
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    with subprocess.Popen(command_args("serve", tmp_path / "p"), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        try:
            for line in proc.stderr:  # ends when the process does
                if "serving on http://" in line:
                    break
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=BOUND) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=BOUND)
