"""The car shop example (laid out like Rasa's sub-agent samples: an A2A agent with a Rasa-style
class, an MCP tool step, a task agent subclassing Rasa's MCPTaskAgent) validates and passes its
conversation tests, with the demo dealer served over A2A on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from subagents import rasa_compat
from subagents.config.project import collect_issues
from subagents.demo.a2a_dealer import build_app
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file
from subagents.testing.mcp_http import serve_app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "car_shop"


@pytest.fixture
def no_rasa_cache():
    yield
    rasa_compat.deactivate()


def test_the_example_validates(monkeypatch):
    monkeypatch.setenv("CAR_DEALER_URL", "http://127.0.0.1:9")
    project, issues = collect_issues(EXAMPLE)
    assert project is not None, [i.format() for i in issues]
    assert not [i for i in issues if i.severity == "error"]


async def test_the_example_conversations_pass(monkeypatch, no_rasa_cache):
    loaded = load_file(EXAMPLE / "tests" / "e2e" / "car_shop.yml")
    assert loaded.issues == []
    async with serve_app(build_app()) as dealer:
        monkeypatch.setenv("CAR_DEALER_URL", dealer)
        with anyio.fail_after(120):
            async with Runner(EXAMPLE) as runner:
                results = [await runner.run_case(case) for case in loaded.cases]
    failures = {r.case.name: r.failures for r in results if not r.passed}
    assert failures == {}, "\n".join(f"{k}: {v}" for k, v in failures.items())


def test_the_model_check_leaves_out_the_remote_agent(monkeypatch):
    from subagents.config.project import load_project
    from subagents.preflight import project_models

    monkeypatch.setenv("CAR_DEALER_URL", "http://127.0.0.1:9")
    callers = [c for _, users in project_models(load_project(EXAMPLE)).values() for c in users]
    assert "sub agent trade_in_agent" in callers
    assert "sub agent car_dealer" not in callers
