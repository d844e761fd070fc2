"""Model-side faults end in a defined reply: a malformed or failing command-generator reply
tells the user the model is unavailable and records the message; every turn has a deadline
that also caps the SDK's retry waits."""

from __future__ import annotations

import contextlib
import textwrap
import time

import anyio
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.client_input import TurnFailedError
from subagents.dialogue.processor import Assistant
from subagents.llm import LLMClient
from subagents.server.app import create_app
from subagents.stores import InMemoryTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

UNAVAILABLE = "Sorry, I can't reach my language model right now. Please try again in a moment."


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@contextlib.asynccontextmanager
async def broken_model(response: Response):
    """A tiny chat-completions endpoint that always answers ``response``."""
    calls: list[float] = []

    async def completions(request: Request) -> Response:
        calls.append(time.monotonic())
        return response

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with serve_app(app) as base:
        yield f"{base}/v1", calls


@contextlib.asynccontextmanager
async def routed_assistant(project, fake, url, **kw):
    assistant = Assistant.load(project, llm_factory=routed(fake, url, kw.pop("max_retries", 0)),
                               retry_delays=(0.0,), tracker_store=InMemoryTrackerStore(), **kw)
    async with assistant:
        yield assistant


def routed(fake: FakeModelServer, command_generator_url: str, max_retries: int = 0):
    """The command generator talks to ``command_generator_url``, agents to the fake."""
    def factory(caller, settings):
        settings.api_base = (command_generator_url if caller == "command_generator"
                             else fake.base_url(caller))
        settings.api_key = None
        settings.max_retries = max_retries
        return LLMClient(settings, name=caller)
    return factory


@pytest.mark.parametrize("response", [
    Response(b"certainly not json", media_type="application/json"),
    JSONResponse({"choices": "nope"}),
    JSONResponse({"choices": [{"message": 7}]}),
    JSONResponse({"error": {"message": "overloaded"}}, status_code=503),
], ids=["garbage", "choices-not-a-list", "message-not-an-object", "http-503"])
async def test_a_broken_command_generator_reply_tells_the_user_and_records_the_message(
        project, response):
    async with FakeModelServer({}) as fake, broken_model(response) as (url, _), \
            routed_assistant(project, fake, url) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(30):
            answer = await client.post("/webhooks/rest/webhook",
                                       json={"sender": "m-1", "message": "hello there"})
        state = await assistant.state("m-1")
    assert answer.status_code == 200
    assert [m["text"] for m in answer.json()] == [UNAVAILABLE]
    users = [e["text"] for e in state["events"] if e["event"] == "user"]
    assert users == ["hello there"]
    assert state["stack"] == []


async def test_an_agent_waiting_for_input_is_left_as_it_was(project):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": ["Which city?"]}
    async with FakeModelServer(script) as fake, \
            broken_model(JSONResponse({}, status_code=500)) as (url, _), \
            assistant_for(project, fake) as assistant:
        await assistant.handle_message("w-1", "weather?", None, CollectingOutputChannel())
        before = (await assistant.state("w-1"))["stack"]
        assistant.understanding.llm = routed(fake, url)("command_generator",
                                                        assistant.command_llm.settings)
        channel = CollectingOutputChannel()
        with anyio.fail_after(30):
            await assistant.handle_message("w-1", "Oslo", None, channel)
        after = (await assistant.state("w-1"))["stack"]
        await assistant.understanding.llm.close()
    assert channel.texts == [UNAVAILABLE]
    assert after == before


async def test_retry_after_waits_are_capped_by_the_turn_deadline(project):
    slow_down = JSONResponse({"error": {"message": "slow down"}}, status_code=429,
                             headers={"retry-after": "50"})
    async with FakeModelServer({}) as fake, broken_model(slow_down) as (url, calls), \
            routed_assistant(project, fake, url, max_retries=3, turn_timeout=5) as assistant:
        channel = CollectingOutputChannel()
        with anyio.fail_after(20):  # far below the 50 s the endpoint asked to wait
            await assistant.handle_message("r-1", "hello", None, channel)
    assert channel.texts == [UNAVAILABLE]
    assert len(calls) == 1  # the wait before the retry was cut short by the deadline


async def test_an_agent_without_its_own_timeout_is_bounded_by_the_turn_deadline(project):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"tool_calls": [{"slow": {"seconds": 60}}]}, "Done."]}
    agent = """
        agent: {name: weather_agent, description: Tells the weather.}
        configuration: {include_date_time: false, tools: {slow: {timeout: 600}}}
        connections:
          mcp_servers: [{name: tools, include_tools: [slow]}]
        """
    (project / "sub_agents/weather/config.yml").write_text(textwrap.dedent(agent))
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, turn_timeout=6) as assistant:
        channel = CollectingOutputChannel()
        with anyio.fail_after(30), pytest.raises(TurnFailedError) as failed:
            await assistant.handle_message("t-1", "weather?", None, channel)
        state = await assistant.state("t-1")
    assert failed.value.cause_code == "dialogue.turn_deadline"
    assert channel.texts[-1] == assistant.internal_error_text()
    assert state["events"] == []


@pytest.mark.parametrize("response", [
    Response(b"<html>bad gateway</html>", media_type="application/json"),
    JSONResponse({"choices": [{"message": {"tool_calls": "x"}}]}),
], ids=["garbage", "tool-calls-not-a-list"])
async def test_a_broken_agent_model_reply_ends_in_the_internal_error_pattern(project, response):
    def factory(caller, settings):
        settings.api_base = url if caller == "weather_agent" else fake.base_url(caller)
        settings.api_key = None
        settings.max_retries = 0
        return LLMClient(settings, name=caller)

    async with FakeModelServer({"command_generator": ["start flow weather_flow"]}) as fake, \
            broken_model(response) as (url, calls):
        assistant = Assistant.load(project, llm_factory=factory, retry_delays=(0.0,),
                                   tracker_store=InMemoryTrackerStore())
        async with assistant, serve_app(create_app(assistant)) as base, \
                httpx2.AsyncClient(base_url=base, timeout=30) as client:
            with anyio.fail_after(60):
                answer = await client.post("/webhooks/rest/webhook",
                                           json={"sender": "a-1", "message": "weather?"})
            state = await assistant.state("a-1")
    assert answer.status_code == 200
    assert calls  # the agent did call its (broken) model
    assert assistant.internal_error_text() in [m["text"] for m in answer.json()]
    assert [e["text"] for e in state["events"] if e["event"] == "user"] == ["weather?"]
