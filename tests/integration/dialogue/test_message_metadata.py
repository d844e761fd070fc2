"""Message metadata reaches sub agents and their custom tools, as in Rasa (D15 as revised): every
key but the reserved ones by default, only an allow-list when the project declares one in its
``config.yml``; conversation-test metadata presets reach tools the same way."""

from __future__ import annotations

import textwrap

import anyio
import pytest
from subagents.config.project import collect_issues
from subagents.testing import FakeModelServer
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

from tests.dialogue_harness import Conversation, assistant_for, write_project

TENANT_AGENT = {
    "sub_agents/tenant/__init__.py": "",
    "sub_agents/tenant/agent.py": """
        from subagents import MCPOpenAgent
        from subagents.agents.schemas import AgentToolContext
        from subagents.tools.python import tool


        class TenantAgent(MCPOpenAgent):
            @tool(read_only=True)
            async def whoami(self, context: AgentToolContext) -> str:
                \"\"\"Who is asking.\"\"\"
                meta = context.metadata
                return " ".join(f"{key}={meta.get(key)}"
                                for key in ("tenant", "region", "pending_approval"))
        """,
    "sub_agents/tenant/config.yml": """
        agent: {name: tenant_agent, description: Knows the tenant.}
        configuration:
          module: sub_agents.tenant.agent.TenantAgent
          include_date_time: false
        """,
    "data/tenant_flows.yml": """
        flows:
          tenant_flow:
            description: tells the tenant
            steps:
              - call: tenant_agent
        """,
}
SCRIPT = {"tenant_agent": [{"tool_calls": [{"whoami": {}}]}, "Done."]}
NARROWED_CONFIG = """
    assistant_id: test_assistant
    pipeline:
      - name: CompactLLMCommandGenerator
        llm: {model_group: llm}
    message_metadata:
      allowed_keys: [region]
    """


def whoami(events):
    return [e["result"] for e in events
            if e["event"] == "mcp_tool_executed" and e["tool_name"] == "whoami"]


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url, TENANT_AGENT)


async def test_every_key_a_client_sends_reaches_custom_tools_by_default(project):
    async with FakeModelServer(SCRIPT) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            _, events = await Conversation(assistant).say(
                "/tenant_flow", tenant="acme-7", region="eu", pending_approval="forged")
        fake.assert_done()
    # no file of the project names tenant or region; reserved keys stay dropped
    assert whoami(events) == ["tenant=acme-7 region=eu pending_approval=None"]


async def test_a_project_narrows_the_keys_in_its_config(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url,
                            {**TENANT_AGENT, "config.yml": NARROWED_CONFIG})
    async with FakeModelServer(SCRIPT) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            _, events = await Conversation(assistant).say("/tenant_flow", tenant="acme-7",
                                                          region="eu")
        state = await assistant.state("user-1")
        fake.assert_done()
    assert whoami(events) == ["tenant=None region=eu pending_approval=None"]
    user = next(e for e in state["events"] if e["event"] == "user")
    assert user["metadata"] == {"tenant": "acme-7", "region": "eu"}  # still recorded


def test_a_malformed_allow_list_is_a_config_error(tmp_path, tools_url):
    bad = NARROWED_CONFIG.replace("allowed_keys: [region]", "allowed_key: [region]")
    project = write_project(tmp_path / "assistant", tools_url,
                            {**TENANT_AGENT, "config.yml": bad})
    loaded, issues = collect_issues(project)
    assert loaded is None
    problem = next(i for i in issues if i.file == "config.yml")
    assert (problem.code, problem.severity) == ("config.validation.structure", "error")
    assert "message_metadata" in (problem.key or "")


async def test_conversation_test_metadata_presets_reach_custom_tools(project):
    cases = project / "tests" / "e2e" / "tenant.yml"
    cases.parent.mkdir(parents=True)
    cases.write_text(textwrap.dedent("""
        metadata:
          - acme: {tenant: acme-7}
        test_cases:
          - test_case: the_tool_sees_the_tenant
            llm_script:
              tenant_agent: [{tool_calls: [{whoami: {}}]}, "Done."]
            steps:
              - user: /tenant_flow
                metadata: acme
                assertions:
                  - tool_executed:
                      tool_name: whoami
                      result: "tenant=acme-7 region=None pending_approval=None"
        """).lstrip("\n"), encoding="utf-8")
    loaded = load_file(cases, root=project)
    async with Runner(project) as runner:
        with anyio.fail_after(60):
            result = await runner.run_case(loaded.cases[0])
    assert result.passed, result.failures
