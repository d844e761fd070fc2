"""Recording one conversation is a property of the conversation, not of a server process.

The switch (``PUT``/``DELETE /conversations/{sender}/recording``) is stored with the tracker, so
every worker sharing the tracker store records the conversation, a restart keeps it, and no
process keeps anything per conversation.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from subagents.recording import turn as recording
from subagents.server.app import create_app
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project
from tests.integration.recording.test_record_replay import REPO, SCRIPT, _cli, _example_project
from tests.serve_process import ServeProcess, example_insurer, free_port, serve_process

POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")
REDIS = os.environ.get("SUBAGENTS_TEST_REDIS_URL")
SERVICES = pytest.mark.skipif(not (POSTGRES and REDIS), reason=(
    "needs SUBAGENTS_TEST_POSTGRES_URL and SUBAGENTS_TEST_REDIS_URL: "
    'eval "$(bash .ci/services.sh)" starts both'))

TURN = [
    {"text": "Checking.", "tool_calls": [{"echo": {"text": "Riga"}}]},
    {"text": "Sunny in Riga.", "tool_calls": [{"task_completed": {}}]},
]


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@pytest.fixture(autouse=True)
def _recording_off():
    recording.reset()
    yield
    recording.reset()


def _closing_listens(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == "action" and e.get("name") == "action_listen"
            and not recording.is_switch_event(e)]


async def test_the_switch_is_stored_with_the_conversation_for_every_assistant(project, tmp_path):
    """Two assistants over one SQLite tracker store: either may switch, both record."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}"
    script = {"command_generator": ["start flow weather_flow"] * 3, "weather_agent": TURN * 3}
    async with FakeModelServer(script) as fake, \
            assistant_for(project, fake, tracker_store=SQLTrackerStore(url)) as first, \
            assistant_for(project, fake, tracker_store=SQLTrackerStore(url)) as second, \
            serve_app(create_app(first)) as api_one, serve_app(create_app(second)) as api_two, \
            httpx2.AsyncClient(timeout=30) as client:
        with anyio.fail_after(60):
            turned_on = (await client.put(f"{api_one}/conversations/c1/recording")).json()
            told = (await client.get(f"{api_two}/conversations/c1/recording")).json()
            await second.handle_message("c1", "weather?")
            await first.handle_message("c1", "weather?")
            exported = await client.get(f"{api_two}/conversations/c1/test")
            turned_off = (await client.delete(f"{api_two}/conversations/c1/recording")).json()
            await first.handle_message("c1", "weather?")
            events = await second.tracker("c1")
        fake.assert_done()
    assert turned_on == told == {"sender": "c1", "recording": True}
    assert turned_off == {"sender": "c1", "recording": False}
    assert exported.status_code == 200, exported.text
    assert exported.text.count("user: weather?") == 2
    closing = _closing_listens(events)
    assert [recording.METADATA_KEY in (e.get("metadata") or {}) for e in closing] == [
        True, True, False]
    # the two switches are the only extra events, and they stay readable as Rasa events
    switches = [e for e in events if recording.is_switch_event(e)]
    assert [e["metadata"][recording.SWITCH_KEY] for e in switches] == [True, False]
    assert {e["name"] for e in switches} == {"action_listen"}


async def test_switching_to_the_current_state_stores_nothing(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as api, httpx2.AsyncClient(base_url=api) as client:
        with anyio.fail_after(30):
            for _ in range(3):
                await client.put("/conversations/c1/recording")
            await client.delete("/conversations/never-recorded/recording")
            stored = await assistant.tracker("c1")
            untouched = await assistant.tracker("never-recorded")
    assert [e["metadata"] for e in stored] == [{recording.SWITCH_KEY: True}]
    assert untouched == []


def _string_holders(values: set[str]) -> list[str]:
    """Module-level containers of ``subagents`` modules that hold any of ``values``."""
    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("subagents") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if _holds(value, values, depth=3):
                found.append(f"{name}.{attr}")
    return found


def _holds(value: Any, values: set[str], depth: int) -> bool:
    if isinstance(value, str):
        return value in values
    if depth == 0:
        return False
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (set, frozenset, list, tuple)):
        items = list(value)
    else:
        return False
    return any(_holds(item, values, depth - 1) for item in items)


async def test_recording_many_conversations_leaves_no_state_in_the_process(project):
    """The switch lives in the tracker: a process keeps nothing per recorded conversation."""
    senders = {f"many-{n}" for n in range(40)}
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as api, httpx2.AsyncClient(base_url=api) as client:
        with anyio.fail_after(60):
            for sender in sorted(senders):
                await client.put(f"/conversations/{sender}/recording")
            recorded_held = _string_holders(senders)
            for sender in sorted(senders)[::2]:
                await client.delete(f"/conversations/{sender}/recording")
            answers = [(await client.get(f"/conversations/{s}/recording")).json()["recording"]
                       for s in sorted(senders)]
            after_off = _string_holders(senders)
    assert recorded_held == []
    assert after_off == []
    assert answers == [n % 2 == 1 for n in range(len(senders))]


