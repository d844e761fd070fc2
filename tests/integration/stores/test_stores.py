"""Tracker stores keep one turn atomic; locks serialise a sender's turns across workers.

PostgreSQL and Redis tests need SUBAGENTS_TEST_POSTGRES_URL / SUBAGENTS_TEST_REDIS_URL
(`.ci/run` starts both servers and sets them); without them they skip, saying so.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import anyio
import pytest
from subagents import events as ev
from subagents.stores import InMemoryTrackerStore
from subagents.stores.sql import SQLTrackerStore

POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")
REDIS = os.environ.get("SUBAGENTS_TEST_REDIS_URL")
needs_postgres = pytest.mark.skipif(
    not POSTGRES, reason="SUBAGENTS_TEST_POSTGRES_URL is not set (.ci/run starts PostgreSQL)")
needs_redis = pytest.mark.skipif(
    not REDIS, reason="SUBAGENTS_TEST_REDIS_URL is not set (.ci/run starts Redis)")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, needs_postgres])])
async def store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryTrackerStore()
        return
    url = f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}" if request.param == "sqlite" \
        else POSTGRES
    sql = SQLTrackerStore(url)
    yield sql
    await sql.close()


def sender() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


async def test_turns_are_appended_and_loaded_in_order(store):
    who = sender()
    assert (await store.load(who)).events == []
    first = [ev.user_uttered("hi"), ev.bot_uttered("hello")]
    await store.save_turn(who, first, [{"kind": "flow", "flow_id": "a"}], 0)
    second = [ev.user_uttered("again"), ev.slot_set("city", "Oslo")]
    await store.save_turn(who, second, [], 2)
    record = await store.load(who)
    assert record.events == first + second
    assert record.stack == []
    assert who in await store.senders()


async def test_values_come_back_exactly_as_they_were_saved(store):
    """Big integers keep every digit, text keeps every character (a lone surrogate too)."""
    who = sender()
    values = {"big": 123456789012345678901234567890, "near": 18446744073709551615,
              "text": "héllo ✓ \u2028 日本", "float": 1e-07, "nested": {"1": [True, None]}}
    turn = [ev.slot_set("profile", values), ev.slot_set("odd", "\ud800x"),
            ev.user_uttered("ünïcode")]
    await store.save_turn(who, turn, [{"kind": "flow", "flow_id": "a", "n": 2 ** 70}], 0)
    record = await store.load(who)
    assert record.events == turn
    assert record.stack == [{"kind": "flow", "flow_id": "a", "n": 2 ** 70}]


async def test_a_turn_based_on_a_stale_conversation_is_refused(store):
    who = sender()
    await store.save_turn(who, [ev.user_uttered("one")], [], 0)
    with pytest.raises(RuntimeError, match="changed while a turn ran"):
        await store.save_turn(who, [ev.user_uttered("stale")], [], 0)
    assert [e["text"] for e in (await store.load(who)).events] == ["one"]


async def test_many_concurrent_turns_of_different_senders_are_all_saved(store):
    senders = [sender() for _ in range(40)]
    with anyio.fail_after(60):
        await asyncio.gather(*(store.save_turn(s, [ev.user_uttered(s)], [], 0)
                               for s in senders))
        records = await asyncio.gather(*(store.load(s) for s in senders))
    assert [r.events[0]["text"] for r in records] == senders


SQL = ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, needs_postgres])]


def sql_store(backend: str, tmp_path) -> SQLTrackerStore:
    return SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
                           if backend == "sqlite" else POSTGRES)


@pytest.mark.parametrize("backend", SQL)
async def test_one_stale_turn_does_not_fail_the_others_in_the_same_batch(backend, tmp_path):
    store = sql_store(backend, tmp_path)
    old = sender()
    await store.save_turn(old, [ev.user_uttered("x")], [], 0)
    fresh = [sender() for _ in range(5)]
    results = await asyncio.gather(
        store.save_turn(old, [ev.user_uttered("stale")], [], 0),
        *(store.save_turn(s, [ev.user_uttered(s)], [], 0) for s in fresh),
        return_exceptions=True)
    assert isinstance(results[0], RuntimeError)
    assert results[1:] == [None] * 5
    for who in fresh:
        assert (await store.load(who)).events[0]["text"] == who
    await store.close()


@pytest.mark.parametrize("backend", SQL)
async def test_turns_of_one_sender_in_the_same_batch_are_written_in_order(backend, tmp_path):
    store = sql_store(backend, tmp_path)
    who, other = sender(), sender()
    try:
        await store.load(who)  # the tables exist: the turns below meet in one batch
        results = await asyncio.gather(
            store.save_turn(who, [ev.user_uttered("one")], [{"frame": 1}], 0),
            store.save_turn(other, [ev.user_uttered("other")], [], 0),
            store.save_turn(who, [ev.user_uttered("two"), ev.user_uttered("three")],
                            [{"frame": 2}], 1),
            store.save_turn(who, [ev.user_uttered("stale")], [], 1),
            return_exceptions=True)
        record, others = await store.load(who), await store.load(other)
    finally:
        await store.close()
    assert results[:3] == [None, None, None]
    assert isinstance(results[3], RuntimeError)
    assert [e["text"] for e in record.events] == ["one", "two", "three"]
    assert record.stack == [{"frame": 2}]
    assert [e["text"] for e in others.events] == ["other"]


@pytest.mark.redis
@needs_redis
async def test_the_redis_lock_serialises_one_senders_turns_across_workers():
    from subagents.stores.redis_lock import RedisLockStore

    worker_a, worker_b = RedisLockStore(url=REDIS), RedisLockStore(url=REDIS)
    who = sender()
    order: list[str] = []

    async def turn(store: RedisLockStore, name: str) -> None:
        async with store.lock(who):
            order.append(f"{name}-start")
            await asyncio.sleep(0.05)  # hold the lock while the other worker waits
            order.append(f"{name}-end")

    with anyio.fail_after(30):
        await asyncio.gather(turn(worker_a, "a"), turn(worker_b, "b"))
    await worker_a.close()
    await worker_b.close()
    assert order in (["a-start", "a-end", "b-start", "b-end"],
                     ["b-start", "b-end", "a-start", "a-end"])


@pytest.mark.postgres
@needs_postgres
async def test_an_assistant_on_postgres_keeps_its_conversation(tmp_path):
    from subagents.dialogue.processor import Assistant

    from tests.dialogue_harness import write_project

    project = write_project(tmp_path / "p", "http://127.0.0.1:9/mcp", extra={
        "endpoints.yml": f"tracker_store:\n  type: sql\n  url: {POSTGRES}\n",
        "config.yml": None, "sub_agents/weather/config.yml": None,
        "sub_agents/booking/config.yml": None, "sub_agents/flaky/config.yml": None,
        "sub_agents/flaky/agent.py": None, "sub_agents/flaky/__init__.py": None,
        "sub_agents/quitter/config.yml": None,
        "data/flows.yml": "flows:\n  hours:\n    description: h\n    steps:\n"
                          "      - action: utter_hours\n"})
    who = sender()
    async with Assistant.load(project) as assistant:
        await assistant.handle_message(who, "/hours")
    async with Assistant.load(project) as again:
        events = await again.tracker(who)
    assert [e["text"] for e in events if e["event"] == "bot"] == [
        "We are open 9 to 5.", "Is there anything else I can help you with?"]


async def test_a_sqlite_store_closed_or_dropped_ends_its_database_thread(tmp_path):
    import gc
    import threading

    def threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "subagents-sqlite"}

    before = threads()
    closed = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path / 'closed.db'}")
    await closed.load("a")
    dropped = SQLTrackerStore(f"sqlite+aiosqlite:///{tmp_path / 'dropped.db'}")
    await dropped.save_turn("a", [ev.user_uttered("hi")], [], 0)
    started = threads() - before
    assert len(started) == 2
    await closed.close()
    del dropped
    gc.collect()
    for thread in started:
        await anyio.to_thread.run_sync(thread.join, 10)  # bounded: a join that times out...
        assert not thread.is_alive()  # ... fails here
