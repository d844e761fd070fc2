"""SQL tracker store (SQLAlchemy async): SQLite by default, PostgreSQL with the extra."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from subagents.retry import RetryPolicy, retry_call
from subagents.stores.base import ConversationRecord, StoreError, TrackerStore
from subagents.types import dump_json, load_json

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = structlog.get_logger("subagents.stores")
_T = TypeVar("_T")
_PG_POOL_SIZE = 20
_PG_TURN_CONNECTIONS = 16
"""How many of the pool's connections a turn's statements may hold; the others stay free for
the rest of the store (creating the tables, listing the senders)."""


@dataclass
class _PendingTurn:
    sender_id: str
    events: list[dict[str, Any]]
    stack: list[dict[str, Any]]
    previous_count: int
    done: asyncio.Future[None]
    state: dict[str, Any] | None = None
    window_start: int = 0


def _store_error(exc: BaseException) -> Exception:
    """What a waiting turn is told: its own refusal as is, a database failure as StoreError."""
    if isinstance(exc, StoreError | RuntimeError):
        return exc
    error = StoreError(f"the tracker store failed: {type(exc).__name__}")
    error.__cause__ = exc
    return error


def _refusal(item: _PendingTurn, count: int) -> str:
    return (f"conversation {item.sender_id!r} changed while a turn ran "
            f"({count} events stored, {item.previous_count} expected)")


def _accept(batch: list[_PendingTurn], stored: dict[str, int]
            ) -> tuple[dict[int, str], list[dict[str, Any]], list[dict[str, Any]]]:
    """Which turns of a batch are written (their conversation still has the count the turn
    loaded) and their rows: refused turns by index with the reason, conversation rows (one
    per sender), event rows."""
    refused: dict[int, str] = {}
    events: list[dict[str, Any]] = []
    conversations: dict[str, dict[str, Any]] = {}
    now = time.time()
    for index, item in enumerate(batch):
        count = stored.get(item.sender_id, 0)
        if count != item.previous_count:
            refused[index] = _refusal(item, count)
            continue
        stored[item.sender_id] = count + len(item.events)
        events += [{"sender_id": item.sender_id, "seq": count + i,
                    "data": _text(e)}
                   for i, e in enumerate(item.events)]
        conversations[item.sender_id] = {
            "sender_id": item.sender_id, "stack": _text(item.stack),
            "event_count": count + len(item.events), "updated_at": now,
            "state": None if item.state is None else _text(item.state),
            "window_start": item.window_start if item.state is not None else 0}
    return refused, list(conversations.values()), events


_sql_log = logging.getLogger("subagents.stores.sql")
# one statement (one snapshot, no transaction needed): the conversation row (stack, state,
# event count) as row seq -1, then the events of its window in order
_LOAD = ("SELECT stack, state, -1 AS seq, event_count FROM subagents_conversations "
         "WHERE sender_id = {sender} "
         "UNION ALL SELECT data, NULL, seq, NULL FROM subagents_events "
         "WHERE sender_id = {sender} AND seq >= (SELECT window_start "
         "FROM subagents_conversations WHERE sender_id = {sender}) ORDER BY seq")
_PG_LOAD = _LOAD.format(sender="$1")
_SQLITE_LOAD = _LOAD.format(sender=":sender")
_EVENTS = ("SELECT data FROM subagents_events WHERE sender_id = {sender} AND seq >= {start} "
           "AND seq < {stop} ORDER BY seq")
_PG_EVENTS = _EVENTS.format(sender="$1", start="$2", stop="$3")
_SQLITE_EVENTS_RANGE = _EVENTS.format(sender=":sender", start=":start", stop=":stop")
# a write without a snapshot (state NULL) keeps the stored one and its window
_KEEP_STATE = ("state = coalesce({new}.state, subagents_conversations.state), "
               "window_start = CASE WHEN {new}.state IS NULL "
               "THEN subagents_conversations.window_start ELSE {new}.window_start END")
_SQLITE_COUNTS = ("SELECT sender_id, event_count FROM subagents_conversations "
                  "WHERE sender_id IN ({marks})")
_MAX_SEQ = 2**31 - 1
"""The end of every conversation (seq is a 32-bit integer column)."""
_SQLITE_BATCH = 500
"""Senders per counts statement (old SQLite builds allow 999 parameters per statement)."""
_SQLITE_UPSERT = ("INSERT INTO subagents_conversations (sender_id, stack, event_count, "
                  "updated_at, state, window_start) VALUES (:sender_id, :stack, "
                  ":event_count, :updated_at, :state, :window_start) "
                  "ON CONFLICT (sender_id) DO UPDATE SET stack = excluded.stack, "
                  "event_count = excluded.event_count, updated_at = excluded.updated_at, "
                  + _KEEP_STATE.format(new="excluded"))
_SQLITE_EVENTS = ("INSERT INTO subagents_events (sender_id, seq, data) "
                  "VALUES (:sender_id, :seq, :data)")
# one statement (atomic on its own, one round trip): the stored counts of the turns'
# conversations; the turns whose count is still the one they loaded replace their stack and
# append their events; the counts come back, to tell the others why they were refused
_PG_WRITE = """\
WITH turn AS (
    SELECT * FROM unnest($1::varchar[], $2::int[], $3::text[], $4::int[], $5::float8[],
                         $6::text[], $7::int[])
        AS t(sender_id, previous_count, stack, event_count, updated_at, state, window_start)),
