"""Rasa's REST channel contract over real HTTP: health route, ``?token=``, ``?stream=true``."""

from __future__ import annotations

import json

import anyio
import httpx2

from tests.integration.server.test_server import TOKEN, project, server

__all__ = ["project", "server"]  # fixtures used below

HOURS = {"command_generator": ["start flow opening_hours"]}


async def test_the_rest_channel_health_route_needs_no_token(server):
    _, _, client = await server({}, token=TOKEN)
    async with client:
        response = await client.get("/webhooks/rest/")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_the_token_may_be_a_query_parameter(server):
    fake, _, client = await server(HOURS, token=TOKEN)
    message = {"sender": "q1", "message": "hours?"}
    async with client:
        wrong = await client.post("/webhooks/rest/webhook", params={"token": "nope"},
                                  json=message)
        ok = await client.post("/webhooks/rest/webhook", params={"token": TOKEN}, json=message)
        tracker = await client.get("/conversations/q1/tracker", params={"token": TOKEN})
        no_token = await client.get("/conversations/q1/tracker")
    assert wrong.status_code == 401
    assert ok.status_code == 200
    assert ok.json()[0] == {"recipient_id": "q1", "text": "We are open 9 to 5."}
    assert tracker.status_code == 200
    assert no_token.status_code == 401
    fake.assert_done()


async def rest_stream(client: httpx2.AsyncClient, body: dict, params: dict) -> list[tuple]:
    frames = []
    async with client.stream("POST", "/webhooks/rest/webhook", json=body,
                             params=params) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                frames.append((event, json.loads(line[len("data: "):])))
    return frames


async def test_stream_true_streams_the_answer_as_server_sent_events(server):
    script = {"command_generator": ["start flow weather_flow"],
              "weather_agent": [{"text": "Sunny in Riga.",
                                 "tool_calls": [{"task_completed": {}}]}]}
    fake, _, client = await server(script, token=TOKEN)
    async with client:
        with anyio.fail_after(30):
            frames = await rest_stream(client, {"sender": "st1", "message": "weather?"},
                                       {"stream": "true", "token": TOKEN})
    kinds = [kind for kind, _ in frames]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "done"
    chunks = "".join(d["text"] for kind, d in frames if kind == "message_chunk")
    assert chunks == "Sunny in Riga."
    fake.assert_done()


async def test_stream_false_keeps_the_json_answer(server):
    fake, _, client = await server(HOURS)
    async with client:
        response = await client.post("/webhooks/rest/webhook", params={"stream": "false"},
                                     json={"sender": "st2", "message": "hours?"})
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()[0]["text"] == "We are open 9 to 5."
    fake.assert_done()
