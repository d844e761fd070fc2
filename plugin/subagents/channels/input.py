"""Input channels: how users reach the assistant (web widget, messaging platforms, custom).

An input channel turns what a platform sends into :meth:`Assistant.handle_message` calls and
gives the assistant an :class:`~subagents.types.OutputChannel` that answers on the same
platform. ``serve`` builds the channels listed in ``credentials.yml`` and mounts them beside its
REST API. A custom channel subclasses :class:`InputChannel` and is named in ``credentials.yml``
by its dotted path (``addons.my_channel.MyChannel``).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from subagents.exceptions import SubagentsError

if TYPE_CHECKING:
    from subagents.dialogue.processor import Assistant

log = structlog.get_logger("subagents.channels")


class InputChannel:
    """Base class of input channels. Override what the channel needs.

    ``routes`` adds HTTP routes (webhooks) under ``/webhooks/<name>/``; ``wrap`` may put an
    ASGI app in front of the server (Socket.IO does); ``startup``/``shutdown`` run with the
    server (e.g. to register a webhook with the platform).
    """

    name: ClassVar[str] = "custom"
    allowed_origins: Sequence[str] = ()
    """The browser origins the server allows (``serve --cors``); set before :meth:`wrap`."""

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        """Build the channel from its ``credentials.yml`` settings (``${VAR}`` already resolved)."""
        return cls()

    def url_prefix(self) -> str:
        """Where the channel's webhooks live."""
        return f"/webhooks/{self.name}"

    def routes(self, assistant: Assistant) -> list[BaseRoute]:
        """HTTP routes of this channel (none by default)."""
        return []

    def wrap(self, app: ASGIApp, assistant: Assistant) -> ASGIApp:
        """An ASGI app in front of ``app`` (``app`` itself by default)."""
        return app

    async def startup(self, assistant: Assistant) -> None:
        """Called once the server is listening."""

    async def shutdown(self) -> None:
        """Called when the server stops, after in-flight turns finished."""


MAX_TURNS_ENV = "SUBAGENTS_MAX_TURNS_IN_FLIGHT"
DEFAULT_MAX_TURNS = 100
RETRY_AFTER = 2
"""Seconds a client refused for being one turn too many is asked to wait (``Retry-After``)."""


class TurnLimiter:
    """The turns running in this worker, and how many may (``None``: no cap).

    A request that would start one turn too many is refused at once (HTTP 503 with
    ``Retry-After``) instead of slowing every turn in flight and the health check down.
    """

    def __init__(self, limit: int | None = DEFAULT_MAX_TURNS) -> None:
        self.limit = limit
        self.running = 0

    @classmethod
    def from_env(cls) -> TurnLimiter:
        """The cap of ``SUBAGENTS_MAX_TURNS_IN_FLIGHT`` (``0``: no cap), else the default.

        Raises:
            SubagentsError: the value is not a whole number (``server.max_turns_invalid``).
        """
        raw = os.environ.get(MAX_TURNS_ENV, "").strip()
        if not raw:
            return cls()
        if not raw.isdigit():
            raise SubagentsError(f"{MAX_TURNS_ENV}={raw!r} is not a whole number (0: no cap)",
                                 code="server.max_turns_invalid")
        return cls(int(raw) or None)

    @property
    def full(self) -> bool:
        """Whether a new turn would be one too many."""
        return self.limit is not None and self.running >= self.limit

    def try_acquire(self) -> bool:
        """Count a new turn in, unless that is one too many."""
        if self.full:
            return False
        self.running += 1
        return True

    def release(self) -> None:
        """A turn ended."""
        self.running -= 1

    def hold(self, task: asyncio.Future[Any]) -> None:
        """Count a turn already admitted in until ``task`` ends."""
        self.running += 1
        task.add_done_callback(lambda _: self.release())


def busy_response() -> JSONResponse:
    """503 with ``Retry-After``: the worker runs as many turns as it may."""
    return JSONResponse({"error": "too many turns in flight; try again shortly",
                         "code": "server.busy"}, status_code=503,
                        headers={"retry-after": str(RETRY_AFTER)})


class BackgroundTurns:
    """Runs turns after a webhook has been answered (platforms expect a reply within seconds).

    A failing turn is logged, never raised; :meth:`drain` waits for the turns still running.
    With a :attr:`limiter` (the server sets it), :meth:`admit` tells whether one more turn may
    start, and every turn started counts as in flight until it ends.
    """

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.limiter: TurnLimiter | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def admit(self) -> bool:
        """Whether one more turn may start now (answer the platform 503 otherwise)."""
        return self.limiter is None or not self.limiter.full

    def start(self, work: Awaitable[Any], sender: str) -> None:
        """Run ``work`` in the background."""

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("channels.turn.failed", channel=self.channel, sender=sender)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.limiter is not None:
            self.limiter.hold(task)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait (up to ``timeout`` seconds) for the turns still running."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


class RecentIds:
    """The last ``size`` message ids seen: a redelivered (replayed) message is recognised."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._seen: dict[str, None] = {}

    def seen(self, item: str) -> bool:
        """True if ``item`` was seen before; otherwise remember it and return False."""
        if item in self._seen:
            return True
        self._seen[item] = None
        if len(self._seen) > self.size:
            self._seen.pop(next(iter(self._seen)))
        return False


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` characters, at sentence boundaries.

    Paragraphs and sentences are packed greedily; a sentence longer than ``limit`` is cut at the
    last space that fits (or hard, when there is none).
    """
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    current = ""
    for sentence in (s.strip() for s in _SENTENCE_END.split(text)):
        if not sentence:
            continue
        for piece in _cut(sentence, limit):
            joined = f"{current} {piece}" if current else piece
            if len(joined) <= limit:
                current = joined
            else:
                parts.append(current)
                current = piece
    if current:
        parts.append(current)
    return parts


def _cut(sentence: str, limit: int) -> list[str]:
    pieces = []
    while len(sentence) > limit:
        cut = sentence.rfind(" ", 0, limit + 1)
        cut = cut if cut > 0 else limit
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    if sentence:
        pieces.append(sentence)
    return pieces


def buttons_as_text(text: str, buttons: list[dict[str, Any]]) -> str:
    """A message with numbered choices, for platforms without buttons (SMS)."""
    lines = [text] if text else []
    lines += [f"{index}. {button.get('title', '')}" for index, button in enumerate(buttons, 1)]
    return "\n".join(lines)