stored AS (
    SELECT turn.sender_id, coalesce(c.event_count, 0) AS event_count
    FROM turn LEFT JOIN subagents_conversations c ON c.sender_id = turn.sender_id),
accepted AS (
    SELECT turn.* FROM turn JOIN stored ON stored.sender_id = turn.sender_id
    WHERE stored.event_count = turn.previous_count),
upserted AS (
    INSERT INTO subagents_conversations (sender_id, stack, event_count, updated_at, state,
                                         window_start)
    SELECT sender_id, stack, event_count, updated_at, state, window_start FROM accepted
    ON CONFLICT (sender_id) DO UPDATE SET stack = EXCLUDED.stack,
        event_count = EXCLUDED.event_count, updated_at = EXCLUDED.updated_at,
        {keep}),
inserted AS (
    INSERT INTO subagents_events (sender_id, seq, data)
    SELECT * FROM unnest($8::varchar[], $9::int[], $10::text[]) AS e(sender_id, seq, data)
    WHERE e.sender_id IN (SELECT sender_id FROM accepted))
SELECT sender_id, event_count FROM stored""".format(keep=_KEEP_STATE.format(new="EXCLUDED"))


def _distinct_runs(batch: list[_PendingTurn]) -> list[tuple[int, list[_PendingTurn]]]:
    """The batch cut into runs in which no sender appears twice, each with the index of its
    first turn (one run in practice: the lock store serialises the turns of a sender)."""
    runs: list[tuple[int, list[_PendingTurn]]] = []
    senders: set[str] = set()
    for index, item in enumerate(batch):
        if not runs or item.sender_id in senders:
            runs.append((index, []))
            senders.clear()
        runs[-1][1].append(item)
        senders.add(item.sender_id)
    return runs


def _columns(rows: list[dict[str, Any]], *keys: str) -> list[list[Any]]:
    return [[row[key] for row in rows] for key in keys]


def _record(sender_id: str, rows: Any) -> ConversationRecord:
    """The conversation from the rows of the load statement (none without its own row)."""
    if not rows or rows[0][2] != -1:
        return ConversationRecord(sender_id)
    stack, state, _, count = rows[0]
    # one parse of all the events: half the CPU of a parse per event, and their keys are
    # shared
    events = _parse_events(rows[1:])
    start = rows[1][2] if len(rows) > 1 else count
    return ConversationRecord(sender_id, events, load_json(stack),
                              load_json(state) if state is not None else None, start)


def _parse_events(rows: Any) -> list[dict[str, Any]]:
    """The events of rows whose first column is an event's JSON, in one parse."""
    return list(load_json("[" + ",".join([row[0] for row in rows]) + "]"))


