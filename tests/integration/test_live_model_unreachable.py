"""``subagents test --live-model`` with a model nobody answers: one clear failure per case."""

from __future__ import annotations

import textwrap

import anyio
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

from tests.cli_process import run_cli
from tests.dialogue_harness import write_project
from tests.integration.test_recording import LIVE_CASE, NOWHERE
from tests.serve_process import free_port


def _project(tmp_path):
    address = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens here
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
        tmp_path):
    root, path, address = _project(tmp_path)
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


async def test_the_cli_reports_the_unreachable_live_model_once(tmp_path):
    root, path, address = _project(tmp_path)
    done = await anyio.to_thread.run_sync(
        lambda: run_cli("test", str(path), "--project", str(root), "--live-model"))
    assert done.returncode == 1, done.stderr
    assert done.stdout.count("[preflight.model_unreachable]") == 1
    assert address in done.stdout
    assert "step 2" not in done.stdout
