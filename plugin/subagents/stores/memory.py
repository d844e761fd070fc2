"""In-memory tracker store (tests, `subagents test`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from subagents.stores.base import ConversationRecord, TrackerStore


@dataclass
class _Stored:
    events: list[dict[str, Any]] = field(default_factory=list)
    stack: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] | None = None
    window_start: int = 0


class InMemoryTrackerStore(TrackerStore):
    """Keeps conversations in process memory (lost on restart)."""

    def __init__(self) -> None:
        self._data: dict[str, _Stored] = {}

    async def load(self, sender_id: str) -> ConversationRecord:
        """A copy of the conversation of ``sender_id`` (its window); empty when there is none."""
        stored = self._data.get(sender_id)
        if stored is None:
            return ConversationRecord(sender_id)
        start = min(stored.window_start, len(stored.events))
        return ConversationRecord(sender_id, copy.deepcopy(stored.events[start:]),
                                  copy.deepcopy(stored.stack), copy.deepcopy(stored.state),
                                  start)

    async def load_events(self, sender_id: str, start: int = 0,
                          stop: int | None = None) -> list[dict[str, Any]]:
        """A copy of the stored events from ``start`` up to ``stop``."""
        stored = self._data.get(sender_id)
        return copy.deepcopy(stored.events[start:stop]) if stored else []

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int, *,
                        state: dict[str, Any] | None = None, window_start: int = 0) -> None:
        """Append the turn's events and replace the stack (and the snapshot).

        Raises:
            RuntimeError: Another turn changed the conversation since it was loaded.
        """
        stored = self._data.setdefault(sender_id, _Stored())
        if len(stored.events) != previous_count:
            raise RuntimeError(f"conversation {sender_id!r} changed while a turn ran")
        stored.events.extend(copy.deepcopy(new_events))
        stored.stack = copy.deepcopy(stack)
        if state is not None:
            stored.state, stored.window_start = copy.deepcopy(state), window_start

    async def senders(self) -> list[str]:
        """The ids of all stored conversations."""
        return list(self._data)