def _text(value: Any) -> str:
    """The JSON text stored for ``value`` (what JSON has no type for is written as text)."""
    return dump_json(value, str).decode()


def _log_statement(statement: str) -> None:
    """Statements run on asyncpg directly are logged at DEBUG, without their data."""
    if _sql_log.isEnabledFor(logging.DEBUG):
        _sql_log.debug("%s", statement)


def _redact_driver_record(record: logging.LogRecord) -> bool:
    """aiosqlite logs each call at DEBUG with its arguments (whole events, metadata): keep the
    line, drop the data."""
    if record.args:
        record.args = tuple(getattr(a, "func", type(a)).__name__ if not isinstance(a, str)
                            else "..." for a in (record.args if isinstance(record.args, tuple)
                                                 else (record.args,)))
    return True


def _redact_rows(record: logging.LogRecord) -> bool:
    """SQLAlchemy logs every fetched row at DEBUG; statements stay, row contents go."""
    if isinstance(record.msg, str) and record.msg.startswith("Row "):
        record.args = ("<row>",)
    return True


def _quiet_driver_logs() -> None:
    for name, redact in (("aiosqlite", _redact_driver_record),
                         ("sqlalchemy.engine.Engine", _redact_rows)):
        logger = logging.getLogger(name)
        if redact not in logger.filters:
            logger.addFilter(redact)


