"""Per-conversation locks: one sender's turns never interleave."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from subagents.stores.base import StoreError


class LockTimeoutError(StoreError):
    """A message waited too long for its conversation's lock (another turn held it)."""

    code = "store.lock_timeout"


class LockStore:
    """Serializes the turns of one conversation."""

    def lock(self, sender_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A context manager that holds the lock of ``sender_id``."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release the store's resources."""


class InProcessLockStore(LockStore):
    """Locks of one process; a message waits at most ``wait_timeout`` seconds for its turn."""

    def __init__(self, *, wait_timeout: float = 60.0) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self.wait_timeout = wait_timeout

    @contextlib.asynccontextmanager
    async def lock(self, sender_id: str) -> AsyncIterator[None]:
        """Hold the lock of ``sender_id``.

        Raises:
            LockTimeoutError: The lock was not free within ``wait_timeout`` seconds.
        """
        lock = self._locks.setdefault(sender_id, asyncio.Lock())
        others = self._users.get(sender_id, 0)
        self._users[sender_id] = others + 1
        try:
            try:
                if not others:  # nobody holds or waits for it: taken at once, no timer needed
                    await lock.acquire()
                else:
                    async with asyncio.timeout(self.wait_timeout):
                        await lock.acquire()
            except TimeoutError:
                raise LockTimeoutError(
                    f"the conversation was busy for {self.wait_timeout:g}s") from None
            try:
                yield
            finally:
                lock.release()
        finally:
            self._users[sender_id] -= 1
            if not self._users[sender_id]:
                del self._users[sender_id]
                self._locks.pop(sender_id, None)
