"""MCP that knows the user: headers filled from the conversation, one session per
conversation (or user), pooled with an idle timeout and a cap; the credentials never reach
the model or the logs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs
from subagents.agents.base import MCPBaseAgent
from subagents.agents.open_agent import MCPOpenAgent
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.project import collect_issues
from subagents.config.sub_agent import SubAgentConfig
from subagents.llm import LLMClient, ModelSettings
from subagents.mcp import MCPPool
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_mcp

from tests.agent_harness import agent_input
from tests.dialogue_harness import Conversation, assistant_for, write_project
from tests.servers import identity_server

TEMPLATE = {"Authorization": "Bearer {{ metadata.user_token }}"}


@pytest.fixture
async def identity_url() -> AsyncIterator[str]:
    identity_server.reset()
    async with serve_mcp(identity_server.server, "http") as url:
        yield url


def identity_endpoints(url: str, **server: Any) -> EndpointsConfig:
    settings: dict[str, Any] = {"headers": TEMPLATE, "session": "per_conversation", **server}
    return EndpointsConfig(mcp_servers=[McpServerConfig(name="identity", type="http", url=url,
                                                        **settings)])


async def make_agent(fake: FakeModelServer, pool: MCPPool, name: str) -> MCPBaseAgent:
    config = SubAgentConfig.model_validate({
        "agent": {"name": name, "description": "Keeps notes."},
        "configuration": {"include_date_time": False},
        "connections": {"mcp_servers": [{"name": "identity"}]}})
    llm = LLMClient(ModelSettings(model="fake", api_base=fake.base_url(name), max_retries=0,
                                  timeout=10), name=name)
    agent = MCPOpenAgent.from_config(config, endpoints=pool.endpoints, pool=pool, llm=llm)
    await agent.connect()
    return agent


def results(output: Any, tool: str) -> list[str]:
    return [e["result"] for e in output.events
            if e["event"] == "mcp_tool_executed" and e["tool_name"] == tool]


def conversation(user: str, token: str | None = None) -> Any:
    metadata: dict[str, Any] = {"sender_id": f"{user}-conversation"}
    if token is not None:
        metadata["user_token"] = token
    return agent_input("keep a note", metadata=metadata)


NOTE_SCRIPT = [{"tool_calls": [{"remember": {"note": "n"}}]},
               {"tool_calls": [{"meet": {"expected": 2}}]},
               {"tool_calls": [{"recall": {}}]},
               {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]


async def test_two_concurrent_conversations_with_different_credentials_never_share_state(
        identity_url):
    pool = MCPPool(identity_endpoints(identity_url))
    outputs: dict[str, Any] = {}
    async with FakeModelServer({"agent_a": list(NOTE_SCRIPT),
                                "agent_b": list(NOTE_SCRIPT)}) as fake:
        agents = {"alice": await make_agent(fake, pool, "agent_a"),
                  "bob": await make_agent(fake, pool, "agent_b")}
        try:
            with capture_logs() as logs, anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for user, agent in agents.items():
                        async def run(user: str = user, agent: MCPBaseAgent = agent) -> None:
                            outputs[user] = await agent.run(
                                conversation(user, f"token-{user}"))
                        tg.start_soon(run)
            sessions = pool.keyed_sessions("identity")
        finally:
            for agent in agents.values():
                await agent.disconnect()
            await pool.close()
        fake.assert_done()
    # both calls of "meet" were in flight at once, each in its own session
    assert results(outputs["alice"], "meet") == ["met 2"]
    assert results(outputs["alice"], "recall") == ["auth=alice; notes=['n (alice)']"]
    assert results(outputs["bob"], "recall") == ["auth=bob; notes=['n (bob)']"]
    assert sessions == 2
    # the credentials never reach the model or the logs
    for request in fake.requests:
        assert "token-" not in str(request.body)
    assert "token-" not in str(logs)


async def test_new_credentials_in_the_same_conversation_open_a_new_session(identity_url):
    pool = MCPPool(identity_endpoints(identity_url))
    script = [{"tool_calls": [{"remember": {"note": "n"}}]}, "ok",
              {"tool_calls": [{"recall": {}}]}, "ok"]
    async with FakeModelServer({"agent_a": script}) as fake:
        agent = await make_agent(fake, pool, "agent_a")
        try:
            with anyio.fail_after(30):
                await agent.run(conversation("alice", "token-alice"))
                second = await agent.run(conversation("alice", "token-alice2"))
            sessions = pool.keyed_sessions("identity")
        finally:
            await agent.disconnect()
            await pool.close()
    assert results(second, "recall") == ["auth=alice2; notes=[]"]
    assert sessions == 1


async def test_at_the_cap_the_least_recently_used_session_is_closed(identity_url):
    pool = MCPPool(identity_endpoints(identity_url, max_sessions=1))
    script = [{"tool_calls": [{"remember": {"note": "n"}}]}, "ok",
              {"tool_calls": [{"remember": {"note": "m"}}]}, "ok",
              {"tool_calls": [{"recall": {}}]}, "ok"]
    async with FakeModelServer({"agent_a": script}) as fake:
        agent = await make_agent(fake, pool, "agent_a")
        try:
            with anyio.fail_after(30):
                await agent.run(conversation("alice", "token-alice"))
                await agent.run(conversation("bob", "token-bob"))
                assert pool.keyed_sessions("identity") == 1
                # alice's session was closed to make room: she starts a fresh one
                third = await agent.run(conversation("alice", "token-alice"))
        finally:
            await agent.disconnect()
            await pool.close()
    assert results(third, "recall") == ["auth=alice; notes=[]"]


async def test_an_idle_session_is_closed_when_the_next_session_is_requested(identity_url):
    pool = MCPPool(identity_endpoints(identity_url, session_idle_timeout=1e-9))
    script = [{"tool_calls": [{"remember": {"note": "n"}}]}, "ok",
              {"tool_calls": [{"remember": {"note": "m"}}]}, "ok"]
    async with FakeModelServer({"agent_a": script}) as fake:
        agent = await make_agent(fake, pool, "agent_a")
        try:
            with anyio.fail_after(30), capture_logs() as logs:
                await agent.run(conversation("alice", "token-alice"))
                await agent.run(conversation("bob", "token-bob"))
            sessions = pool.keyed_sessions("identity")
        finally:
            await agent.disconnect()
            await pool.close()
    assert sessions == 1
    assert any(e["event"] == "mcp.sessions.idle_closed" for e in logs)


async def test_per_user_sessions_follow_the_user_across_conversations(identity_url):
    pool = MCPPool(identity_endpoints(identity_url,
                                      session={"per_user": "metadata.user_id"}))
    script = [{"tool_calls": [{"remember": {"note": "n"}}]}, "ok",
              {"tool_calls": [{"recall": {}}]}, "ok"]
    async with FakeModelServer({"agent_a": script}) as fake:
        agent = await make_agent(fake, pool, "agent_a")
        first = conversation("phone", "token-alice")
        first.metadata["user_id"] = "alice"
        second = conversation("laptop", "token-alice")
        second.metadata["user_id"] = "alice"
        try:
            with anyio.fail_after(30):
                await agent.run(first)
                later = await agent.run(second)
        finally:
            await agent.disconnect()
            await pool.close()
    assert results(later, "recall") == ["auth=alice; notes=['n (alice)']"]


async def test_a_missing_credential_is_an_error_result_and_nothing_is_called(identity_url):
    pool = MCPPool(identity_endpoints(identity_url))
    script = [{"tool_calls": [{"recall": {}}]}, "I cannot reach your notes."]
    async with FakeModelServer({"agent_a": script}) as fake:
        agent = await make_agent(fake, pool, "agent_a")
        try:
            with anyio.fail_after(30):
                output = await agent.run(conversation("alice"))
            sessions = pool.keyed_sessions("identity")
        finally:
            await agent.disconnect()
            await pool.close()
    [event] = [e for e in output.events if e["event"] == "mcp_tool_executed"]
    assert event["is_error"]
    assert "metadata.user_token" in event["error_message"]
    assert sessions == 0


async def test_message_metadata_named_by_a_template_reaches_the_server_end_to_end(
        tmp_path, identity_url):
    project = write_project(tmp_path / "assistant", identity_url, {
        "endpoints.yml": f"""
            model_groups:
              - id: llm
                models: [{{provider: openai, model: gpt-test}}]
            mcp_servers:
              - name: tools
                type: http
                url: {identity_url}
                session: per_conversation
                headers:
                  Authorization: "Bearer {{{{ metadata.user_token }}}}"
            """,
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Keeps notes.}
            configuration: {include_date_time: false}
            connections:
              mcp_servers: [{name: tools}]
            """})
    turn = [{"tool_calls": [{"remember": {"note": "n"}}]}, {"tool_calls": [{"recall": {}}]},
            {"text": "Noted.", "tool_calls": [{"task_completed": {}}]}]
    script = {"command_generator": ["start flow weather_flow", "start flow weather_flow"],
              "weather_agent": [*turn, *turn]}
    recalled = []
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        with anyio.fail_after(30):
            for user in ("alice", "bob"):
                _, events = await Conversation(assistant, user).say(
                    "note this", user_token=f"token-{user}")
                recalled += [e["result"] for e in events if e.get("tool_name") == "recall"]
        fake.assert_done()
    assert recalled == ["auth=alice; notes=['n (alice)']", "auth=bob; notes=['n (bob)']"]


