"""Client-executed tools: the run parks, the client returns the result, the
next turn resumes the loop with it."""

from __future__ import annotations

import textwrap

import anyio
import httpx2
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, names, write_project

CLIENT_AGENT = """
    agent: {name: weather_agent, description: Tells the weather.}
    configuration:
      include_date_time: false
      client_tools:
        - name: get_location
          description: The user's current location, from their device.
          parameters:
            type: object
            properties: {precision: {type: string}}
    connections:
      mcp_servers: [{name: tools, include_tools: [echo]}]
    """


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url,
                         extra={"sub_agents/weather/config.yml": CLIENT_AGENT})


def script(**extra):
    return {"command_generator": ["start flow weather_flow"],
            "weather_agent": [
                {"text": "Let me find where you are.",
                 "tool_calls": [{"name": "get_location", "arguments": {"precision": "city"},
                                 "id": "call_loc"}],
                 "expect": {"tools": ["echo", "task_completed", "get_location"]}},
                {"text": "It is sunny in Lyon.", "tool_calls": [{"task_completed": {}}],
                 "expect": {"messages_contain": ["Lyon, France"]}}],
            **extra}


async def test_the_run_parks_and_resumes_with_the_clients_result(project):
    async with FakeModelServer(script()) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        with anyio.fail_after(30):
            texts1, turn1 = await convo.say("weather here?")
            turn2 = await assistant.handle_client_tool_results(
                "user-1", [{"id": "call_loc", "result": "Lyon, France"}])
        fake.assert_done()
        state = await assistant.state("user-1")
    assert texts1 == ["Let me find where you are."]
    requested = next(e for e in turn1 if e["event"] == "agent_client_tool_requested")
    assert (requested["tool_name"], requested["arguments"], requested["tool_call_id"]) == (
        "get_location", {"precision": "city"}, "call_loc")
    assert "action:action_agent_request_user_input" in names(turn1)
    n2 = names(turn2)
    assert n2[0] == "client_tool_result"
    assert "user:" not in " ".join(n2)
    assert n2.index("tool:get_location") < n2.index("bot:It is sunny in Lyon.")
    assert "agent_completed:weather_agent" in n2
    assert state["stack"] == []


async def test_a_user_message_while_the_tool_is_pending_tells_the_model_not_to_call_again(
        project):
    replies = {"weather_agent": [
        {"tool_calls": [{"name": "get_location", "arguments": {}, "id": "call_loc"}]},
        {"text": "Still waiting for your location; which city are you in?",
         "expect": {"messages_contain": ["Do not call it again", "hurry up"]}}],
        "command_generator": ["start flow weather_flow", "continue agent"]}
    async with FakeModelServer(replies) as fake, assistant_for(project, fake) as assistant:
        convo = Conversation(assistant)
        await convo.say("weather here?")
        texts, _ = await convo.say("hurry up")
        fake.assert_done()
    assert texts == ["Still waiting for your location; which city are you in?"]


async def test_the_http_endpoint_delivers_results(project):
    async with FakeModelServer(script()) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base:
        async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
            await client.post("/webhooks/rest/webhook", json={"sender": "h", "message": "hi"})
            bad = await client.post("/conversations/h/client_tool_results", json={"x": 1})
            response = await client.post("/conversations/h/client_tool_results",
                                         json={"id": "call_loc", "result": "Lyon, France"})
        fake.assert_done()
    assert bad.status_code == 400
    assert response.status_code == 200
    assert response.json()[0]["text"] == "It is sunny in Lyon."


async def test_fixture_steps_deliver_results_and_assert_the_request(project, tmp_path):
    path = tmp_path / "client.yml"
    path.write_text(textwrap.dedent("""
        test_cases:
          - test_case: client_tool
            llm_script:
              command_generator: ["start flow weather_flow"]
              weather_agent:
                - text: "Let me find where you are."
                  tool_calls:
                    - {name: get_location, arguments: {precision: city}, id: call_9}
                - text: "It is sunny in Lyon."
                  tool_calls: [{task_completed: {}}]
            steps:
              - user: "weather here?"
                assertions:
                  - client_tool_requested: {tool_name: get_location,
                                            arguments: {precision: city}}
              - bot: "Let me find where you are."
              - client_tool_result: {id: call_9, result: "Lyon, France"}
              - bot: "It is sunny in Lyon."
                assertions:
                  - tool_executed: {tool_name: get_location}
                  - agent_completed: {agent_id: weather_agent}
        """).lstrip())
    loaded = load_file(path)
    assert loaded.issues == []
    async with Runner(project) as runner:
        result = await runner.run_case(loaded.cases[0])
    assert result.passed, result.failures
