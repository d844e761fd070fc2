"""Store faults reach the turn: the user gets the internal-error reply, nothing half-written is
recorded, the sender's lock is released and the next turn works.

PostgreSQL tests need SUBAGENTS_TEST_POSTGRES_URL (`.ci/run` starts PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import uuid

import anyio
import httpx2
import pytest
from subagents import events as ev
from subagents.channels.collecting import CollectingOutputChannel
from subagents.dialogue.client_input import TurnFailedError
from subagents.server.app import ERROR_ID_HEADER, create_app
from subagents.stores.base import StoreError
from subagents.stores.locks import LockTimeoutError
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project
from tests.integration.server.test_server import sse_frames

POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")
needs_postgres = pytest.mark.skipif(
    not POSTGRES, reason="SUBAGENTS_TEST_POSTGRES_URL is not set (.ci/run starts PostgreSQL)")
HOURS = {"command_generator": ["start flow opening_hours"] * 4}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


async def failing_then_working(assistant, store, sender, break_store, heal_store):
    """One turn while the store is broken, one after it healed."""
    channel = CollectingOutputChannel()
    break_store()
    with anyio.fail_after(30), pytest.raises(TurnFailedError) as failed:
        await assistant.handle_message(sender, "when are you open?", None, channel)
    heal_store()
    with anyio.fail_after(30):
        events = await assistant.handle_message(sender, "and tomorrow?", None,
                                                CollectingOutputChannel())
    record = await store.load(sender)
    return failed.value, channel, events, record


async def test_a_sqlite_write_lock_held_by_another_connection_fails_the_turn(project, tmp_path):
    db = tmp_path / "tracker.db"
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{db}", busy_timeout=0.2)
    blocker = sqlite3.connect(db, isolation_level=None, timeout=5)
    async with FakeModelServer(HOURS) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant:
        await store.load("warm-up")  # creates the tables
        failed, channel, events, record = await failing_then_working(
            assistant, store, "u-1", lambda: blocker.execute("BEGIN EXCLUSIVE"),
            lambda: blocker.execute("ROLLBACK"))
    blocker.close()
    assert failed.cause_code == "store.failed"
    assert channel.texts[-1] == assistant.internal_error_text()
    assert record.events == events  # the failed turn left nothing behind
    assert [e["text"] for e in record.events if e["event"] == "user"] == ["and tomorrow?"]


@pytest.fixture
async def pg_schema():
    """A throwaway schema: its tables' rights can be revoked without touching other tests.

    Yields a store factory (connections tagged with an application name, to find them) and
    an SQL runner on its own connection.
    """
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    schema = f"sa_fault_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(POSTGRES, isolation_level="AUTOCOMMIT")

    async def run(sql: str) -> None:
        async with admin.connect() as conn:
            await conn.execute(sa.text(sql))

    def store() -> SQLTrackerStore:
        return SQLTrackerStore(POSTGRES, connect_args={"server_settings": {
            "search_path": schema, "application_name": schema}})

    await run(f"CREATE SCHEMA {schema}")
    yield schema, store, run
    await run(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
              f"WHERE application_name = '{schema}'")
    await run(f"DROP SCHEMA {schema} CASCADE")
    await admin.dispose()


@pytest.mark.postgres
@needs_postgres
async def test_a_postgres_privilege_revoked_mid_conversation_fails_the_turn(project,
                                                                           pg_schema):
    schema, make_store, run = pg_schema
    store = make_store()
    tables = f"{schema}.subagents_conversations, {schema}.subagents_events"
    await store.load("warm-up")  # creates the tables
    try:
        async with FakeModelServer(HOURS) as fake, \
                assistant_for(project, fake, tracker_store=store) as assistant:
            sender = f"pg-{uuid.uuid4().hex[:8]}"
            channel = CollectingOutputChannel()
            await run(f"REVOKE INSERT, UPDATE ON {tables} FROM CURRENT_USER")
            with anyio.fail_after(30), pytest.raises(TurnFailedError) as failed:
                await assistant.handle_message(sender, "when are you open?", None, channel)
            await run(f"GRANT INSERT, UPDATE ON {tables} TO CURRENT_USER")
            with anyio.fail_after(30):
                events = await assistant.handle_message(sender, "and tomorrow?", None,
                                                        CollectingOutputChannel())
            record = await store.load(sender)
    finally:
        await store.close()
    assert failed.value.cause_code == "store.failed"
    assert channel.texts[-1] == assistant.internal_error_text()
    assert record.events == events


@pytest.mark.postgres
@needs_postgres
async def test_a_terminated_postgres_connection_fails_the_write_instead_of_hanging(pg_schema):
    schema, make_store, run = pg_schema
    store = make_store()
    sender = f"pg-{uuid.uuid4().hex[:8]}"
    try:
        await store.load(sender)  # the pool now holds a connection
        await run(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  f"WHERE application_name = '{schema}'")
        with anyio.fail_after(30), pytest.raises(StoreError) as failed:
            await store.save_turn(sender, [ev.user_uttered("hi")], [], 0)
        with anyio.fail_after(30):
            await store.save_turn(sender, [ev.user_uttered("again")], [], 0)
            record = await store.load(sender)
    finally:
        await store.close()
    assert failed.value.code == "store.failed"
    assert [e["text"] for e in record.events] == ["again"]


@pytest.mark.postgres
@needs_postgres
async def test_a_load_on_a_connection_the_server_closed_runs_again_on_a_fresh_one(pg_schema):
    schema, make_store, run = pg_schema
    store = make_store()
    sender = f"pg-{uuid.uuid4().hex[:8]}"
    try:
        await store.save_turn(sender, [ev.user_uttered("hi")], [], 0)  # a connection is kept
        await run(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  f"WHERE application_name = '{schema}'")
        with anyio.fail_after(30):
            record = await store.load(sender)
            await store.save_turn(sender, [ev.user_uttered("again")], [], 1)
            again = await store.load(sender)
    finally:
        await store.close()
    assert [e["text"] for e in record.events] == ["hi"]
    assert [e["text"] for e in again.events] == ["hi", "again"]


async def polled(read, done) -> None:
    """Read the server's view until ``done(value)`` (it changes on the server's own time)."""
    for _ in range(1500):  # the caller's bound comes first
        if done(await read()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the server's view never changed")


async def backends(run_query, schema: str, *, waiting: bool = False) -> int:
    """How many server connections the store of ``schema`` has (waiting for a lock)."""
    rows = await run_query(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                           f"'{schema}'" + (" AND wait_event_type = 'Lock'" if waiting else ""))
    return int(rows[0][0])


@pytest.fixture
async def pg_query():
    """A query runner on its own connection (rows back), and a way to hold a table lock."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    admin = create_async_engine(POSTGRES, isolation_level="AUTOCOMMIT")

    async def query(sql: str) -> list[tuple]:
        async with admin.connect() as conn:
            return [tuple(row) for row in await conn.execute(sa.text(sql))]

    yield query, admin
    await admin.dispose()


