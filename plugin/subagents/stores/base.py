"""The tracker store interface: a conversation's events, stack and dialogue-state snapshot,
saved one turn at a time; a turn loads the snapshot and only the latest events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from subagents.exceptions import SubagentsError


class StoreError(SubagentsError):
    """A tracker store could not load or save a conversation (database down, locked, ...)."""

    code = "store.failed"


@dataclass
class ConversationRecord:
    """A conversation as a turn loads it.

    ``events`` are the stored events from position ``start`` on: the window the latest turn
    asked for (``window_start`` of :meth:`TrackerStore.save_turn`), all of them for a
    conversation stored without a snapshot. :meth:`TrackerStore.load_events` reads the others.
    """

    sender_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    stack: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] | None = None
    """The snapshot the latest turn that wrote one stored (None: never written). It may be
    behind the events: a write without a snapshot leaves the previous one."""
    start: int = 0
    """The position of ``events[0]`` in the conversation."""

    @property
    def count(self) -> int:
        """How many events the conversation has."""
        return self.start + len(self.events)


class TrackerStore:
    """``save_turn`` writes a turn's new events, the stack and the snapshot atomically: after a
    crash the conversation is exactly as it was after the last completed turn. Events are
    only ever appended; a stored event never changes."""

    async def load(self, sender_id: str) -> ConversationRecord:
        """The conversation of ``sender_id``: stack, snapshot and the events of its window;
        empty when there is none."""
        raise NotImplementedError

    async def load_events(self, sender_id: str, start: int = 0,
                          stop: int | None = None) -> list[dict[str, Any]]:
        """The stored events of ``sender_id`` from position ``start`` up to ``stop`` (excluded;
        None: to the end)."""
        raise NotImplementedError

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int, *,
                        state: dict[str, Any] | None = None, window_start: int = 0) -> None:
        """Append a turn's new events and replace the stack (and the snapshot) atomically.

        Args:
            sender_id: The conversation.
            new_events: Events the turn added.
            stack: The dialogue stack after the turn.
            previous_count: How many events the conversation had when the turn loaded it.
            state: The dialogue-state snapshot after the turn (JSON-shaped); None leaves the
                stored snapshot and window as they are.
            window_start: With ``state``: the position of the first event the next
                :meth:`load` returns.

        Raises:
            RuntimeError: The conversation no longer has ``previous_count`` events (another
                turn changed it).
        """
        raise NotImplementedError

    async def senders(self) -> list[str]:
        """The ids of all stored conversations."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release the store's resources."""
