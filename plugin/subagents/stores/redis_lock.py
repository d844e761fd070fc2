"""Redis lock store: several workers share conversations (``pip install subagents[redis]``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import structlog

from .locks import LockStore, LockTimeoutError

log = structlog.get_logger("subagents.stores")


class RedisLockStore(LockStore):
    """One Redis lock per sender. While a turn holds it, the lock's expiry is pushed forward
    every third of ``lock_timeout``, so a long turn never loses it; a worker that died stops
    extending and the lock frees itself after ``lock_timeout``."""

    def __init__(self, *, url: str | None = None, host: str = "localhost", port: int = 6379,
                 db: int = 0, lock_timeout: float = 120.0, wait_timeout: float = 60.0,
                 on_extend: Callable[[str], None] | None = None) -> None:
        """Args:
            url: ``redis://host:port/db``; else host, port and db.
            lock_timeout: Seconds a lock lives unless the turn holding it extends it.
            wait_timeout: Seconds a message waits for its sender's lock.
            on_extend: Called with the sender id each time a held lock was extended.
        """
        from redis.asyncio import Redis

        self.client = Redis.from_url(url) if url else Redis(host=host, port=port, db=db)
        self.lock_timeout = lock_timeout
        self.wait_timeout = wait_timeout
        self.on_extend = on_extend

    @contextlib.asynccontextmanager
    async def lock(self, sender_id: str) -> AsyncIterator[None]:
        """Hold the Redis lock of ``sender_id``, extending it while the turn runs.

        Raises:
            LockTimeoutError: The lock was not free within ``wait_timeout`` seconds.
        """
        lock = self.client.lock(f"subagents:lock:{sender_id}", timeout=self.lock_timeout,
                                blocking_timeout=self.wait_timeout)
        acquired = await lock.acquire()
        if not acquired:
            raise LockTimeoutError(f"the conversation was busy for {self.wait_timeout:g}s")
        keeper = asyncio.ensure_future(self._keep(lock, sender_id))
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            with contextlib.suppress(Exception):
                await lock.release()

    async def _keep(self, lock: object, sender_id: str) -> None:
        """Push the lock's expiry forward until cancelled."""
        from redis.exceptions import RedisError

        while True:
            await asyncio.sleep(self.lock_timeout / 3)
            try:
                await lock.reacquire()  # type: ignore[attr-defined]
            except (RedisError, OSError) as exc:
                log.warning("store.lock.extend_failed", sender=sender_id,
                            error_type=type(exc).__name__)
                continue
            if self.on_extend is not None:
                self.on_extend(sender_id)

    async def close(self) -> None:
        """Close the Redis client."""
        await self.client.aclose()