@pytest.mark.postgres
@needs_postgres
async def test_turns_hold_a_bounded_share_of_the_pool_and_the_rest_of_the_store_still_runs(
        pg_schema, pg_query):
    import sqlalchemy as sa
    from subagents.stores.sql import _PG_POOL_SIZE, _PG_TURN_CONNECTIONS

    schema, make_store, _ = pg_schema
    query, admin = pg_query
    store = make_store()
    sender = f"pg-{uuid.uuid4().hex[:8]}"
    await store.save_turn(sender, [ev.user_uttered("hi")], [], 0)
    loads: list[asyncio.Task] = []
    try:
        async with admin.connect() as blocker:
            await blocker.execute(sa.text("BEGIN"))
            await blocker.execute(sa.text(
                f"LOCK TABLE {schema}.subagents_events IN ACCESS EXCLUSIVE MODE"))
            loads = [asyncio.ensure_future(store.load(sender)) for _ in range(_PG_POOL_SIZE + 10)]
            with anyio.fail_after(30):
                await polled(lambda: backends(query, schema, waiting=True),
                             lambda n: n >= _PG_TURN_CONNECTIONS)
                senders = await store.senders()  # not starved by the waiting loads
            assert await backends(query, schema, waiting=True) == _PG_TURN_CONNECTIONS
            for task in loads[:5]:  # their connections go back to the engine's pool
                task.cancel()
            await blocker.execute(sa.text("ROLLBACK"))
        with anyio.fail_after(30):
            records = await asyncio.gather(*loads[5:])
            after = await store.load(sender)
        opened = await backends(query, schema)
    finally:
        for task in loads:
            task.cancel()
        await store.close()
    assert sender in senders
    assert all([e["text"] for e in r.events] == ["hi"] for r in [*records, after])
    assert opened <= _PG_POOL_SIZE


