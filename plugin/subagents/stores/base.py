"""The tracker store interface: a conversation's events and stack, saved one turn at a time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..exceptions import SubagentsError


class StoreError(SubagentsError):
    """A tracker store could not load or save a conversation (database down, locked, ...)."""

    code = "store.failed"


@dataclass
class ConversationRecord:
    sender_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    stack: list[dict[str, Any]] = field(default_factory=list)


class TrackerStore:
    """``save_turn`` writes a turn's new events and the stack atomically: after a crash the
    conversation is exactly as it was after the last completed turn."""

    async def load(self, sender_id: str) -> ConversationRecord:
        raise NotImplementedError

    async def save_turn(self, sender_id: str, new_events: list[dict[str, Any]],
                        stack: list[dict[str, Any]], previous_count: int) -> None:
        raise NotImplementedError

    async def senders(self) -> list[str]:
        raise NotImplementedError

    async def close(self) -> None:
        return None