@pytest.mark.parametrize(("server", "code"), [
    ("headers: {Authorization: 'Bearer {{ metadata.user_token }}'}",
     "endpoints.mcp_server.invalid"),
    ("session: per_conversation\nheaders: {X-User: '{{ slots.nobody }}'}",
     "endpoints.mcp_server.unknown_slot"),
    ("session: per_conversation\nheaders: {X-User: '{{ env.HOME }}'}",
     "endpoints.mcp_server.invalid"),
])
def test_validate_checks_the_names_templates_use(tmp_path, server, code):
    server = server.replace("\n", "\n" + " " * 16)
    project = write_project(tmp_path / "assistant", "http://127.0.0.1:1/mcp", {
        "endpoints.yml": f"""
            model_groups:
              - id: llm
                models: [{{provider: openai, model: gpt-test}}]
            mcp_servers:
              - name: tools
                type: http
                url: http://127.0.0.1:1/mcp
                {server}
            """})
    _, issues = collect_issues(project)
    errors = [i for i in issues if i.severity == "error"]
    assert [i.code for i in errors] == [code]
    assert errors[0].file is not None
    assert errors[0].file.endswith("endpoints.yml")
    assert errors[0].line is not None


async def test_the_token_may_be_a_template_too(identity_url):
    endpoints = EndpointsConfig(mcp_servers=[McpServerConfig(
        name="identity", type="http", url=identity_url, token="{{ metadata.user_token }}",
        session="per_conversation")])
    pool = MCPPool(endpoints)
    script = [{"tool_calls": [{"recall": {}}]}, "ok"]
    async with FakeModelServer({"agent_a": script}) as fake:
        agent = await make_agent(fake, pool, "agent_a")
        try:
            with anyio.fail_after(30):
                output = await agent.run(conversation("carol", "token-carol"))
        finally:
            await agent.disconnect()
            await pool.close()
    assert results(output, "recall") == ["auth=carol; notes=[]"]