# ------------------------------------------------------------------ two `serve` workers
def _shared_project(root: Path, models: str) -> Path:
    """The example assistant on PostgreSQL (trackers) and Redis (turn locks)."""
    root.mkdir(parents=True)
    _example_project(root, models)
    endpoints = (root / "endpoints.yml").read_text()
    endpoints = endpoints.replace("url: sqlite+aiosqlite:///.subagents/tracker.db",
                                  f"url: {POSTGRES}")
    assert str(POSTGRES) in endpoints
    (root / "endpoints.yml").write_text(
        endpoints + f"\nlock_store:\n  type: redis\n  url: {REDIS}\n")
    return root


async def _say(client: httpx2.AsyncClient, worker: ServeProcess, sender: str) -> list[str]:
    reply = await client.post(f"{worker.url}/webhooks/rest/webhook",
                              json={"sender": sender, "message": "How is Acme?"})
    assert reply.status_code == 200, reply.text + worker.log()
    return [str(m.get("text")) for m in reply.json()]


@SERVICES
@pytest.mark.postgres
@pytest.mark.redis
async def test_a_conversation_recorded_through_one_worker_is_recorded_by_all(tmp_path):
    sender = f"shared-{uuid.uuid4().hex[:8]}"  # the database outlives the test
    turns = 3
    script = {name: replies * turns for name, replies in SCRIPT.items()}
    env = {"OPENAI_API_KEY": "unused-by-the-fake-model"}
    async with FakeModelServer(script) as fake, example_insurer() as insurer:
        env.update(insurer)
        models = fake.base_url("x").rsplit("/x", 1)[0]
        project = _shared_project(tmp_path / "assistant", models)
        async with httpx2.AsyncClient(timeout=60) as client, \
                serve_process(project, env=env) as first:
            async with serve_process(project, env=env) as second:
                with anyio.fail_after(120):
                    switched = await client.put(
                        f"{second.url}/conversations/{sender}/recording")
                    told = await client.get(f"{first.url}/conversations/{sender}/recording")
                    replies = [await _say(client, first, sender),
                               await _say(client, second, sender)]
            # the worker that was switched on is gone; a restarted one still records
            async with serve_process(project, env=env) as restarted:
                with anyio.fail_after(60):
                    replies.append(await _say(client, restarted, sender))
        fake.assert_done()
    assert switched.json() == told.json() == {"sender": sender, "recording": True}
    assert all("Acme trades at 182.40 USD." in texts for texts in replies), replies

    out = project / "tests" / "e2e" / "recorded.yml"
    exported = await anyio.to_thread.run_sync(
        lambda: _cli("test", "export", sender, "--project", str(project), "--out", str(out),
                     cwd=tmp_path))
    assert exported.returncode == 0, exported.stderr
    assert out.read_text().count("user: How is Acme?") == turns

    # offline: no model answers, the MCP servers cannot start
    endpoints = (project / "endpoints.yml").read_text()
    (project / "endpoints.yml").write_text(endpoints.replace(
        models, f"http://127.0.0.1:{free_port()}").replace(
        "command: python", "command: no-such-mcp-server-binary"))
    replay = await anyio.to_thread.run_sync(
        lambda: _cli("test", str(out), "--project", str(project), cwd=tmp_path))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "1 passed" in replay.stdout


# ------------------------------------------------------------------ subagents inspect --record
async def test_inspect_record_records_every_conversation(tmp_path):
    project = tmp_path / "assistant"
    project.mkdir()
    env = {"OPENAI_API_KEY": "unused-by-the-fake-model"}
    async with FakeModelServer(SCRIPT) as fake, example_insurer() as insurer:
        env.update(insurer)
        _example_project(project, fake.base_url("x").rsplit("/x", 1)[0])
        async with serve_process(project, "--record", env=env, command="inspect") as server, \
                httpx2.AsyncClient(base_url=server.url, timeout=60) as client:
            with anyio.fail_after(60):
                told = (await client.get("/conversations/insp1/recording")).json()
                replies = await _say(client, server, "insp1")
                exported = await client.get("/conversations/insp1/test")
        fake.assert_done()
    assert told == {"sender": "insp1", "recording": True}
    assert "Acme trades at 182.40 USD." in replies
    assert exported.status_code == 200, exported.text
    assert "get_stock_price" in exported.text


def test_inspect_help_offers_record():
    shown = _cli("inspect", "--help", cwd=REPO)
    assert shown.returncode == 0, shown.stderr
    assert "--record" in shown.stdout
    assert "subagents inspect --record" in shown.stdout