@pytest.mark.postgres
@needs_postgres
async def test_closing_a_postgres_store_closes_its_connections_and_it_can_be_used_again(
        pg_schema, pg_query):
    schema, make_store, _ = pg_schema
    query, _ = pg_query
    store = make_store()
    sender = f"pg-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.gather(*(store.load(sender) for _ in range(5)))
        await store.save_turn(sender, [ev.user_uttered("hi")], [], 0)
        assert await backends(query, schema) > 0
        await store.close()
        with anyio.fail_after(10):
            await polled(lambda: backends(query, schema), lambda n: n == 0)
        record = await store.load(sender)
    finally:
        await store.close()
    assert [e["text"] for e in record.events] == ["hi"]


async def test_over_http_a_store_failure_answers_the_reply_with_an_error_id(project, tmp_path):
    db = tmp_path / "tracker.db"
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{db}", busy_timeout=0.2)
    blocker = sqlite3.connect(db, isolation_level=None, timeout=5)
    body = {"sender": "web-1", "message": "when are you open?"}
    async with FakeModelServer(HOURS) as fake, \
            assistant_for(project, fake, tracker_store=store) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        await store.load("warm-up")
        blocker.execute("BEGIN EXCLUSIVE")
        with anyio.fail_after(30):
            failed = await client.post("/webhooks/rest/webhook", json=body)
            frames = await sse_frames(client, {**body, "sender": "web-2"})
        blocker.execute("ROLLBACK")
        with anyio.fail_after(30):
            healed = await client.post("/webhooks/rest/webhook", json=body)
    blocker.close()
    reply = assistant.internal_error_text()
    assert failed.status_code == 200
    assert [m["text"] for m in failed.json()] == [reply]
    assert len(failed.headers[ERROR_ID_HEADER]) >= 8
    assert "We are open 9 to 5." in [m["text"] for m in healed.json()]
    messages = [data["text"] for event, data, _ in frames if event == "message"]
    assert messages[-1] == reply
    error = next(data for event, data, _ in frames if event == "error")
    assert error["code"] == "dialogue.turn_failed"
    assert error["turn_recorded"] is False
    assert "database" not in json.dumps(error).lower()  # no driver detail reaches the client
    assert "done" not in [event for event, _, _ in frames]


REDIS = os.environ.get("SUBAGENTS_TEST_REDIS_URL")
needs_redis = pytest.mark.skipif(
    not REDIS, reason="SUBAGENTS_TEST_REDIS_URL is not set (.ci/run starts Redis)")


@pytest.mark.redis
@needs_redis
async def test_a_held_redis_lock_outlives_its_expiry_while_the_turn_runs():
    from subagents.stores.redis_lock import RedisLockStore

    extended = anyio.Event()
    count: list[str] = []

    def on_extend(sender: str) -> None:
        count.append(sender)
        if len(count) >= 4:  # more than one lock_timeout has passed
            extended.set()

    sender = f"lock-{uuid.uuid4().hex[:8]}"
    holder = RedisLockStore(url=REDIS, lock_timeout=1.5, on_extend=on_extend)
    other = RedisLockStore(url=REDIS, lock_timeout=1.5, wait_timeout=0.01)
    try:
        async with holder.lock(sender):
            with anyio.fail_after(10):
                await extended.wait()
            with pytest.raises(LockTimeoutError) as busy:
                async with other.lock(sender):
                    pass
        async with other.lock(sender):  # released at the end of the turn
            pass
    finally:
        await holder.close()
        await other.close()
    assert busy.value.code == "store.lock_timeout"


