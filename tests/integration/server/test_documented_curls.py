"""Every ``curl`` printed in the docs and in ``--help`` works as printed against a real ``serve``.

The commands are taken from the Markdown files (README.md, docs/) and from every command's help
text, joined where a line ends in ``\\``, and run with the real ``curl`` through ``bash``; only
the address changes (``localhost:5005`` becomes the test server's port). The server is a
``subagents init`` project whose model is not reachable: the API still answers each message, with
the model-unavailable reply, which is what these commands check (status 200 and the answer's
shape, not the assistant's words).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from subagents.cli.main import build_parser

from tests.integration.cli.test_cli_first_run import cli, closed_port
from tests.serve_process import serve_process

REPO = Path(__file__).resolve().parents[3]
TOKEN = "documented-curl-token"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


def _joined(lines: list[str]) -> list[str]:
    commands, current = [], ""
    for line in lines:
        current += line.rstrip().removesuffix("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def documented_curls() -> list[str]:
    """``curl`` commands from the Markdown code blocks and the ``--help`` examples."""
    found: list[str] = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", path.read_text(), re.S):
            lines = block.splitlines()
            starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("curl ")]
            for start in starts:
                end = start
                while lines[end].rstrip().endswith("\\"):
                    end += 1
                found += _joined(lines[start:end + 1])
    parser = build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():  # type: ignore[union-attr]
        lines = (sub.epilog or "").splitlines()
        for index, line in enumerate(lines):
            if line.lstrip().startswith("curl "):
                end = index
                while lines[end].rstrip().endswith("\\"):
                    end += 1
                found += _joined(lines[index:end + 1])
    return found


def test_the_docs_and_help_print_curl_commands():
    commands = documented_curls()
    assert len(commands) >= 3
    assert any("--help" not in c and "stream=true" in c for c in commands)


async def run_curl(command: str, port: int) -> tuple[int, str, str]:
    command = command.replace("localhost:5005", f"127.0.0.1:{port}")
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, env={**os.environ, "SUBAGENTS_TOKEN": TOKEN},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()  # stderr: curl's progress meter


def assert_answered(command: str, output: str) -> None:
    if "stream=true" in command or "/webhooks/stream/" in command:
        assert "event: done" in output, output
        return
    answer = json.loads(output)
    assert isinstance(answer, list), output
    assert answer
    assert answer[0]["recipient_id"] == "u1"


async def test_every_documented_curl_works_as_printed(tmp_path):
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    root = tmp_path / "p"
    endpoints = root / "endpoints.yml"
    endpoints.write_text(endpoints.read_text().replace(
        "model: gpt-4.1-mini", f"model: gpt-4.1-mini\n        api_base: "
                               f"http://127.0.0.1:{closed_port()}/v1"))
    commands = documented_curls()
    with_token = [c for c in commands if "SUBAGENTS_TOKEN" in c]
    without = [c for c in commands if c not in with_token]
    for token_args, batch in ((["--token", TOKEN], with_token), ([], without)):
        if not batch:
            continue
        async with serve_process(root, *token_args) as server:
            port = int(server.url.rsplit(":", 1)[1])
            for command in batch:
                code, output, progress = await run_curl(command, port)
                assert code == 0, (command, output, progress)
                assert_answered(command, output)
