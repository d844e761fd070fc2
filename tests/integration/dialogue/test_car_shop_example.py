"""The car shop example (laid out like Rasa's sub-agent samples: an A2A agent with a Rasa-style
class, an MCP tool step, a task agent subclassing Rasa's MCPTaskAgent) validates, its MCP tool
step names a tool its server lists, and it passes its conversation tests offline (the dealer's
replies come from a2a_script); its A2A agent also works against the real demo dealer served
over A2A on 127.0.0.1."""

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

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "car_shop"


@pytest.fixture
def no_rasa_cache():
    yield
    rasa_compat.deactivate()


def test_the_example_validates(monkeypatch):
    monkeypatch.setenv("CAR_DEALER_URL", "http://127.0.0.1:9")
    project, issues = collect_issues(EXAMPLE)
    assert project is not None, [i.format() for i in issues]
    assert not [i for i in issues if i.severity == "error"]


def test_the_tool_step_names_a_tool_the_server_lists(monkeypatch):
    from subagents.cli.validate_connect import connected_issues

    monkeypatch.setenv("CAR_DEALER_URL", "http://127.0.0.1:9")
    project, _ = collect_issues(EXAMPLE)
    assert project is not None
    assert [(r.server, r.tool) for r in project.tool_steps] == [("car_shop", "reserve_car")]
    assert connected_issues(project) == []


async def test_the_example_conversations_pass_offline(monkeypatch, no_rasa_cache):
    monkeypatch.delenv("CAR_DEALER_URL", raising=False)  # no dealer: a2a_script answers
    loaded = load_file(EXAMPLE / "tests" / "e2e" / "car_shop.yml")
    assert loaded.issues == []
    with anyio.fail_after(120):
        async with Runner(EXAMPLE) as runner:
            results = [await runner.run_case(case) for case in loaded.cases]
    failures = {r.case.name: r.failures for r in results if not r.passed}
    assert failures == {}, "\n".join(f"{k}: {v}" for k, v in failures.items())
    assert len(results) == 4


async def test_the_dealer_class_sets_slots_from_the_real_dealers_offer(monkeypatch,
                                                                      no_rasa_cache):
    from subagents.testing import FakeModelServer

    from tests.dialogue_harness import Conversation, assistant_for

    script = {"command_generator": ["start flow buy_car"]}
    async with serve_app(build_app()) as dealer:
        monkeypatch.setenv("CAR_DEALER_URL", dealer)
        async with FakeModelServer(script) as fake, assistant_for(EXAMPLE, fake) as assistant:
            with anyio.fail_after(60):
                texts, events = await Conversation(assistant).say("I'd like a Civic")
            fake.assert_done()
    assert texts[:2] == ["Checking our stock for the Civic...",
                         "The Civic is in stock at $26,900."]
    slots = {e["name"]: e["value"] for e in events if e.get("event") == "slot"}
    assert (slots.get("car_model"), slots.get("car_price")) == ("civic", 26900.0)


def test_the_model_check_leaves_out_the_remote_agent(monkeypatch):
    from subagents.config.project import load_project
    from subagents.llm.preflight import project_models

    monkeypatch.setenv("CAR_DEALER_URL", "http://127.0.0.1:9")
    callers = [c for _, users in project_models(load_project(EXAMPLE)).values() for c in users]
    assert "sub agent trade_in_agent" in callers
    assert "sub agent car_dealer" not in callers
