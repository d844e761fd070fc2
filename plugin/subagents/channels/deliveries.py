"""Deliveries a platform webhook has handled, remembered where every worker and a restarted
server see them, so that a signed request played again (by the platform retrying, or by
someone who captured it) is acknowledged and not handled twice.

Where they are kept follows the assistant's stores: in Redis when the lock store is Redis
(``SET NX`` with an expiry), else in the tracker store's SQL database (table
``subagents_deliveries``, expired rows removed as new ones come), else in the process's memory
beside an in-memory tracker store.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels")

PRUNE_EVERY = 200
"""An SQL ledger removes its expired rows once every this many new deliveries."""
MEMORY_SIZE = 100_000
"""Deliveries a memory ledger remembers at most (the oldest are forgotten first)."""


def _key(kind: str, delivery: str) -> str:
    """A short, fixed-size key: the platform and a hash of its delivery id."""
    return f"{kind}:{hashlib.sha256(delivery.encode()).hexdigest()[:40]}"


class DeliveryLedger:
    """Remembers handled deliveries for a while."""

    async def first_time(self, kind: str, delivery: str, ttl: float) -> bool:
        """True the first time ``delivery`` of platform ``kind`` is seen (and remember it for
        ``ttl`` seconds); False when it was seen before."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""


class MemoryLedger(DeliveryLedger):
    """In this process only (beside an in-memory tracker store, which a restart loses too)."""

    def __init__(self, size: int = MEMORY_SIZE) -> None:
        self.size = size
        self._seen: OrderedDict[str, float] = OrderedDict()

    async def first_time(self, kind: str, delivery: str, ttl: float) -> bool:
        """See :meth:`DeliveryLedger.first_time`."""
        key, now = _key(kind, delivery), time.monotonic()
        expires = self._seen.get(key)
        if expires is not None and expires > now:
            return False
        self._seen[key] = now + ttl
        self._seen.move_to_end(key)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)
        return True


class RedisLedger(DeliveryLedger):
    """Keys ``subagents:delivery:<platform>:<hash>`` set only if absent, expiring after ttl."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    async def first_time(self, kind: str, delivery: str, ttl: float) -> bool:
        """See :meth:`DeliveryLedger.first_time`."""
        created = await self.redis.set(f"subagents:delivery:{_key(kind, delivery)}", b"1",
                                       nx=True, ex=max(1, int(ttl)))
        return bool(created)


class SQLLedger(DeliveryLedger):
    """Table ``subagents_deliveries`` (key, expiry) in the tracker store's database."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import Column, Float, MetaData, String, Table

        self.url = url
        self.meta = MetaData()
        self.table = Table("subagents_deliveries", self.meta,
                           Column("delivery", String(64), primary_key=True),
                           Column("expires_at", Float, nullable=False, index=True))
        self._engine: Any = None
        self._lock = asyncio.Lock()
        self._added = 0

    async def _conn(self) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        async with self._lock:
            if self._engine is None:
                if self.url.startswith("sqlite"):
                    path = self.url.split(":///", 1)[-1]
                    if path and path != ":memory:":
                        Path(path).parent.mkdir(parents=True, exist_ok=True)
                    engine = create_async_engine(self.url, hide_parameters=True,
                                                 connect_args={"timeout": 30})
                else:
                    engine = create_async_engine(self.url, hide_parameters=True,
                                                 pool_size=2, max_overflow=4)
                async with engine.begin() as conn:
                    await conn.run_sync(self.meta.create_all)
                self._engine = engine
        return self._engine

    async def first_time(self, kind: str, delivery: str, ttl: float) -> bool:
        """See :meth:`DeliveryLedger.first_time`."""
        from sqlalchemy import delete, insert
        from sqlalchemy.exc import IntegrityError

        engine, key, now = await self._conn(), _key(kind, delivery), time.time()
        t = self.table
        try:
            async with engine.begin() as conn:
                # an expired row of the same delivery makes room for it
                await conn.execute(delete(t).where(t.c.delivery == key, t.c.expires_at <= now))
                await conn.execute(insert(t).values(delivery=key, expires_at=now + ttl))
        except IntegrityError:
            return False
        self._added += 1
        if self._added % PRUNE_EVERY == 0:
            async with engine.begin() as conn:
                await conn.execute(delete(t).where(t.c.expires_at <= now))
        return True

    async def close(self) -> None:
        """Dispose of the engine."""
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.dispose()


def delivery_ledger(assistant: Assistant) -> DeliveryLedger:
    """The ledger beside the assistant's stores (see the module docstring)."""
    from subagents.stores.redis_lock import RedisLockStore

    if isinstance(assistant.lock_store, RedisLockStore):
        return RedisLedger(assistant.lock_store.client)
    url = getattr(assistant.tracker_store, "url", None)
    if isinstance(url, str) and url:
        return SQLLedger(url)
    log.info("channels.deliveries.in_memory")
    return MemoryLedger()
