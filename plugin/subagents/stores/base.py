"""The tracker store interface: a conversation's events and stack, saved one turn at a time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from subagents.exceptions import SubagentsError


class StoreError(SubagentsError):
    """A tracker store could not load or save a conversation (database down, locked, ...)."""

    code = "store.failed"


@dataclass
class ConversationRecord:
    """A conversation's stored events and dialogue stack."""

    sender_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    stack: list[dict[str, Any]] = field(default_factory=list)


class TrackerStore:
    """``save_turn`` writes a turn's new events and the stack atomically: after a crash the
    conversation is exactly as it was after the last completed turn."""

    async def load(self, sender_id: str) -> ConversationRecord:
        """The conversation of ``sender_id``; empty when there is none."""
        raise NotImplementedError

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int) -> None:
        """Append a turn's new events and replace the stack atomically.

        Args:
            sender_id: The conversation.
            new_events: Events the turn added.
            stack: The dialogue stack after the turn.
            previous_count: How many events the conversation had when the turn loaded it.
        """
        raise NotImplementedError

    async def senders(self) -> list[str]:
        """The ids of all stored conversations."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release the store's resources."""
