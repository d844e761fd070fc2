"""Redis lock store: several workers share conversations (``pip install subagents[redis]``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import structlog

from subagents.stores.locks import LockStore, LockTimeoutError

if TYPE_CHECKING:
    from redis.asyncio.connection import AbstractConnection

log = structlog.get_logger("subagents.stores")

# a lock is a key holding its holder's random token; only the holder may extend or delete it
_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""
_SHA = {script: hashlib.sha1(script.encode()).hexdigest() for script in (_EXTEND, _RELEASE)}
_POLL_SECONDS = 0.1
"""How often a waiting message tries the lock again."""


class RedisLockStore(LockStore):
    """One Redis lock per sender. While a turn holds it, the lock's expiry is pushed forward
    every third of ``lock_timeout``, so a long turn never loses it; a worker that died stops
    extending and the lock frees itself after ``lock_timeout``.

    A lock costs two commands per turn (``SET NX PX``, then a compare-and-delete script); one
    background task per store extends every lock the worker holds. The commands run on
    redis-py connections this store keeps idle between commands, with the client's retry
    policy: the client's own pool and command layer cost more CPU than the round trip.
    """

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
        self._idle: list[AbstractConnection] = []
        self._generation = 0
        """Bumped by :meth:`close`: a connection out at that time is not kept afterwards."""
        self._held: dict[str, tuple[str, str]] = {}
        """Redis key -> (token, sender id) of each lock this store holds."""
        self._keeper: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def lock(self, sender_id: str) -> AsyncIterator[None]:
        """Hold the Redis lock of ``sender_id``, extending it while the turn runs.

        Raises:
            LockTimeoutError: The lock was not free within ``wait_timeout`` seconds.
        """
        key, token = f"subagents:lock:{sender_id}", os.urandom(16).hex()
        await self._acquire(key, token)
        self._held[key] = (token, sender_id)
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        try:
            yield
        finally:
            del self._held[key]
            if not self._held and self._keeper is not None:
                self._keeper.cancel()  # nothing left to extend
            with contextlib.suppress(Exception):
                await self._script(_RELEASE, key, token)

    async def _acquire(self, key: str, token: str) -> None:
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.wait_timeout
        expiry_ms = int(self.lock_timeout * 1000)
        while not await self._command("SET", key, token, "NX", "PX", expiry_ms):
            if loop.time() + _POLL_SECONDS > give_up_at:
                raise LockTimeoutError(
                    f"the conversation was busy for {self.wait_timeout:g}s")
            await asyncio.sleep(_POLL_SECONDS)

    async def _keep(self) -> None:
        """Push the expiry of every held lock forward, every third of ``lock_timeout``."""
        while self._held:
            await asyncio.sleep(self.lock_timeout / 3)
            for key, (token, sender_id) in list(self._held.items()):
                await self._extend_one(key, token, sender_id)

    async def _extend_one(self, key: str, token: str, sender_id: str) -> None:
        from redis.exceptions import RedisError

        try:
            extended = await self._script(_EXTEND, key, token, int(self.lock_timeout * 1000))
        except (RedisError, OSError) as exc:
            log.warning("store.lock.extend_failed", sender=sender_id,
                        error_type=type(exc).__name__)
            return
        if self._held.get(key, ("",))[0] != token:
            return  # released meanwhile
        if not extended:
            log.warning("store.lock.extend_failed", sender=sender_id, error_type="not_owned")
            return
        if self.on_extend is not None:
            self.on_extend(sender_id)

    async def _script(self, script: str, key: str, *args: Any) -> Any:
        """``script`` by its SHA1, sent whole when the server does not have it (yet)."""
        from redis.exceptions import NoScriptError

        try:
            return await self._command("EVALSHA", _SHA[script], 1, key, *args)
        except NoScriptError:
            return await self._command("EVAL", script, 1, key, *args)

    async def _command(self, *args: Any) -> Any:
        """One command and its raw reply, on an idle connection of this store (a new one when
        none is idle). Connection errors are retried as the client would; a connection that
        failed has already closed itself and connects again on its next command."""
        generation = self._generation
        pool = self.client.connection_pool  # its settings, not its checkout
        conn = self._idle.pop() if self._idle else pool.make_connection()  # type: ignore[no-untyped-call]

        async def send() -> Any:
            await conn.send_command(*args)
            return await conn.read_response()

        async def failed(error: Exception) -> None:
            await conn.disconnect()

        try:
            return await conn.retry.call_with_retry(send, failed)
        finally:
            if generation == self._generation:
                self._idle.append(conn)
            else:  # the store was closed meanwhile
                await conn.disconnect()

    async def close(self) -> None:
        """Stop extending and close the Redis client and connections."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        idle, self._idle = self._idle, []
        self._generation += 1
        for conn in idle:
            await conn.disconnect()
        await self.client.aclose()
