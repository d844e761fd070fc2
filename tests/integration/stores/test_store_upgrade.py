"""A database written by the version before snapshots keeps working after the upgrade.

The tables are created with that version's schema (no ``state`` or ``window_start`` column) and
filled with that version's writes: one row per conversation (stack, event count), one row per
event. The store adds the columns when it starts; each old conversation's first turn loads its
events whole and writes the snapshot; later turns load the snapshot and the window.

PostgreSQL tests need SUBAGENTS_TEST_POSTGRES_URL (`.ci/run` starts PostgreSQL).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.processor import Assistant
from subagents.recording import turn as recording
from subagents.stores import InMemoryTrackerStore
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer

from tests.dialogue_harness import write_project

POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")
needs_postgres = pytest.mark.skipif(
    not POSTGRES, reason="SUBAGENTS_TEST_POSTGRES_URL is not set (.ci/run starts PostgreSQL)")
HOURS_TURNS = 30


def old_schema() -> sa.MetaData:
    """The tables as the version before snapshots declared them."""
    meta = sa.MetaData()
    sa.Table("subagents_conversations", meta,
             sa.Column("sender_id", sa.String(255), primary_key=True),
             sa.Column("stack", sa.Text, nullable=False),
             sa.Column("event_count", sa.Integer, nullable=False),
             sa.Column("updated_at", sa.Float, nullable=False))
    sa.Table("subagents_events", meta,
             sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
             sa.Column("sender_id", sa.String(255), nullable=False, index=True),
             sa.Column("seq", sa.Integer, nullable=False),
             sa.Column("data", sa.Text, nullable=False),
             sa.UniqueConstraint("sender_id", "seq"))
    return meta


async def write_as_the_old_version(url: str, sender: str, events: list[dict[str, Any]],
                                   connect_args: dict[str, Any]) -> None:
    engine = create_async_engine(url, connect_args=connect_args)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(old_schema().create_all)
            await conn.execute(sa.text(
                "INSERT INTO subagents_conversations (sender_id, stack, event_count, updated_at) "
                "VALUES (:sender, :stack, :count, :now)"),
                {"sender": sender, "stack": "[]", "count": len(events), "now": time.time()})
            await conn.execute(sa.text(
                "INSERT INTO subagents_events (sender_id, seq, data) VALUES (:s, :seq, :data)"),
                [{"s": sender, "seq": i, "data": json.dumps(e)} for i, e in enumerate(events)])
    finally:
        await engine.dispose()


async def columns(url: str, connect_args: dict[str, Any]) -> set[str]:
    engine = create_async_engine(url, connect_args=connect_args)
    try:
        async with engine.connect() as conn:
            found = await conn.run_sync(lambda c: sa.inspect(c).get_columns(
                "subagents_conversations"))
    finally:
        await engine.dispose()
    return {c["name"] for c in found}


async def say(assistant: Assistant, sender: str, text: str) -> tuple[list[str], list[Any]]:
    channel = CollectingOutputChannel()
    events = await assistant.handle_message(sender, text, None, channel)
    return channel.texts, events


@pytest.fixture
def project(tmp_path):
    return write_project(tmp_path / "assistant", "http://127.0.0.1:9/mcp", extra={
        "sub_agents/weather/config.yml": None, "sub_agents/booking/config.yml": None,
        "sub_agents/flaky/config.yml": None, "sub_agents/quitter/config.yml": None,
        "sub_agents/flaky/agent.py": None, "sub_agents/flaky/__init__.py": None,
        "data/flows.yml": """
            flows:
              ask_name:
                description: asks a name and greets
                steps:
                  - collect: name
                    reset_after_flow_ends: false
                  - action: utter_greet
              hidden_flow:
                if: slots.name is not null
                description: only once a name is known
                steps:
                  - action: utter_greet
              opening_hours:
                description: opening hours
                steps:
                  - action: utter_hours
            """})


async def old_conversation(project, sender: str) -> list[dict[str, Any]]:
    """A long conversation: a name given early, recording switched on, then many turns."""
    async with FakeModelServer({}) as fake:
        assistant = Assistant.load(project, llm_factory=fake.llm_factory(),
                                   tracker_store=InMemoryTrackerStore())
        async with assistant:
            await say(assistant, sender, "/ask_name")
            await say(assistant, sender, "/SetSlots(name=Ada)")
            await assistant.switch_recording(sender, True)
            for _ in range(HOURS_TURNS):
                await say(assistant, sender, "/opening_hours")
            return await assistant.tracker(sender)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, needs_postgres])])
async def database(request, tmp_path):
    """An empty database: (url, connect_args for the driver)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'old.db'}", {}
        return
    schema = f"sa_upgrade_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    yield POSTGRES, {"server_settings": {"search_path": schema}}
    async with admin.connect() as conn:
        await conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    await admin.dispose()


async def test_a_conversation_stored_by_the_version_before_snapshots_carries_on(project,
                                                                               database):
    url, connect_args = database
    sender = f"old-{uuid.uuid4().hex[:8]}"
    before = await old_conversation(project, sender)
    await write_as_the_old_version(url, sender, before, connect_args)
    assert "state" not in await columns(url, connect_args)

    store = SQLTrackerStore(url, connect_args=connect_args)
    async with FakeModelServer({}) as fake, Assistant.load(
            project, llm_factory=fake.llm_factory(), tracker_store=store) as assistant:
        # the name given at the start of the old conversation guards the flow
        texts, first = await say(assistant, sender, "/hidden_flow")
        upgraded = await store.load(sender)
        texts_again, second = await say(assistant, sender, "/hidden_flow")
        recorded = await assistant.recording_on(sender)
        everything = await assistant.tracker(sender)
        state = await assistant.state(sender)

    assert {"state", "window_start"} <= await columns(url, connect_args)
    assert texts == texts_again == ["Hello Ada!", "Is there anything else I can help you with?"]
    # the recording switch, stored long before the window, still records the turns
    assert recording.METADATA_KEY in first[-1]["metadata"]
    assert recording.METADATA_KEY in second[-1]["metadata"]
    assert recorded is True
    # the first turn wrote the snapshot; the next loads start at the window
    assert upgraded.state is not None
    assert upgraded.start > 0
    assert upgraded.count == len(before) + len(first)
    # nothing of the old conversation was lost or rewritten
    assert everything == [*before, *first, *second]
    assert state["slots"]["name"] == "Ada"
    assert state["events"] == everything


async def test_a_database_upgraded_once_is_not_changed_again(database):
    url, connect_args = database
    await write_as_the_old_version(url, "someone", [{"event": "user", "text": "hi"}],
                                   connect_args)
    for _ in range(2):  # a second start (another worker) finds the columns there
        store = SQLTrackerStore(url, connect_args=connect_args)
        try:
            record = await store.load("someone")
        finally:
            await store.close()
        assert record.events == [{"event": "user", "text": "hi"}]
        assert record.state is None
    assert {"state", "window_start"} <= await columns(url, connect_args)
