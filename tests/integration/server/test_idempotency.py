"""A client's retry (same idempotency key) is answered from the tracker, not run again."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

HOURS = {"command_generator": ["start flow opening_hours"] * 2}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


async def test_a_retried_message_is_answered_again_without_a_second_turn(project):
    body = {"sender": "i-1", "message": "when are you open?"}
    async with FakeModelServer(HOURS) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(30):
            first = await client.post("/webhooks/rest/webhook", json=body,
                                      headers={"idempotency-key": "k-1"})
            retry = await client.post("/webhooks/rest/webhook", json=body,
                                      headers={"idempotency-key": "k-1"})
            by_body = await client.post("/webhooks/rest/webhook",
                                        json={**body, "message_id": "k-2"})
            by_body_retry = await client.post("/webhooks/rest/webhook",
                                              json={**body, "message_id": "k-2"})
            bad = await client.post("/webhooks/rest/webhook", json={**body, "message_id": 7})
        state = await assistant.state("i-1")
    assert first.status_code == 200
    assert retry.json() == first.json()
    assert by_body_retry.json() == by_body.json()
    assert "We are open 9 to 5." in [m["text"] for m in first.json()]
    users = [e for e in state["events"] if e["event"] == "user"]
    assert [u["message_id"] for u in users] == ["k-1", "k-2"]
    assert len(fake.requests_of("command_generator")) == 2
    assert (bad.status_code, bad.json()["code"]) == (400, "client.message_id.invalid")