@pytest.mark.redis
@needs_redis
async def test_every_lock_a_worker_holds_is_extended_and_a_released_one_no_longer():
    from subagents.stores.redis_lock import RedisLockStore

    first, second = (f"lock-{uuid.uuid4().hex[:8]}" for _ in range(2))
    extended: dict[str, int] = {first: 0, second: 0}
    both_twice, first_twice_more = anyio.Event(), anyio.Event()
    since_release: list[str] = []

    def on_extend(sender: str) -> None:
        extended[sender] += 1
        if min(extended.values()) >= 2:
            both_twice.set()
        if both_twice.is_set():
            since_release.append(sender)
            if since_release.count(first) >= 2:
                first_twice_more.set()

    holder = RedisLockStore(url=REDIS, lock_timeout=1.5, on_extend=on_extend)
    other = RedisLockStore(url=REDIS, lock_timeout=1.5, wait_timeout=0.01)
    try:
        async with holder.lock(first):
            async with holder.lock(second):
                with anyio.fail_after(10):
                    await both_twice.wait()
            after_release = extended[second]
            async with other.lock(second):  # released: free at once
                pass
            with pytest.raises(LockTimeoutError):  # still held, past its first expiry
                async with other.lock(first):
                    pass
            since_release.clear()
            with anyio.fail_after(10):  # the keeper goes on for the lock still held
                await first_twice_more.wait()
    finally:
        await holder.close()
        await other.close()
    assert extended[second] == after_release
    assert second not in since_release


@pytest.mark.redis
@needs_redis
async def test_a_message_waiting_longer_than_the_lock_wait_gets_the_reply(project):
    from subagents.stores.redis_lock import RedisLockStore

    sender = f"busy-{uuid.uuid4().hex[:8]}"
    blocker = RedisLockStore(url=REDIS, lock_timeout=30)
    waiting = RedisLockStore(url=REDIS, wait_timeout=0.2)
    async with FakeModelServer(HOURS) as fake, \
            assistant_for(project, fake, lock_store=waiting) as assistant:
        async with blocker.lock(sender):
            channel = CollectingOutputChannel()
            with anyio.fail_after(20), pytest.raises(TurnFailedError) as failed:
                await assistant.handle_message(sender, "hours?", None, channel)
        state = await assistant.state(sender)
    await blocker.close()
    assert failed.value.cause_code == "store.lock_timeout"
    assert channel.texts == [assistant.internal_error_text()]
    assert state["events"] == []


@pytest.fixture
async def redis_admin():
    """A Redis client of the test's own, and a URL whose connections carry a name of their own
    (to find them in CLIENT LIST)."""
    from redis.asyncio import Redis

    admin = Redis.from_url(REDIS)
    name = f"lock-{uuid.uuid4().hex[:8]}"
    url = f"{REDIS}{'&' if '?' in REDIS else '?'}client_name={name}"

    async def connections() -> list[dict]:
        return [c for c in await admin.client_list() if c["name"] == name]

    yield admin, url, connections
    await admin.aclose()


@pytest.mark.redis
@needs_redis
async def test_a_redis_lock_still_works_after_its_connections_were_killed_and_scripts_flushed(
        redis_admin):
    from redis.exceptions import ConnectionError as RedisConnectionError
    from subagents.stores.redis_lock import RedisLockStore

    admin, url, connections = redis_admin
    sender = f"lock-{uuid.uuid4().hex[:8]}"
    store = RedisLockStore(url=url)
    other = RedisLockStore(url=REDIS, wait_timeout=0.01)
    try:
        async with store.lock(sender):
            pass
        for conn in await connections():
            await admin.client_kill_filter(_id=conn["id"])
        await admin.script_flush()
        with anyio.fail_after(30):
            # the client's retry policy decides whether the command that finds its connection
            # closed fails (none by default with a URL, as with redis-py's own pool)
            with contextlib.suppress(RedisConnectionError):
                async with store.lock(sender):
                    pass
            async with store.lock(sender):
                with pytest.raises(LockTimeoutError):
                    async with other.lock(sender):
                        pass
            released = await admin.get(f"subagents:lock:{sender}")
            async with other.lock(sender):
                pass
    finally:
        await store.close()
        await other.close()
    assert released is None


