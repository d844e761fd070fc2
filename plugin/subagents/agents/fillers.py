"""What the user sees while tools run: progress messages and the filler policy.

* **Progress.** An MCP call that reports progress gets a short message in the channel (the
  server's progress message, or "Still working on it (2/5)"), at most one per
  ``progress_interval`` seconds per run; streamed where the channel streams. Progress messages
  are status, not conversation: they are not recorded and the model never sees them.
* **Latency-aware fillers.** With ``filler_fast_tool_ms`` set, the text the model writes beside
  tool calls is held back when every called tool usually answers faster than that (the median
  of its last durations, measured per tool by the agent, after a few calls).
* **No repeats.** A filler worded like one already sent in the conversation is not sent again.
"""

from __future__ import annotations

import asyncio
import functools
import re
import statistics
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import structlog

from subagents.types import OutputChannel, TrackerEvent

log = structlog.get_logger("subagents.agent.fillers")

MAX_PROGRESS_CHARS = 200
MIN_SAMPLES = 3
"""Calls of a tool measured before its latency counts."""
_WINDOW = 20
_WORDS = re.compile(r"\w+")


class LatencyBook:
    """Recent durations per tool (one book per agent, shared by its runs)."""

    def __init__(self) -> None:
        self._durations: dict[str, deque[float]] = {}

    def observe(self, tool: str, duration_ms: float) -> None:
        """Record one call of ``tool``."""
        seen = self._durations.get(tool)
        if seen is None:
            seen = self._durations[tool] = deque(maxlen=_WINDOW)
        seen.append(duration_ms)

    def usually_faster(self, tools: list[str], limit_ms: float) -> bool:
        """Whether every one of ``tools`` has been measured enough and usually answers within
        ``limit_ms``."""
        if not tools:
            return False
        for tool in tools:
            seen = self._durations.get(tool)
            if seen is None or len(seen) < MIN_SAMPLES or statistics.median(seen) > limit_ms:
                return False
        return True


@functools.lru_cache(maxsize=1024)
def _wording(text: str) -> str:
    return " ".join(_WORDS.findall(text.casefold()))


class FillerMemory:
    """The wordings of the fillers sent in a conversation (one memory per run).

    They are collected once per run; later questions look only at the events added since
    (events are only ever appended)."""

    __slots__ = ("_scan", "_wordings")

    def __init__(self) -> None:
        self._wordings: set[str] = set()
        self._scan = (0, 0)

    def said_before(self, text: str, earlier: Sequence[TrackerEvent],
                    this_run: Sequence[TrackerEvent], before: Sequence[str] = ()) -> bool:
        """Whether a filler worded like ``text`` was already sent: in the conversation's
        ``earlier`` events, in the events ``this_run`` recorded, or among the filler texts
        ``before`` (those of the conversation's events before ``earlier``)."""
        wording = _wording(text)
        if not wording:
            return False
        seen_input, seen_run = self._scan
        if not seen_input:  # the first look: the fillers before the earlier events too
            self._wordings.update(_wording(before_text) for before_text in before)
        _collect_fillers(earlier, seen_input, self._wordings)
        _collect_fillers(this_run, seen_run, self._wordings)
        self._scan = (len(earlier), len(this_run))
        return wording in self._wordings


def _collect_fillers(events: Sequence[Any], start: int, wordings: set[str]) -> None:
    for index in range(start, len(events)):
        event = events[index]
        if event.get("event") != "bot":
            continue
        meta = event.get("metadata") or {}
        if meta.get("agent_message_type") == "filler_message":
            wordings.add(_wording(str(event.get("text") or "")))


class ProgressReporter:
    """Turns progress notifications of a run's calls into rate-limited messages."""

    def __init__(self, channel: OutputChannel | None, recipient: str | None, interval: float,
                 *, agent: str) -> None:
        self.channel = channel
        self.recipient = recipient
        self.interval = interval
        self.agent = agent
        self._last: float | None = None
        self._lock = asyncio.Lock()
        self.sent = 0

    async def __call__(self, tool: str, progress: float, total: float | None,
                       message: str | None) -> None:
        """Send a short progress message for ``tool``, at most one per interval."""
        channel, recipient = self.channel, self.recipient
        if channel is None or recipient is None:
            return
        async with self._lock:  # calls running side by side never interleave their messages
            now = time.monotonic()
            if self._last is not None and now - self._last < self.interval:
                return
            self._last = now
            self.sent += 1
            await _send(channel, recipient, _progress_text(progress, total, message))
        log.debug("agent.progress.sent", agent=self.agent, tool=tool)


def _progress_text(progress: float, total: float | None, message: str | None) -> str:
    text = " ".join((message or "").split())
    if not text:
        text = (f"Still working on it ({progress:g}/{total:g})." if total
                else "Still working on it.")
    return text[:MAX_PROGRESS_CHARS]


async def _send(channel: OutputChannel, recipient: str, text: str) -> None:
    if channel.wants_streaming():
        await channel.send_response_chunk_start(recipient)
        await channel.send_response_chunk(recipient, text)
        await channel.send_response_chunk_end(recipient)
    else:
        await channel.send_text_message(recipient, text)


def progress_sink(channel: OutputChannel | None, recipient: str | None, configuration: Any,
                  agent: str) -> ProgressReporter | None:
    """A run's progress reporter, or None when progress messages are off."""
    if not configuration.progress_messages:
        return None
    return ProgressReporter(channel, recipient, configuration.progress_interval, agent=agent)
