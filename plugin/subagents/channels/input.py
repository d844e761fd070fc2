"""Input channels: how users reach the assistant (web widget, messaging platforms, custom).

An input channel turns what a platform sends into :meth:`Assistant.handle_message` calls and
gives the assistant an :class:`~subagents.types.OutputChannel` that answers on the same
platform. ``serve`` builds the channels listed in ``credentials.yml`` and mounts them beside its
REST API. A custom channel subclasses :class:`InputChannel` and is named in ``credentials.yml``
by its dotted path (``addons.my_channel.MyChannel``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

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


class BackgroundTurns:
    """Runs turns after a webhook has been answered (platforms expect a reply within seconds).

    A failing turn is logged, never raised; :meth:`drain` waits for the turns still running.
    """

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self._tasks: set[asyncio.Task[Any]] = set()

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
