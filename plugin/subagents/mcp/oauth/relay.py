"""Sign-in callbacks that reach another worker are handed over through Redis.

The call waiting for a user's consent, and the secret half of its PKCE exchange, live in the
worker that sent the sign-in link. Behind a load balancer without sticky sessions the user's
browser may come back to any worker. When the lock store is Redis, every ``subagents serve``
worker listens on one Redis channel: a worker that gets a callback whose ``state`` it does not
hold publishes the callback's parameters there, and the worker holding that state acknowledges
at once, finishes the sign-in exactly as if the browser had come to it (the code is exchanged,
the call runs, the conversation resumes where its channel allows), and reports the outcome for
the page the browser sees. A state nobody acknowledges within :data:`ACK_WAIT` seconds gets the
"expired" page.

A callback costs a worker nothing unless its state is real: every worker registers the states
it opens in Redis (a key named by the state's SHA-256, expiring after :data:`STATE_TTL`, removed
when the sign-in ends), and a callback whose state is not registered gets the "expired" page
after one ``EXISTS``. The relay's Redis connections come from a pool of its own of at most
:data:`MAX_CONNECTIONS`, so no flood of callbacks can take the Redis server's connections.

What crosses Redis is what the browser brought (state, code, issuer, error): no token, and a
code is useless without the PKCE verifier that never leaves its worker. Nothing is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from subagents.mcp.oauth.consent import ConsentRegistry
from subagents.retry import RetryPolicy, retry_call

log = structlog.get_logger("subagents.mcp")

CHANNEL = "subagents:oauth:callbacks"
"""The Redis channel every worker listens on for callbacks another worker received."""
ACK_WAIT = 5.0
"""Seconds a worker waits for the holder of a state to answer before it says "expired"."""
RESULT_WAIT = 70.0
"""Seconds it then waits for the holder to finish (the authorized call runs meanwhile)."""
PARAMS = ("state", "code", "iss", "error")
"""The callback's query parameters that are handed over."""
STATE_TTL = 3600
"""Seconds a registered state lives in Redis at most (it is removed when its sign-in ends)."""
MAX_CONNECTIONS = 16
"""Redis connections the relay of one worker uses at most (its listener's included)."""
POOL_WAIT = 5.0
"""Seconds a callback waits for one of them before it gets the "expired" page."""
LISTEN_RETRY_DELAY = 1.0
"""Seconds between a failure of the listener's connection and listening again."""
LISTEN_POLICY = RetryPolicy(attempts=None, retry_on=lambda error: isinstance(error, Exception),
                            delay=lambda _n, _error: LISTEN_RETRY_DELAY)
"""The listener never gives up: any failure of its connection is listened past."""


def _state_key(state: str) -> str:
    return f"subagents:oauth:state:{hashlib.sha256(state.encode()).hexdigest()}"


def bounded_client(redis: Any) -> Any:
    """A client with the settings of ``redis`` and a pool of its own of at most
    :data:`MAX_CONNECTIONS` connections (a caller waits up to :data:`POOL_WAIT` for one)."""
    from redis.asyncio import BlockingConnectionPool, Redis

    pool = redis.connection_pool
    return Redis(connection_pool=BlockingConnectionPool(
        connection_class=pool.connection_class, max_connections=MAX_CONNECTIONS,
        timeout=POOL_WAIT, **pool.connection_kwargs))


@dataclass(frozen=True)
class CallbackOutcome:
    """What became of a sign-in callback, for the page its browser sees."""

    server: str
    granted: bool
    resumed: bool = False
    """The conversation was resumed at once (its channel can send without a request)."""


Completer = Callable[[dict[str, str]], Awaitable[CallbackOutcome | None]]
"""Finishes a callback whose state this worker holds (None: it holds none)."""


