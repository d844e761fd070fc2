"""A task agent whose ``exit_if`` reads a slot it cannot fill (Rasa 3.21's rule: a ``set_slot``
tool only for slots without mappings or with a ``from_llm`` one) never completes: ``validate``
warns, naming the slot and the fix, and a failed run logs the same cause."""

from __future__ import annotations

import anyio
import pytest
import structlog
from subagents.config.project import collect_issues
from subagents.testing import FakeModelServer

from tests.dialogue_harness import Conversation, assistant_for, write_project

EXTRA = {
    "data/reference_flows.yml": """
        flows:
          reference_flow:
            description: books and gets a reference
            steps:
              - call: booking_agent
                exit_if:
                  - slots.booking_ref is not null and slots.city is not null
          either_flow:
            description: the model may fill this one
            steps:
              - call: booking_agent
                exit_if:
                  - slots.confirmed is true
        """,
    "data/reference_domain.yml": """
        slots:
          booking_ref:
            type: text
            mappings: [{type: controlled}]
          confirmed:
            type: bool
            mappings: [{type: controlled}, {type: from_llm}]
        """,
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, EXTRA)


def test_validate_warns_about_an_exit_slot_the_agent_cannot_fill(project):
    _, issues = collect_issues(project)
    found = [i for i in issues if i.code == "flow.exit_if.slot_not_fillable"]
    assert [(i.severity, i.file, i.key) for i in found] == [
        ("warning", "data/reference_flows.yml", "flows.reference_flow.steps[0].exit_if[0]")]
    assert "'booking_ref'" in found[0].message
    assert "from_llm" in (found[0].hint or "")


def test_an_exit_slot_a_tool_fills_is_not_reported(project):
    config = project / "sub_agents" / "booking" / "config.yml"
    config.write_text(config.read_text().replace(
        "configuration: {include_date_time: false}",
        "configuration:\n  include_date_time: false\n"
        "  tools: {echo: {outputs_to_state: {booking_ref: result}}}"))
    _, issues = collect_issues(project)
    assert [i for i in issues if i.code == "flow.exit_if.slot_not_fillable"] == []


async def test_a_failed_run_logs_the_cause(project):
    script = {"command_generator": ["start flow reference_flow"],
              "booking_agent": [{"error": {"status": 500, "message": "model down"}}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with structlog.testing.capture_logs() as logs, anyio.fail_after(30):
            await Conversation(assistant).say("book me a table")
        fake.assert_done()
    causes = [e for e in logs if e["event"] == "dialogue.agent.exit_slot_not_fillable"]
    assert [(c["agent"], c["slots"], c["log_level"]) for c in causes] == [
        ("booking_agent", ["booking_ref"], "warning")]
