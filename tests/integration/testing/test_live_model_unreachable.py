"""``subagents test --live-model`` with a model nobody answers: one clear failure per case."""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Iterator

import anyio
import pytest
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

from tests.cli_process import run_cli
from tests.dialogue_harness import write_project
from tests.integration.recording.test_recording import LIVE_CASE, NOWHERE


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but never listening: connections are refused, and no other test's server
    can take it while the test runs (a port merely found free could be)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _project(tmp_path, port):
    address = f"http://127.0.0.1:{port}/v1"  # nothing listens here
    endpoints = f"""
        model_groups:
          - id: llm
            models: [{{provider: openai, model: gone-model, api_base: "{address}"}}]
        mcp_servers:
          - {{name: tools, type: http, url: "{NOWHERE}"}}
        """
    root = write_project(tmp_path / "p", NOWHERE, {"endpoints.yml": endpoints})
    path = root / "tests" / "e2e" / "live.yml"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(LIVE_CASE))
    return root, path, address


async def test_an_unreachable_live_model_fails_the_case_once_naming_model_and_address(
        tmp_path, closed_port):
    root, path, address = _project(tmp_path, closed_port)
    case = load_file(path, root=root).cases[0]
    async with Runner(root, live_model=True) as runner:
        results = [await runner.run_case(case) for _ in range(2)]
    for result in results:
        assert not result.passed
        [failure] = result.failures
        assert "[preflight.model_unreachable]" in failure
        assert "'gone-model'" in failure
        assert address in failure
        assert "difference(s)" not in failure


async def test_the_cli_reports_the_unreachable_live_model_once(tmp_path, closed_port):
    root, path, address = _project(tmp_path, closed_port)
    done = await anyio.to_thread.run_sync(
        lambda: run_cli("test", str(path), "--project", str(root), "--live-model"))
    assert done.returncode == 1, done.stderr
    assert done.stdout.count("[preflight.model_unreachable]") == 1
    assert address in done.stdout
    assert "step 2" not in done.stdout