class ConsentRelay:
    """Hands callbacks between the workers sharing one Redis (see the module's docstring)."""

    def __init__(self, redis: Any, complete: Completer, consents: ConsentRegistry) -> None:
        """Args:
            redis: A ``redis.asyncio.Redis`` client (the lock store's): its settings are used
                for a bounded pool of the relay's own.
            complete: Finishes a callback locally
                (:func:`subagents.server.oauth_callback.complete_callback`).
            consents: The sign-in links this worker sent that wait for a browser (the MCP
                pool's): the states it registers and the callbacks it takes over.
        """
        self.redis = bounded_client(redis)
        self.complete = complete
        self.consents = consents
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._registering: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen for callbacks other workers received, and register the states this worker
        opens from now on."""
        self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(CHANNEL)
        self._listener = asyncio.ensure_future(self._listen())
        self.consents.watch(self._opened, self._closed)

    def _opened(self, state: str) -> None:
        self._in_background(self.redis.set(_state_key(state), b"1", ex=STATE_TTL))

    def _closed(self, state: str) -> None:
        self._in_background(self.redis.delete(_state_key(state)))

    def _in_background(self, command: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await command
            except Exception as exc:  # noqa: BLE001 - a lost registration: that link expires
                log.warning("mcp.oauth.relay_register_failed", error_type=type(exc).__name__)

        task = asyncio.ensure_future(run())
        self._registering.add(task)
        task.add_done_callback(self._registering.discard)

    async def close(self) -> None:
        """Stop listening; callbacks being finished here run to their end first."""
        self.consents.unwatch(self._opened)
        if self._registering:
            await asyncio.wait(set(self._registering), timeout=POOL_WAIT)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._serving:
            await asyncio.wait(set(self._serving), timeout=RESULT_WAIT)
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None
        with contextlib.suppress(Exception):
            await self.redis.aclose()

    async def _listen(self) -> None:
        """Hear the channel until the relay closes; a broken connection is listened on again
        :data:`LISTEN_RETRY_DELAY` seconds later (the client reconnects on the next read)."""
        async def listen() -> None:
            try:
                async for message in self._pubsub.listen():
                    self._received(message)
            except Exception as exc:
                log.warning("mcp.oauth.relay_listen_failed", error_type=type(exc).__name__)
                raise

        await retry_call(listen, LISTEN_POLICY)

    def _received(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        try:
            request = json.loads(message["data"])
            params = {k: str(request[k]) for k in PARAMS if isinstance(request.get(k), str)}
            reply = str(request["reply"])
        except (KeyError, TypeError, ValueError):
            log.warning("mcp.oauth.relay_bad_message")
            return
        consent = self.consents.pending(params.get("state", ""))
        if consent is None:
            return  # another worker's (or nobody's)
        task = asyncio.ensure_future(self._serve(params, reply, consent.server))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, params: dict[str, str], reply: str, server: str) -> None:
        try:
            await self.redis.publish(reply, json.dumps({"kind": "ack", "server": server}))
            outcome = await self.complete(params)
            await self.redis.publish(reply, json.dumps({
                "kind": "done", "outcome": asdict(outcome) if outcome else None}))
            log.info("mcp.oauth.relay_completed", granted=bool(outcome and outcome.granted))
        except Exception as exc:  # noqa: BLE001 - the waiting worker times out and says so
            log.warning("mcp.oauth.relay_failed", error_type=type(exc).__name__)

    async def forward(self, params: dict[str, str]) -> CallbackOutcome | None:
        """Hand a callback this worker holds no state for to the worker that does.

        Returns the outcome, or None when no worker holds the state (or Redis failed).
        """
        try:  # a state no worker registered costs one command, nothing more
            if not await self.redis.exists(_state_key(params.get("state", ""))):
                return None
        except Exception as exc:  # noqa: BLE001 - the page says "expired"; the log says why
            log.warning("mcp.oauth.relay_forward_failed", error_type=type(exc).__name__)
            return None
        reply = f"{CHANNEL}:reply:{uuid.uuid4().hex}"
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(reply)
            await self.redis.publish(CHANNEL, json.dumps({**params, "reply": reply}))
            ack = await _next(pubsub, ACK_WAIT)
            if ack is None:
                return None
            done = await _next(pubsub, RESULT_WAIT)
        except Exception as exc:  # noqa: BLE001 - the page says "expired"; the log says why
            log.warning("mcp.oauth.relay_forward_failed", error_type=type(exc).__name__)
            return None
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
        if done is None:  # still running over there: the code was handed over
            return CallbackOutcome(server=str(ack.get("server", "")),
                                   granted=not params.get("error") and bool(params.get("code")))
        outcome = done.get("outcome")
        if not isinstance(outcome, dict):
            return None
        return CallbackOutcome(server=str(outcome.get("server", "")),
                               granted=bool(outcome.get("granted")),
                               resumed=bool(outcome.get("resumed")))


async def _next(pubsub: Any, timeout: float) -> dict[str, Any] | None:
    """The next message on ``pubsub`` as JSON, or None after ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    data = json.loads(message["data"])
                    return data if isinstance(data, dict) else {}
    except TimeoutError:
        return None
    return None