def _sqlite_pragmas(dbapi_connection: Any, record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_load(sender_id: str, driver: Any) -> ConversationRecord:
    _log_statement(_SQLITE_LOAD)
    return _record(sender_id, driver.execute(_SQLITE_LOAD, {"sender": sender_id}).fetchall())


def _sqlite_events(sender_id: str, start: int, stop: int, driver: Any
                   ) -> list[dict[str, Any]]:
    _log_statement(_SQLITE_EVENTS_RANGE)
    return _parse_events(driver.execute(_SQLITE_EVENTS_RANGE, {
        "sender": sender_id, "start": start, "stop": stop}).fetchall())


def _sqlite_write(batch: list[_PendingTurn], driver: Any) -> dict[int, str]:
    """One transaction of three statements whatever the batch size (the counts, one upsert of
    the conversations, one insert of the events); the refused turns by index, with the
    reason. The write lock is taken first, so the counts hold until the commit."""
    senders = list(dict.fromkeys(item.sender_id for item in batch))
    _log_statement("BEGIN IMMEDIATE")
    driver.execute("BEGIN IMMEDIATE")
    try:
        stored: dict[str, int] = {}
        for start in range(0, len(senders), _SQLITE_BATCH):
            chunk = senders[start:start + _SQLITE_BATCH]
            statement = _SQLITE_COUNTS.format(marks=", ".join("?" * len(chunk)))
            _log_statement(statement)
            stored.update(driver.execute(statement, chunk).fetchall())
        refused, conversations, events = _accept(batch, stored)
        if conversations:
            _log_statement(_SQLITE_UPSERT)
            driver.executemany(_SQLITE_UPSERT, conversations)
        if events:
            _log_statement(_SQLITE_EVENTS)
            driver.executemany(_SQLITE_EVENTS, events)
        driver.commit()
    except BaseException:
        driver.rollback()
        raise
    return refused


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_Call = tuple[Callable[[], Any], asyncio.Future[Any] | None]


class _DatabaseThread:
    """The one thread a SQLite connection is used on: calls run there in order.

    Leaner than an executor: a call is one queue put and one wake-up of the event loop, with
    no executor future chained to the loop's. The thread ends on :meth:`stop`, or once this
    object is garbage (a store dropped without being closed), after running ``on_exit`` there
    (which closes the store's connection: left to the garbage collector, it would leak).
    """

    def __init__(self, on_exit: Callable[[], Any] | None = None) -> None:
        calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._calls = calls
        # a daemon: a process that exits without closing its store is not held up by it
        threading.Thread(target=_serve_calls, args=(calls,), name="subagents-sqlite",
                         daemon=True).start()
        weakref.finalize(self, _finish, calls, on_exit)

    async def run(self, function: Callable[[], _T]) -> _T:
        """``function()`` on the thread (a cancelled caller leaves it running to its end)."""
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._calls.put((function, future))
        return await future

    def stop(self) -> None:
        """End the thread once the calls queued before this one have run."""
        self._calls.put(None)


def _finish(calls: queue.SimpleQueue[_Call | None], on_exit: Callable[[], Any] | None) -> None:
    if on_exit is not None:
        calls.put((on_exit, None))
    calls.put(None)


def _serve_calls(calls: queue.SimpleQueue[_Call | None]) -> None:
    while (call := calls.get()) is not None:
        function, future = call
        result: Any = None
        error: BaseException | None = None
        try:
            result = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            error = exc
        if future is None:  # the last call of a dropped store: nobody waits for it
            del call, function, result, error
            continue
        try:
            future.get_loop().call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:  # the caller's loop is closed: nobody waits any more
            pass
        del call, function, future, result, error  # held by nothing while the thread waits


class _FoundDeadError(Exception):
    """The work failed because its connection was dead (now dropped, with the idle ones)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _no_pause(_attempt: int, _error: BaseException) -> float:
    """A dead connection is replaced at once: the fresh one is opened without waiting."""
    return 0.0


_ONCE_MORE = RetryPolicy(attempts=2, retry_on=lambda error: isinstance(error, _FoundDeadError),
                         delay=_no_pause)
"""Work that is safe to run twice runs once more on a fresh connection."""
_ONCE = RetryPolicy(attempts=1, retry_on=lambda _error: False, delay=_no_pause)


class _DriverConnections:
    """asyncpg connections of the engine's pool, kept checked out between turns.

    A checkout from SQLAlchemy's pool and the check-in after it cost several times the CPU of
    the statement run on the connection, so a turn takes an idle connection from this list
    instead. At most ``size`` are in use at once. A connection whose statement failed goes
    back to the engine's pool, which resets it; one found dead is dropped with every idle one
    (the server went away) and the engine's pool is disposed of, as SQLAlchemy does on a
    disconnect. The connections belong to the event loop that opened them.
    """

    def __init__(self, engine: AsyncEngine, reader: AsyncEngine, size: int) -> None:
        self._engine = engine
        self._reader = reader
        self._size = size
        self._idle: list[tuple[AsyncConnection, Any]] = []
        self._slots = asyncio.Semaphore(size)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._generation = 0
        """Bumped by :meth:`close`: a connection out at that time is not kept afterwards."""

    async def run(self, work: Callable[[Any], Awaitable[_T]], *, retry: bool = False) -> _T:
        """``work(asyncpg connection)``; with ``retry``, once more on a fresh connection when
        the connection was found dead (only for work that is safe to run twice)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or used again (after close()) on another loop
            self._loop, self._idle, self._slots = loop, [], asyncio.Semaphore(self._size)

        async def attempt() -> _T:
            generation = self._generation
            conn, driver = self._idle.pop() if self._idle else await self._open()
            try:
                result = await work(driver)
            except BaseException as exc:
                if driver is not None and not driver.is_closed():
                    await conn.close()  # back to the engine's pool, which resets it
                    raise
                await self._drop_all(conn)
                if isinstance(exc, Exception):
                    raise _FoundDeadError(exc) from exc
                raise
            if generation == self._generation:
                self._idle.append((conn, driver))
            else:  # the store was closed meanwhile
                await conn.close()
            return result

        async with self._slots:
            try:
                return await retry_call(attempt, _ONCE_MORE if retry else _ONCE)
            except _FoundDeadError as dead:
                error = dead.error
                raise error from error.__cause__  # the failure as the work raised it

    async def _open(self) -> tuple[AsyncConnection, Any]:
        conn = await self._reader.connect()
        return conn, (await conn.get_raw_connection()).driver_connection

    async def _drop_all(self, dead: AsyncConnection) -> None:
        idle, self._idle = self._idle, []
        for conn in (dead, *(conn for conn, _ in idle)):
            await conn.invalidate()
        await self._engine.dispose()

    async def close(self) -> None:
        """Give every idle connection back to the engine's pool (which the store disposes of)."""
        idle, self._idle = self._idle, []
        self._loop = None
        self._generation += 1
        for conn, _ in idle:
            await conn.close()


class SQLTrackerStore(TrackerStore):
    """Tables ``subagents_conversations`` (stack, event count, the dialogue-state snapshot and
    where the window of the next load starts) and ``subagents_events`` (one row per event,
    appended, never rewritten).

    A turn is one transaction: its events are inserted and the conversation row updated
    together, so a crash mid-turn leaves the previous turn's state.

    A load is one statement (the conversation row and the events of its window); concurrent
    turns share one write (on SQLite a transaction of three statements, on PostgreSQL a
    single statement). SQLite runs on the stdlib driver in
    one dedicated thread (a load or a batch of writes is one hop to that thread, not one per
    cursor call). SQLAlchemy keeps the schema and the connection (pool); a turn's statements
    run on the driver's connection directly (``sqlite3`` on the store's thread; on
    PostgreSQL an asyncpg connection of the pool that the store keeps checked out between
    turns).
    """

    def __init__(self, url: str, *, busy_timeout: float = 30.0,
                 connect_args: dict[str, Any] | None = None) -> None:
        """Args:
            url: An SQLAlchemy async URL (``sqlite+aiosqlite:///...``,
                ``postgresql+asyncpg://...``).
            busy_timeout: SQLite only: how long a write waits for another writer's lock.
            connect_args: Passed to the database driver (e.g. asyncpg ``server_settings``).
        """
        from sqlalchemy import (
            Column,
            Float,
            Integer,
            MetaData,
            String,
            Table,
            Text,
            UniqueConstraint,
            create_engine,
            event,
        )
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import StaticPool

        self.url = url
        self.sqlite = url.startswith("sqlite")
        _quiet_driver_logs()
        self.engine: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None
        self._driver: _DriverConnections | None = None
        self._sync_engine: Engine | None = None
        self._thread: _DatabaseThread | None = None
        if self.sqlite:
            path = url.split(":///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # one connection used by one thread: SQLite has a single writer anyway, and
            # an in-memory database lives exactly as long as its connection
            self._sync_engine = create_engine(
                url.replace("+aiosqlite", "", 1), poolclass=StaticPool, hide_parameters=True,
                connect_args={"timeout": busy_timeout, "check_same_thread": False,
                              **(connect_args or {})})
            event.listen(self._sync_engine, "connect", _sqlite_pragmas)
        else:
            # a fixed pool: connections opened beyond it would be closed again on return, and
            # opening one costs more CPU than a whole turn; a burst waits for a free one
            self.engine = create_async_engine(url, pool_size=_PG_POOL_SIZE, max_overflow=0,
                                              connect_args=dict(connect_args or {}),
                                              hide_parameters=True)
            # reads are single statements: without BEGIN/ROLLBACK they are one round trip
            self._reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            self._driver = _DriverConnections(self.engine, self._reader, _PG_TURN_CONNECTIONS)
        self.meta = MetaData()
        self.conversations = Table(
            "subagents_conversations", self.meta,
            Column("sender_id", String(255), primary_key=True),
            Column("stack", Text, nullable=False),
            Column("event_count", Integer, nullable=False),
            Column("updated_at", Float, nullable=False),
            # added by the snapshot format (tables of earlier versions get them at start-up)
            Column("state", Text, nullable=True),
            Column("window_start", Integer, nullable=False, server_default="0"))
        self.events = Table(
            "subagents_events", self.meta,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("sender_id", String(255), nullable=False, index=True),
            Column("seq", Integer, nullable=False),
            Column("data", Text, nullable=False),
            UniqueConstraint("sender_id", "seq"))
        self._raw: Any = None
        """SQLite: the pool's connection, checked out once on the database thread."""
        self._ready = False
        self._init_lock = asyncio.Lock()
        self._pending: list[_PendingTurn] = []
        self._writer: asyncio.Future[None] | None = None

    async def _run(self, function: Callable[[Connection], _T], *, write: bool = False) -> _T:
        """``function`` on a connection (in a transaction when ``write``), on this store's
        database thread (SQLite) or through the async driver (PostgreSQL)."""
        if self._sync_engine is not None:
            engine = self._sync_engine

            def call() -> _T:
                with engine.begin() if write else engine.connect() as conn:
                    return function(conn)

            if self._thread is None:  # (again) after close(), like the async engine
                self._thread = _DatabaseThread(on_exit=engine.dispose)
            return await self._thread.run(call)
        assert self.engine is not None
        assert self._reader is not None
        async with self.engine.begin() if write else self._reader.connect() as conn:
            return await conn.run_sync(function)

    async def _on_thread(self, function: Callable[[Any], _T]) -> _T:
        """SQLite: ``function(sqlite3 connection)`` on this store's database thread.

        A turn's statements run on the stdlib driver directly: SQLAlchemy's execution layer
        costs several times more CPU than the statements themselves.
        """
        engine = self._sync_engine
        assert engine is not None

        def call() -> _T:
            if self._raw is None:
                self._raw = engine.raw_connection()
            return function(self._raw.driver_connection)

        if self._thread is None:  # (again) after close()
            self._thread = _DatabaseThread(on_exit=engine.dispose)
        return await self._thread.run(call)

    async def _init(self) -> None:
        if self._ready:
            return
        async with self._init_lock:
            if not self._ready:
                await self._run(self.meta.create_all, write=True)
                await self._run(self._upgrade, write=True)
                self._ready = True

    def _upgrade(self, conn: Connection) -> None:
        """Add the snapshot's columns to a table an earlier version created. Its
        conversations load whole on their next turn, which writes their first snapshot."""
        from sqlalchemy import inspect, text

        columns = {c["name"] for c in inspect(conn).get_columns("subagents_conversations")}
        # IF NOT EXISTS: another worker may add them at the same time (PostgreSQL)
        guard = "" if self.sqlite else "IF NOT EXISTS "
        for name, kind in (("state", "TEXT"), ("window_start", "INTEGER NOT NULL DEFAULT 0")):
            if name not in columns:
                conn.execute(text(f"ALTER TABLE subagents_conversations ADD COLUMN {guard}"
                                  f"{name} {kind}"))
                log.info("store.sql.schema_upgraded", column=name)

    async def load(self, sender_id: str) -> ConversationRecord:
        """The conversation of ``sender_id``; empty when there is none."""
        await self._init()
        if not self.sqlite:
            assert self._driver is not None  # a load may run twice: it changes nothing
            return await self._driver.run(functools.partial(self._pg_load, sender_id),
                                          retry=True)
        return await self._on_thread(functools.partial(_sqlite_load, sender_id))

    async def load_events(self, sender_id: str, start: int = 0,
                          stop: int | None = None) -> list[dict[str, Any]]:
        """The stored events of ``sender_id`` from ``start`` up to ``stop`` (excluded)."""
        await self._init()
        end = _MAX_SEQ if stop is None else stop
        if not self.sqlite:
            assert self._driver is not None
            return await self._driver.run(
                functools.partial(self._pg_events, sender_id, start, end), retry=True)
        return await self._on_thread(functools.partial(_sqlite_events, sender_id, start, end))

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int, *,
                        state: dict[str, Any] | None = None, window_start: int = 0) -> None:
        """Append the turn's events and replace the stack (and the snapshot) atomically
        (concurrent turns share one commit)."""
        await self._init()
        item = _PendingTurn(sender_id, new_events, stack, previous_count,
                            asyncio.get_running_loop().create_future(), state, window_start)
        # group commit: concurrent turns share one transaction (SQLite has a single writer;
        # on PostgreSQL it saves a round trip per turn). Turns of one sender never meet in a
        # batch when a lock store serialises them (they are written in order if they do).
        self._pending.append(item)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_pending())
        await item.done

    async def _write_pending(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                await self._write(batch)
        finally:  # cancelled: the turns still queued are not written, and are told so
            queued, self._pending = self._pending, []
            for item in queued:
                if not item.done.done():
                    item.done.set_exception(StoreError("the tracker writer stopped before "
                                                       "this turn was written"))

    async def _write(self, batch: list[_PendingTurn]) -> None:
        """One transaction for the batch; a turn whose conversation changed is refused alone."""
        try:
            if self.sqlite:
                refused = await self._on_thread(functools.partial(_sqlite_write, batch))
            else:
                assert self._driver is not None  # a write whose outcome is unknown is not re-run
                refused = await self._driver.run(functools.partial(self._pg_write, batch))
        except BaseException as exc:  # every waiting turn gets the error, refused or not
            for item in batch:
                if not item.done.done():
                    item.done.set_exception(_store_error(exc))
                    if not isinstance(exc, Exception):
                        item.done.exception()  # a cancelled caller may never look at it
            log.error("store.sql.write_failed", turns=len(batch), error_type=type(exc).__name__)
            if not isinstance(exc, Exception):
                raise
            return
        for index, item in enumerate(batch):
            if item.done.done():
                continue
            if index in refused:
                item.done.set_exception(RuntimeError(refused[index]))
            else:
                item.done.set_result(None)

    async def _pg_load(self, sender_id: str, driver: Any) -> ConversationRecord:
        _log_statement(_PG_LOAD)
        return _record(sender_id, await driver.fetch(_PG_LOAD, sender_id))

    async def _pg_events(self, sender_id: str, start: int, stop: int, driver: Any
                         ) -> list[dict[str, Any]]:
        _log_statement(_PG_EVENTS)
        return _parse_events(await driver.fetch(_PG_EVENTS, sender_id, start, stop))

    async def _pg_write(self, batch: list[_PendingTurn], driver: Any) -> dict[int, str]:
        """One statement per run of distinct senders; several in one transaction."""
        runs = _distinct_runs(batch)
        refused: dict[int, str] = {}
        async with driver.transaction() if len(runs) > 1 else contextlib.nullcontext():
            for start, run in runs:
                written = await self._pg_write_run(run, driver)
                refused.update((start + index, reason) for index, reason in written.items())
        return refused

    async def _pg_write_run(self, run: list[_PendingTurn], driver: Any) -> dict[int, str]:
        # the rows of every turn as if accepted: the statement writes those still current
        _, conversations, events = _accept(run, {i.sender_id: i.previous_count for i in run})
        _log_statement(_PG_WRITE)
        rows = await driver.fetch(
            _PG_WRITE, [item.sender_id for item in run], [item.previous_count for item in run],
            *_columns(conversations, "stack", "event_count", "updated_at", "state",
                      "window_start"),
            *_columns(events, "sender_id", "seq", "data"))
        stored = {row[0]: row[1] for row in rows}
        return {index: _refusal(item, stored[item.sender_id]) for index, item in enumerate(run)
                if stored[item.sender_id] != item.previous_count}

    async def senders(self) -> list[str]:
        """The ids of all stored conversations."""
        from sqlalchemy import select

        await self._init()
        column = self.conversations.c.sender_id
        return await self._run(lambda conn: [r[0] for r in conn.execute(select(column))])

    async def close(self) -> None:
        """Dispose of the database engine (the store may be used again afterwards)."""
        self._ready = False  # a store used again re-checks its tables (in-memory: new ones)
        if self._driver is not None:
            await self._driver.close()
        if self.engine is not None:
            await self.engine.dispose()
        if self._thread is not None and self._sync_engine is not None:
            thread, self._thread = self._thread, None
            try:
                await thread.run(self._dispose_sqlite)
            finally:
                thread.stop()

    def _dispose_sqlite(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            raw.close()  # back to the pool, which dispose() then closes
        assert self._sync_engine is not None
        self._sync_engine.dispose()
