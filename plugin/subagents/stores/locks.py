"""Per-conversation locks: one sender's turns never interleave."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from .base import StoreError


class LockTimeoutError(StoreError):
    """A message waited too long for its conversation's lock (another turn held it)."""

    code = "store.lock_timeout"


class LockStore:
    def lock(self, sender_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class InProcessLockStore(LockStore):
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def lock(self, sender_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(sender_id, asyncio.Lock())
        self._users[sender_id] = self._users.get(sender_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[sender_id] -= 1
            if not self._users[sender_id]:
                del self._users[sender_id]
                self._locks.pop(sender_id, None)