@pytest.mark.redis
@needs_redis
async def test_a_redis_lock_taken_over_meanwhile_is_left_to_its_new_holder(redis_admin):
    from subagents.stores.redis_lock import RedisLockStore

    admin, url, _ = redis_admin
    sender = f"lock-{uuid.uuid4().hex[:8]}"
    key = f"subagents:lock:{sender}"
    store = RedisLockStore(url=url)
    try:
        async with store.lock(sender):
            held = await admin.pttl(key)
            await admin.set(key, "another-worker")  # as if it had expired and been taken
    finally:
        await store.close()
    assert 119_000 < held <= 120_000  # lock_timeout
    assert await admin.get(key) == b"another-worker"
    await admin.delete(key)


@pytest.mark.redis
@needs_redis
async def test_closing_a_redis_lock_store_disconnects_its_connections(redis_admin):
    from subagents.stores.redis_lock import RedisLockStore

    _, url, connections = redis_admin
    store = RedisLockStore(url=url)
    senders = [f"lock-{uuid.uuid4().hex[:8]}" for _ in range(5)]
    entered = asyncio.Barrier(len(senders) + 1)

    async def hold(sender: str) -> None:
        async with store.lock(sender):
            await entered.wait()

    try:
        with anyio.fail_after(30):
            tasks = [asyncio.ensure_future(hold(s)) for s in senders]
            await entered.wait()  # every lock is held: several connections are open
            await asyncio.gather(*tasks)
        opened = len(await connections())
    finally:
        await store.close()
    with anyio.fail_after(10):
        await polled(connections, lambda found: not found)
    assert opened >= 2


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, needs_postgres])])
async def test_debug_logs_of_the_sql_drivers_carry_no_conversation_data(backend, tmp_path,
                                                                        caplog):
    import logging

    url = f"sqlite+aiosqlite:///{tmp_path / 't.db'}" if backend == "sqlite" else POSTGRES
    caplog.set_level(logging.DEBUG)
    logging.getLogger("sqlalchemy.engine").setLevel(logging.DEBUG)  # what echo=True shows
    store = SQLTrackerStore(url)
    sender = f"log-{uuid.uuid4().hex[:8]}"
    try:
        await store.save_turn(sender, [ev.user_uttered("my pin is 4921", metadata={
            "tenant": "acme-secret"})], [{"kind": "flow", "flow_id": "private_flow"}], 0)
        await store.load(sender)
    finally:
        await store.close()
        logging.getLogger("sqlalchemy.engine").setLevel(logging.NOTSET)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "INSERT" in logged.upper()  # the statements are logged ...
    for secret in ("4921", "acme-secret", "private_flow"):
        assert secret not in logged  # ... their data is not


async def test_serve_answers_a_store_outage_keeps_serving_and_drains_on_sigterm(tmp_path):
    """`subagents serve` in its own process, its SQLite tracker write-locked by this one."""
    import asyncio
    import signal
    import socket
    import sys
    import textwrap

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = tmp_path / "served"
    async with FakeModelServer({"command_generator": ["start flow hours"] * 3}) as fake:
        for rel, text in {
            "endpoints.yml": f"""
                model_groups:
                  - id: understanding
                    models: [{{model: fake, api_base: "{fake.base_url('command_generator')}"}}]
                tracker_store: {{type: sql, db: tracker.db, busy_timeout: 0.3}}
                """,
            "config.yml": """
                pipeline:
                  - {name: CompactLLMCommandGenerator, llm: {model_group: understanding}}
                """,
            "data/flows.yml": """
                flows:
                  hours: {description: hours, steps: [{action: utter_hours}]}
                """,
            "data/domain.yml": """
                responses:
                  utter_hours: [{text: "Open 9 to 5."}]
                """}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root), "--port",
            str(port), stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        body = {"sender": "srv", "message": "when are you open?"}
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            with anyio.fail_after(60):
                while b"subagents: serving on" not in (line := await proc.stderr.readline()):
                    assert line, "the server exited before it was ready"
                first = await client.post("/webhooks/rest/webhook", json=body)
                blocker = sqlite3.connect(root / "tracker.db", isolation_level=None, timeout=5)
                blocker.execute("BEGIN EXCLUSIVE")
                failed = await client.post("/webhooks/rest/webhook", json=body)
                blocker.execute("ROLLBACK")
                blocker.close()
                healed = await client.post("/webhooks/rest/webhook", json=body)
                proc.send_signal(signal.SIGTERM)
                code = await proc.wait()
    assert first.json()[0]["text"] == "Open 9 to 5."
    assert failed.status_code == 200
    assert ERROR_ID_HEADER in failed.headers
    assert len(failed.json()) == 1
    assert healed.json()[0]["text"] == "Open 9 to 5."
    assert code == 0


