"""The state of one conversation during one turn: latest events, new events, slots, stack."""

from __future__ import annotations

from typing import Any

from subagents.config.domain import Domain
from subagents.dialogue.history import LoadEvents, Snapshot
from subagents.dialogue.stack import Stack
from subagents.types import CallScope, EarlierEvents, OutputChannel


def _initial_slots(domain: Domain) -> dict[str, Any]:
    return {name: definition.initial_value for name, definition in domain.slots.items()}


def slots_from_events(domain: Domain, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Replay ``slot`` events (and restarts) over the domain's initial values."""
    slots = {name: definition.initial_value for name, definition in domain.slots.items()}
    for event in events:
        if event.get("event") == "slot":
            slots[event["name"]] = event.get("value")
        elif event.get("event") in ("restart", "reset_slots"):
            slots = {name: d.initial_value for name, d in domain.slots.items()}
    return slots


class Turn:
    """One conversation while one user turn runs.

    Args:
        sender_id: The conversation.
        events: Its latest events (all of them unless ``start`` says where they begin).
        stack: Its dialogue stack.
        domain: The project's domain (initial slot values).
        channel: Where messages go while the turn runs (None: recorded only).
        metadata: The message's metadata.
        scope: What the turn's model and tool calls get: its deadline, where usage is counted
            and, for a recorded conversation, where the calls are recorded.
        snapshot: The conversation's dialogue state after ``events`` (None: worked out from
            ``events``, which then are all of them).
        start: The position of ``events[0]`` in the conversation.
        load_events: Reads the stored events before ``start`` (:meth:`all_events`).
    """

    def __init__(self, sender_id: str, events: list[dict[str, Any]], stack: Stack,
                 domain: Domain, channel: OutputChannel | None,
                 metadata: dict[str, Any] | None = None, *,
                 scope: CallScope | None = None, snapshot: Snapshot | None = None,
                 start: int = 0, load_events: LoadEvents | None = None) -> None:
        self.sender_id = sender_id
        self.scope = scope or CallScope()
        self.start = start
        """The position of ``events[0]`` in the conversation (0 once all are loaded)."""
        self.previous_count = start + len(events)
        self.events = list(events)
        """The conversation's latest events, then this turn's."""
        self.new_events: list[dict[str, Any]] = []
        self.stack = stack
        self.domain = domain
        self.snapshot = snapshot if snapshot is not None else Snapshot.of_events(self.events)
        self.slots = self.snapshot.slot_values(_initial_slots(domain))
        self._load_events = load_events
        self.channel = channel
        self.metadata = metadata or {}
        self.user_text = ""
        self.stamp: dict[str, Any] = {}
        """step_id / active_flow stamped on events produced while a step runs."""
        self.flow_completed = False
        self.pending_channel_events: list[dict[str, Any]] = []
        self.agent_ran = False
        self.rejected_values: dict[str, Any] = {}
        """Slot -> a value a command gave that does not fit the slot's type."""

    async def all_events(self) -> list[dict[str, Any]]:
        """Every event of the conversation, this turn's included (:attr:`events` from then on:
        the stored events before the window are loaded on the first call)."""
        if self.start > 0 and self._load_events is not None:
            self.events[:0] = await self._load_events(0, self.start)
            self.start = 0
        return self.events

    def earlier(self) -> EarlierEvents:
        """What the conversation's events before :attr:`events` add up to."""
        if self.start == 0:
            return EarlierEvents()
        return self.snapshot.earlier.for_agent(self.start)

    def add(self, event: dict[str, Any]) -> dict[str, Any]:
        """Record a new event (stamped with the running step); a ``slot`` event sets the slot."""
        if self.stamp:
            meta = event.setdefault("metadata", {})
            if isinstance(meta, dict):
                for key, value in self.stamp.items():
                    meta.setdefault(key, value)
        self.new_events.append(event)
        self.events.append(event)
        self.snapshot.apply(event, self.start + len(self.events) - 1)
        if event.get("event") == "slot":
            self.slots[event["name"]] = event.get("value")
            self.pending_channel_events.append(event)
        elif event.get("event") in ("restart", "reset_slots"):
            self.slots = _initial_slots(self.domain)
        return event

    def stored_state(self) -> tuple[dict[str, Any], int]:
        """The snapshot to store with the turn, and where the next turn's window starts."""
        window_start = self.snapshot.advance(self.events, self.start)
        return self.snapshot.to_dict(), window_start

    async def flush_channel_events(self) -> None:
        """Tell the channel about slot changes (debug shell, SSE stream)."""
        events, self.pending_channel_events = self.pending_channel_events, []
        if self.channel is not None:
            for event in events:
                await self.channel.send_event(self.sender_id, event)
