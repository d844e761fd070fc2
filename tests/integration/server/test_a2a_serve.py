"""``serve --a2a``: our sub agents published over A2A, and one assistant calling another's agent."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from subagents.dialogue.processor import Assistant
from subagents.exceptions import AgentInitializationError
from subagents.server.app import create_app
from subagents.stores import InMemoryTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

CALLER_FILES = {
    "data/flows.yml": """
        flows:
          remote_weather_flow:
            description: the weather, from another assistant
            steps:
              - call: remote_weather
              - action: utter_after_weather
        """,
    "sub_agents/remote_weather/config.yml": None,
}


def caller_project(root, tools_url, card_url, token_env: str | None = None):
    auth = f"  auth: {{token: '${{{token_env}}}'}}" if token_env else ""
    files = dict(CALLER_FILES)
    files["sub_agents/remote_weather/config.yml"] = f"""
        agent: {{name: remote_weather, protocol: A2A, description: Weather from elsewhere.}}
        configuration:
          agent_card: {card_url}
          max_retries: 1
        {auth}
        """
    return write_project(root, tools_url, files)


async def test_one_assistant_calls_another_assistants_agent_over_a2a(tmp_path, tools_url):
    script = {
        "weather_agent": ["Hello! Which city?",  # the caller's start-up health check
                          "Which city?",
                          {"text": "It is sunny in Berlin.",
                           "tool_calls": [{"task_completed": {}}]}],
        "command_generator": ["start flow remote_weather_flow", ""],
    }
    async with FakeModelServer(script) as fake:
        served = Assistant.load(write_project(tmp_path / "served", tools_url),
                                llm_factory=fake.llm_factory(),
                                tracker_store=InMemoryTrackerStore())
        app = create_app(served, a2a_agents=["weather_agent"])
        async with serve_app(app) as base:
            card_url = f"{base}/a2a/weather_agent/.well-known/agent-card.json"
            async with httpx.AsyncClient() as client:
                card = (await client.get(card_url)).json()
            assert card["name"] == "weather_agent"
            assert card["supportedInterfaces"][0]["url"] == f"{base}/a2a/weather_agent/"
            project = caller_project(tmp_path / "caller", tools_url, card_url)
            async with assistant_for(project, fake) as caller:
                convo = Conversation(caller)
                with anyio.fail_after(30):
                    texts1, turn1 = await convo.say("what's the weather?")
                    texts2, turn2 = await convo.say("Berlin")
        fake.assert_done()
    assert texts1 == ["Which city?"]
    assert "action:action_agent_request_user_input" in names(turn1)
    assert texts2[:2] == ["It is sunny in Berlin.", "Anything else about the weather?"]
    assert "agent_completed:remote_weather" in names(turn2)
    # the served agent saw the caller's conversation as one A2A context: its history
    second = [r for r in fake.requests if r.caller == "weather_agent"][2]
    assert "Which city?" in json.dumps(second.body["messages"])


async def test_only_the_chosen_agents_are_published_and_the_token_guards_them(
        tmp_path, tools_url):
    async with FakeModelServer({}) as fake:
        served = Assistant.load(write_project(tmp_path / "served", tools_url),
                                llm_factory=fake.llm_factory(),
                                tracker_store=InMemoryTrackerStore())
        app = create_app(served, token="t0ken", a2a_agents=["weather_agent"])
        async with serve_app(app) as base, httpx.AsyncClient() as client:
            ok = await client.get(f"{base}/a2a/weather_agent/.well-known/agent-card.json")
            other = await client.get(f"{base}/a2a/booking_agent/.well-known/agent-card.json")
            rpc = await client.post(f"{base}/a2a/weather_agent/", json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}})
    assert ok.status_code == 200
    assert other.status_code == 404
    assert rpc.status_code == 401


def test_publishing_an_agent_no_flow_calls_is_refused(tmp_path, tools_url):
    served = Assistant.load(write_project(tmp_path / "served", tools_url),
                            tracker_store=InMemoryTrackerStore())
    with pytest.raises(AgentInitializationError) as info:
        create_app(served, a2a_agents=["nobody_agent"])
    assert info.value.code == "a2a.serve.unknown_agent"


def test_serve_a2a_names_an_unknown_agent_with_its_error_code(tmp_path, tools_url):
    from tests.cli_process import run_cli

    project = write_project(tmp_path / "served", tools_url)
    done = run_cli("serve", "--project", str(project), "--no-model-check",
                   "--port", "1", "--a2a", "weather_agent,nobody_agent")
    assert done.returncode == 1
    assert "[a2a.serve.unknown_agent]" in done.stderr
