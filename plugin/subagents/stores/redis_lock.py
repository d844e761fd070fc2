"""Redis lock store: several workers share conversations (``pip install subagents[redis]``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from .locks import LockStore


class RedisLockStore(LockStore):
    def __init__(self, *, url: str | None = None, host: str = "localhost", port: int = 6379,
                 db: int = 0, lock_timeout: float = 120.0, wait_timeout: float = 60.0) -> None:
        from redis.asyncio import Redis

        self.client = Redis.from_url(url) if url else Redis(host=host, port=port, db=db)
        self.lock_timeout = lock_timeout
        self.wait_timeout = wait_timeout

    @contextlib.asynccontextmanager
    async def lock(self, sender_id: str) -> AsyncIterator[None]:
        lock = self.client.lock(f"subagents:lock:{sender_id}", timeout=self.lock_timeout,
                                blocking_timeout=self.wait_timeout)
        acquired = await lock.acquire()
        if not acquired:
            raise TimeoutError(f"conversation {sender_id!r} is locked by another worker")
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                await lock.release()

    async def close(self) -> None:
        await self.client.aclose()
