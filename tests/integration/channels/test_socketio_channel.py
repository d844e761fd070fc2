"""The Socket.IO channel at the wire: a real python-socketio client against the served app (and
against ``subagents serve`` reading credentials.yml), speaking the web widgets' protocol."""

from __future__ import annotations

import asyncio
import socket
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest
import socketio
from subagents.channels.socketio import SocketIOInput
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

FILLER_SCRIPT = {
    "command_generator": ["start flow weather_flow"],
    "weather_agent": [
        {"text": "Let me check that for you.",
         "tool_calls": [{"timed_read": {"label": "w", "ms": 50}}]},
        {"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}]}


KEY = "k" * 40


class Widget:
    """A Socket.IO client that records what the server emits, with arrival times."""

    def __init__(self, user_evt: str = "user_uttered", bot_evt: str = "bot_uttered") -> None:
        self.client = socketio.AsyncClient(reconnection=False)
        self.user_evt = user_evt
        self.received: asyncio.Queue[tuple[str, Any, float]] = asyncio.Queue()
        self.session_id: str | None = None
        for event in (bot_evt, "session_confirm", "client_tool_request"):
            self.client.on(event, self._recorder(event))

    def _recorder(self, event: str) -> Any:
        async def record(data: Any = None) -> None:
            await self.received.put((event, data, time.monotonic()))
        return record

    async def connect(self, url: str, *, session_id: str | None = None,
                      auth: dict[str, Any] | None = None) -> str:
        await self.client.connect(url, socketio_path="/socket.io", transports=["websocket"],
                                  auth=auth, wait_timeout=10)
        await self.client.emit("session_request", {"session_id": session_id})
        event, data, _ = await self.next()
        assert event == "session_confirm"
        self.session_id = data
        return str(data)

    async def say(self, text: str, **extra: Any) -> None:
        await self.client.emit(self.user_evt, {"message": text, "session_id": self.session_id,
                                               **extra})

    async def next(self) -> tuple[str, Any, float]:
        with anyio.fail_after(30):
            return await self.received.get()

    async def messages(self, count: int) -> list[tuple[str, Any, float]]:
        return [await self.next() for _ in range(count)]


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@pytest.fixture
async def served(project) -> AsyncIterator[Any]:
    started: list[Any] = []

    async def start(script: dict[str, Any], channel: SocketIOInput | None = None,
                    root: Path | None = None) -> tuple[FakeModelServer, Any, str]:
        fake = FakeModelServer(script)
        await fake.__aenter__()
        started.append(fake)
        ctx = assistant_for(root or project, fake)
        assistant = await ctx.__aenter__()
        started.append(ctx)
        app = create_app(assistant, channels=[channel or SocketIOInput()])
        app_ctx = serve_app(app)
        base = await app_ctx.__aenter__()
        started.append(app_ctx)
        return fake, assistant, base

    yield start
    for ctx in reversed(started):
        await ctx.__aexit__(None, None, None)


async def test_session_request_is_confirmed_with_a_new_or_an_issued_id(served):
    _, _, base = await served({})
    first, second, third = Widget(), Widget(), Widget()
    try:
        new_id = await first.connect(base)
        again = await second.connect(base, session_id=new_id)
        chosen = await third.connect(base, session_id="abc123")
    finally:
        for widget in (first, second, third):
            await widget.client.disconnect()
    assert isinstance(new_id, str)
    assert len(new_id) == 32
    assert again == new_id  # an id the server issued is kept
    assert len(chosen) == 32  # one it did not issue is replaced


async def test_the_filler_reaches_the_widget_before_the_tool_runs(served):
    fake, _, base = await served(FILLER_SCRIPT)
    widget = Widget()
    await widget.connect(base)
    try:
        await widget.say("weather?")
        received = await widget.messages(4)
    finally:
        await widget.client.disconnect()
    assert [data for _, data, _ in received] == [
        {"text": "Let me check that for you."}, {"text": "Sunny."},
        {"text": "Anything else about the weather?"},
        {"text": "Is there anything else I can help you with?"}]
    assert all(event == "bot_uttered" for event, _, _ in received)
    fake.assert_done()
    request = fake.requests_of("weather_agent")[1]
    tool_result = next(m["content"] for m in request.messages if m["role"] == "tool")
    tool_started = float(str(tool_result).split()[1])
    assert received[0][2] < tool_started  # the filler arrived before the tool started


async def test_buttons_become_quick_replies(served):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours"],
              "weather_agent": ["Which city?"]}
    _, _, base = await served(script)
    widget = Widget()
    await widget.connect(base)
    try:
        await widget.say("weather")
        await widget.next()
        await widget.say("hours?")
        while "quick_replies" not in (question := (await widget.next())[1]):
            pass
    finally:
        await widget.client.disconnect()
    assert question["text"] == "Shall we pick up where we left off before?"
    assert [r["payload"] for r in question["quick_replies"]] == [
        "/SetSlots(continue_interrupted_flow_confirmation=true)",
        "/SetSlots(continue_interrupted_flow_confirmation=false)"]
    assert {r["content_type"] for r in question["quick_replies"]} == {"text"}


async def test_a_persistent_session_survives_a_reconnect_and_keeps_metadata(served):
    script = {"command_generator": ["start flow weather_flow", ""],
              "weather_agent": ["Which city?", {"text": "Sunny in Oslo.",
                                                "tool_calls": [{"task_completed": {}}]}]}
    channel = SocketIOInput("user_says", "bot_says", session_persistence=True,
                            metadata_key="customData")
    _, assistant, base = await served(script, channel)
    first = Widget("user_says", "bot_says")
    session = await first.connect(base)
    await first.say("weather", customData={"language": "nb"})
    assert (await first.next())[1] == {"text": "Which city?"}
    await first.client.disconnect()

    again = Widget("user_says", "bot_says")
    assert await again.connect(base, session_id=session) == session
    try:
        await again.say("Oslo")
        received = await again.messages(2)
    finally:
        await again.client.disconnect()
    assert received[0][1] == {"text": "Sunny in Oslo."}
    state = await assistant.state(f"socketio:{session}")
    users = [e for e in state["events"] if e["event"] == "user"]
    assert [u["text"] for u in users] == ["weather", "Oslo"]
    assert users[0]["metadata"]["language"] == "nb"


async def test_without_persistence_each_socket_is_its_own_conversation(served):
    script = {"command_generator": ["start flow opening_hours", "start flow opening_hours"]}
    _, assistant, base = await served(script)
    one, two = Widget(), Widget()
    await one.connect(base, session_id="shared")
    await two.connect(base, session_id="shared")
    try:
        await one.say("hours?")
        await one.messages(2)
        await two.say("hours?")
        await two.messages(2)
    finally:
        await one.client.disconnect()
        await two.client.disconnect()
    assert one.received.empty()  # the other socket's answers did not reach this one
    assert (await assistant.state("shared"))["events"] == []


async def test_client_executed_tools_go_through_the_socket(served, tmp_path, tools_url):
    from tests.integration.agents.test_client_tools import CLIENT_AGENT, script

    root = write_project(tmp_path / "client", tools_url,
                         extra={"sub_agents/weather/config.yml": CLIENT_AGENT})
    fake, _, base = await served(script(), root=root)
    widget = Widget()
    await widget.connect(base)
    try:
        await widget.say("weather here?")
        filler, request = await widget.messages(2)
        assert filler[1] == {"text": "Let me find where you are."}
        assert request[0] == "client_tool_request"
        assert request[1] == {"id": "call_loc", "name": "get_location",
                              "arguments": {"precision": "city"}}
        await widget.client.emit("client_tool_result", {
            "session_id": widget.session_id, "id": "call_loc", "result": "Lyon, France"})
        answers = await widget.messages(2)
    finally:
        await widget.client.disconnect()
    assert answers[0][1] == {"text": "It is sunny in Lyon."}
    fake.assert_done()


async def test_an_approval_is_asked_and_answered_through_the_socket(served, tmp_path,
                                                                   tools_url):
    agent = """
        agent: {name: weather_agent, description: Tells the weather.}
        configuration:
          include_date_time: false
          tools: {timed_write: {requires_approval: true}}
        connections:
          mcp_servers: [{name: tools, include_tools: [timed_write]}]
        """
    root = write_project(tmp_path / "approval", tools_url,
                         extra={"sub_agents/weather/config.yml": agent})
    script = {"command_generator": ["start flow weather_flow", ""],
              "weather_agent": [
                  {"text": "", "tool_calls": [{"timed_write": {"label": "x", "ms": 1}}]},
                  {"text": "Saved.", "tool_calls": [{"task_completed": {}}]}]}
    fake, _, base = await served(script, root=root)
    widget = Widget()
    await widget.connect(base)
    try:
        await widget.say("save it")
        question = await widget.next()
        assert "timed_write" in question[1]["text"]
        await widget.say("yes")
        answers = await widget.messages(2)
    finally:
        await widget.client.disconnect()
    assert answers[0][1] == {"text": "Saved."}
    fake.assert_done()
    assert fake.requests_of("weather_agent")[1].messages[-1]["role"] == "tool"


async def test_with_a_jwt_key_only_signed_clients_connect(served):
    channel = SocketIOInput(jwt_key=KEY, jwt_method="HS256")
    _, _, base = await served({}, channel)
    stranger = Widget()
    with pytest.raises(socketio.exceptions.ConnectionError):
        await stranger.client.connect(base, transports=["websocket"], wait_timeout=10)
    forged = Widget()
    with pytest.raises(socketio.exceptions.ConnectionError):
        await forged.client.connect(base, transports=["websocket"], wait_timeout=10,
                                    auth={"token": jwt.encode({"sub": "u"}, "w" * 40)})
    member = Widget()
    token = jwt.encode({"sub": "u"}, KEY, algorithm="HS256")
    try:
        assert await member.connect(base, auth={"token": token})
    finally:
        await member.client.disconnect()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_serve_opens_the_channels_of_credentials_yml(tmp_path, tools_url):
    async with FakeModelServer(FILLER_SCRIPT) as fake:
        root = write_project(tmp_path / "served", tools_url, extra={
            "endpoints.yml": f"""
                model_groups:
                  - id: llm
                    models: [{{model: fake, api_base: "{fake.base_url('command_generator')}"}}]
                  - id: agents
                    models: [{{model: fake, api_base: "{fake.base_url('weather_agent')}"}}]
                mcp_servers: [{{name: tools, type: http, url: "{tools_url}"}}]
                tracker_store: {{type: memory}}
                """,
            "sub_agents/weather/config.yml": """
                agent: {name: weather_agent, description: Tells the weather.}
                configuration: {include_date_time: false, llm: {model_group: agents}}
                connections:
                  mcp_servers: [{name: tools, include_tools: [echo, timed_read]}]
                """})
        (root / "credentials.yml").write_text(textwrap.dedent("""
            rest:
            socketio:
              user_message_evt: user_uttered
              bot_message_evt: bot_uttered
              session_persistence: true
            """))
        port = _free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root), "--port",
            str(port), stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        widget = Widget()
        try:
            with anyio.fail_after(60):
                while True:
                    line = await proc.stderr.readline()
                    assert line, "the server exited before it was ready"
                    if b"subagents: serving on" in line:
                        break
            await widget.connect(f"http://127.0.0.1:{port}", session_id="from-cli")
            await widget.say("weather?")
            received = await widget.messages(4)
        finally:
            await widget.client.disconnect()
            proc.terminate()
            with anyio.fail_after(30):
                await proc.wait()
    assert [data["text"] for _, data, _ in received] == [
        "Let me check that for you.", "Sunny.", "Anything else about the weather?",
        "Is there anything else I can help you with?"]


async def test_stopping_the_server_lets_a_socket_turn_finish(project, tools_url):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"text": "Done despite the shutdown.", "delay_ms": 300,
                                 "tool_calls": [{"task_completed": {}}]}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        widget = Widget()
        async with serve_app(create_app(assistant, channels=[SocketIOInput()])) as base:
            await widget.connect(base)
            sender = f"socketio:{widget.client.get_sid()}"
            await widget.say("weather?")
            with anyio.fail_after(30):
                await fake.wait_for_requests(1, "weather_agent")
            await widget.client.disconnect()
        # the server has stopped: the turn it was running was finished first
        events = (await assistant.state(sender))["events"]
    assert next(e["text"] for e in events if e["event"] == "bot") == "Done despite the shutdown."
