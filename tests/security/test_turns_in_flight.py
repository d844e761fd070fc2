"""Issue 30, item 9: beyond ``SUBAGENTS_MAX_TURNS_IN_FLIGHT`` turns running in a worker, a new
one is answered 503 with ``Retry-After`` at once (REST, streaming, A2A), and ``/health`` keeps
answering; the turns already running finish."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from subagents.testing import FakeModelServer

from tests.security.a2a_rpc import message, rpc
from tests.security.served import served, served_project

SLOW = {"text": "start flow opening_hours", "delay_ms": 2500}


async def test_turns_beyond_the_cap_get_503_with_retry_after(tmp_path, tools_url):
    pytest.importorskip("a2a")
    async with FakeModelServer({"command_generator": [SLOW, SLOW]}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project, "--a2a", "weather_agent",
                          env={"SUBAGENTS_MAX_TURNS_IN_FLIGHT": "2"}) as (_, client):
            running = [asyncio.ensure_future(client.post("/webhooks/rest/webhook", json={
                "sender": f"busy-{n}", "message": "hours?"})) for n in range(2)]
            with anyio.fail_after(30):
                await fake.wait_for_requests(2, "command_generator")
            refused = await client.post("/webhooks/rest/webhook",
                                        json={"sender": "third", "message": "hours?"})
            streamed = await client.post("/webhooks/stream/webhook",
                                         json={"sender": "fourth", "message": "hours?"})
            a2a = await rpc(client, "SendMessage", {"message": message("weather?")})
            health = await client.get("/health")
            with anyio.fail_after(30):
                finished = await asyncio.gather(*running)
            tracker = await client.get("/conversations/third/tracker")
    for reply in (refused, streamed, a2a):
        assert reply.status_code == 503, reply.text
        assert int(reply.headers["retry-after"]) >= 1
    assert refused.json()["code"] == "server.busy"
    assert health.status_code == 200
    assert [r.status_code for r in finished] == [200, 200]
    assert tracker.json()["events"] == []  # the refused turn left nothing behind
    assert len(fake.requests) == 2
