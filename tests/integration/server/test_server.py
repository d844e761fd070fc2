"""The HTTP API over real HTTP: REST, SSE streaming, auth, bad bodies, concurrent senders."""

from __future__ import annotations

import asyncio
import json
import time

import anyio
import httpx2
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

TOKEN = "t0ps3cret"


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


async def sse_frames(client: httpx2.AsyncClient, body: dict, headers: dict | None = None):
    """POST to the stream webhook; return [(event, data, arrival_time)]."""
    frames = []
    async with client.stream("POST", "/webhooks/stream/webhook", json=body,
                             headers=headers or {}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                frames.append((event, json.loads(line[len("data: "):]), time.monotonic()))
    return frames


@pytest.fixture
async def server(project):
    async def start(script, token=None):
        fake = FakeModelServer(script)
        await fake.__aenter__()
        ctx = assistant_for(project, fake)
        assistant = await ctx.__aenter__()
        app_ctx = serve_app(create_app(assistant, token=token, max_body=10_000))
        base = await app_ctx.__aenter__()
        started.append((fake, ctx, app_ctx))
        return fake, assistant, httpx2.AsyncClient(base_url=base, timeout=30)

    started: list = []
    yield start
    for fake, ctx, app_ctx in reversed(started):
        await app_ctx.__aexit__(None, None, None)
        await ctx.__aexit__(None, None, None)
        await fake.__aexit__(None, None, None)


async def test_rest_webhook_returns_the_bot_messages(server):
    fake, _, client = await server({"command_generator": ["start flow opening_hours"]})
    async with client:
        response = await client.post("/webhooks/rest/webhook",
                                     json={"sender": "s1", "message": "hours?"})
        tracker = await client.get("/conversations/s1/tracker")
    assert response.status_code == 200
    assert response.json() == [
        {"recipient_id": "s1", "text": "We are open 9 to 5."},
        {"recipient_id": "s1", "text": "Is there anything else I can help you with?"}]
    state = tracker.json()
    assert state["stack"] == []
    assert [e["event"] for e in state["events"]][:4] == ["action", "session_started", "action",
                                                         "user"]
    fake.assert_done()


async def test_buttons_are_returned_in_the_rest_contract(server):
    script = {"command_generator": ["start flow weather_flow", "start flow opening_hours"],
              "weather_agent": ["Which city?"]}
    _, _, client = await server(script)
    async with client:
        await client.post("/webhooks/rest/webhook", json={"sender": "b", "message": "weather"})
        response = await client.post("/webhooks/rest/webhook",
                                     json={"sender": "b", "message": "hours?"})
    question = response.json()[-1]
    assert question["text"] == "Shall we pick up where we left off before?"
    assert [b["payload"] for b in question["buttons"]] == [
        "/SetSlots(continue_interrupted_flow_confirmation=true)",
        "/SetSlots(continue_interrupted_flow_confirmation=false)"]


async def test_sse_streams_the_filler_before_the_tool_starts(server):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [
                  {"text": "Let me check that for you.",
                   "tool_calls": [{"timed_read": {"label": "w", "ms": 50}}]},
                  {"text": "Sunny.", "tool_calls": [{"task_completed": {}}]}]}
    fake, _, client = await server(script)
    async with client:
        with anyio.fail_after(30):
            frames = await sse_frames(client, {"sender": "s2", "message": "weather?"})
    kinds = [f[0] for f in frames]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "done"
    first_end = kinds.index("message_end")
    chunks = [f for f in frames[:first_end] if f[0] == "message_chunk"]
    assert "".join(f[1]["text"] for f in chunks) == "Let me check that for you."
    tool = next(f for f in frames if f[0] == "tool")
    tool_started = float(tool[1]["result"].split()[1])
    assert chunks[0][2] < tool_started  # the first filler chunk arrived before the tool ran
    assert kinds.index("tool") > first_end
    whole = [f[1]["text"] for f in frames if f[0] == "message"]
    assert whole == ["Anything else about the weather?",
                     "Is there anything else I can help you with?"]
    fake.assert_done()


async def test_slot_events_are_streamed(server):
    script = {"command_generator": ["start flow booking_flow"],
              "booking_agent": [{"tool_calls": [{"set_slot_city": {"slot_value": "Riga"}}]}]}
    _, _, client = await server(script)
    async with client:
        frames = await sse_frames(client, {"sender": "s3", "message": "book in Riga"})
    assert ("slot", {"name": "city", "value": "Riga"}) in [(f[0], f[1]) for f in frames]


async def test_the_token_is_required_everywhere_but_health(server):
    _, _, client = await server({}, token=TOKEN)
    good = {"authorization": f"Bearer {TOKEN}"}
    async with client:
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/version")).status_code == 401
        assert (await client.get("/version", headers={"authorization": "Bearer nope"})
                ).status_code == 401
        assert (await client.post("/webhooks/rest/webhook", json={"sender": "a",
                                                                  "message": "/x"})
                ).status_code == 401
        assert (await client.get("/conversations/a/tracker")).status_code == 401
        version = await client.get("/version", headers=good)
        ok = await client.post("/webhooks/rest/webhook", headers=good,
                               json={"sender": "a", "message": "/opening_hours"})
    assert version.json()["version"]
    assert ok.status_code == 200


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"message": "hi"}', 400, "'sender'"),
    (b'{"sender": "x", "message": 5}', 400, "'message'"),
    (b'{"sender": "x", "message": "hi", "metadata": []}', 400, "'metadata'"),
    (b'{"sender": "x", "message": "' + b"a" * 20_000 + b'"}', 413, "larger than"),
])
async def test_bad_bodies_get_clear_errors(server, body, status, message):
    _, _, client = await server({})
    async with client:
        for route in ("/webhooks/rest/webhook", "/webhooks/stream/webhook"):
            response = await client.post(route, content=body,
                                         headers={"content-type": "application/json"})
            assert response.status_code == status
            assert message in response.json()["error"]


async def test_client_tool_results_need_an_id_and_a_result(server):
    _, _, client = await server({})
    async with client:
        response = await client.post("/conversations/a/client_tool_results", json={})
    assert response.status_code == 400
    assert "tool call id" in response.json()["error"]


async def test_concurrent_senders_each_get_their_own_conversation(server):
    senders = [f"user-{i}" for i in range(8)]
    script = {"command_generator": [{"text": "start flow opening_hours", "delay_ms": 50}]
              * len(senders)}
    fake, assistant, client = await server(script)
    async with client:
        with anyio.fail_after(30):
            responses = await asyncio.gather(*(
                client.post("/webhooks/rest/webhook", json={"sender": s, "message": "hours"})
                for s in senders))
    assert all(r.json()[0]["recipient_id"] == s for r, s in zip(responses, senders, strict=True))
    for sender in senders:
        events = await assistant.tracker(sender)
        assert [e["text"] for e in events if e["event"] == "user"] == ["hours"]
    fake.assert_done()
