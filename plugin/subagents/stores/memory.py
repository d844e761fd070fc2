"""In-memory tracker store (tests, `subagents test`)."""

from __future__ import annotations

import copy
from typing import Any

from subagents.stores.base import ConversationRecord, TrackerStore


class InMemoryTrackerStore(TrackerStore):
    """Keeps conversations in process memory (lost on restart)."""

    def __init__(self) -> None:
        self._data: dict[str, ConversationRecord] = {}

    async def load(self, sender_id: str) -> ConversationRecord:
        """A copy of the conversation of ``sender_id``; empty when there is none."""
        record = self._data.get(sender_id)
        return copy.deepcopy(record) if record else ConversationRecord(sender_id)

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int) -> None:
        """Append the turn's events and replace the stack.

        Raises:
            RuntimeError: Another turn changed the conversation since it was loaded.
        """
        record = self._data.setdefault(sender_id, ConversationRecord(sender_id))
        if len(record.events) != previous_count:
            raise RuntimeError(f"conversation {sender_id!r} changed while a turn ran")
        record.events.extend(copy.deepcopy(new_events))
        record.stack = copy.deepcopy(stack)

    async def senders(self) -> list[str]:
        """The ids of all stored conversations."""
        return list(self._data)
