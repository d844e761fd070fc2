"""One sender-id limit (255 characters) on every route and every store."""

from __future__ import annotations

import os

import anyio
import httpx2
import pytest
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.client_input import MAX_SENDER_ID_LENGTH, ClientInputError
from subagents.server.app import create_app
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")
HOURS = {"command_generator": ["start flow opening_hours"] * 2}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, pytest.mark.skipif(not POSTGRES, reason="SUBAGENTS_TEST_POSTGRES_URL "
                                             "is not set (.ci/run starts PostgreSQL)")])])
async def store(request, tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 't.db'}" if request.param == "sqlite" else POSTGRES
    sql = SQLTrackerStore(url)
    yield sql
    await sql.close()


async def test_the_longest_sender_id_works_and_one_more_is_refused(project, store):
    longest = "s" * (MAX_SENDER_ID_LENGTH - 8) + os.urandom(4).hex()
    async with FakeModelServer(HOURS) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        with anyio.fail_after(30):
            await assistant.handle_message(longest, "hours?", None, CollectingOutputChannel())
        with pytest.raises(ClientInputError) as refused:
            await assistant.handle_message(longest + "x", "hours?")
    assert [e["text"] for e in (await store.load(longest)).events if e["event"] == "user"] == [
        "hours?"]
    assert refused.value.code == "client.sender_id.too_long"


async def test_every_route_refuses_a_too_long_sender_id_with_400(project):
    too_long = "x" * (MAX_SENDER_ID_LENGTH + 1)
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        answers = [
            await client.post("/webhooks/rest/webhook", json={"sender": too_long,
                                                              "message": "hi"}),
            await client.post("/webhooks/stream/webhook", json={"sender": too_long,
                                                                "message": "hi"}),
            await client.get(f"/conversations/{too_long}/tracker"),
            await client.post(f"/conversations/{too_long}/client_tool_results",
                              json={"id": "c", "result": 1})]
    assert [a.status_code for a in answers] == [400] * 4
    assert {a.json()["code"] for a in answers} == {"client.sender_id.too_long"}