async def test_a_message_waiting_too_long_for_an_in_process_lock_gets_the_reply(project):
    from subagents.stores import InProcessLockStore

    locks = InProcessLockStore(wait_timeout=0.2)
    async with FakeModelServer(HOURS) as fake, \
            assistant_for(project, fake, lock_store=locks) as assistant:
        async with locks.lock("busy"):  # another turn of the same conversation
            channel = CollectingOutputChannel()
            with anyio.fail_after(20), pytest.raises(TurnFailedError) as failed:
                await assistant.handle_message("busy", "hours?", None, channel)
        with anyio.fail_after(20):
            await assistant.handle_message("busy", "hours?", None, CollectingOutputChannel())
    assert failed.value.cause_code == "store.lock_timeout"
    assert channel.texts == [assistant.internal_error_text()]


async def test_the_shell_shows_the_reply_of_a_failed_turn_and_carries_on(tmp_path):
    import sqlite3 as sqlite
    import sys

    from tests.integration.cli.test_shell_and_demo import Terminal, shell_project

    async with FakeModelServer({"command_generator": ["start flow hours"] * 2}) as fake:
        root = shell_project(tmp_path / "p", fake)
        endpoints = root / "endpoints.yml"
        endpoints.write_text(endpoints.read_text().replace(
            "tracker_store: {type: memory}", "tracker_store: {type: sql, db: t.db, "
                                             "busy_timeout: 0.3}"))
        term = Terminal()
        await term.start(sys.executable, "-m", "subagents.cli.main", "shell", "--project",
                         str(root))
        await term.expect("you> ")
        blocker = sqlite.connect(root / "t.db", isolation_level=None, timeout=5)
        blocker.execute("CREATE TABLE IF NOT EXISTS subagents_block (x)")
        blocker.execute("BEGIN EXCLUSIVE")
        term.send("when are you open?\n")
        await term.expect("(the turn failed; error id ")
        blocker.execute("ROLLBACK")
        blocker.close()
        term.send("and today?\n")
        await term.expect("Open 9 to 5.")
        term.send("\x04")
        output = await term.expect("bye")
        code = await term.close()
    assert code == 0
    failed_at = output.index("(the turn failed; error id ")
    assert "went wrong on my side" in output[:failed_at]  # the internal-error reply came first


@pytest.mark.redis
@needs_redis
async def test_a_redis_command_cancelled_before_its_reply_does_not_answer_the_next_one(
        redis_admin):
    """A lock command cancelled while its reply is on its way (the client went away, say):
    that reply must not be read as the answer to the connection's next command. (redis-py
    drops a connection whose read was interrupted; the store keeps connections of its own
    between commands, so this is what keeps them in step.)"""
    from subagents.stores.redis_lock import RedisLockStore

    _, url, connections = redis_admin
    store = RedisLockStore(url=url)
    try:
        with anyio.fail_after(30):
            # a command the server holds on to: its reply comes after 3 s, as nil
            waiting = asyncio.ensure_future(
                store._command("BLPOP", f"lock-{uuid.uuid4().hex[:8]}", 3))
            await polled(connections, lambda found: any(c["cmd"] == "blpop" for c in found))
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await store._command("PING") in (b"PONG", "PONG", True)
    finally:
        await store.close()
