"""The state of one conversation during one turn: events so far, new events, slots, stack."""

from __future__ import annotations

from typing import Any

from subagents.config.domain import Domain
from subagents.dialogue.stack import Stack
from subagents.types import CallScope, OutputChannel


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
        events: Its events so far.
        stack: Its dialogue stack.
        domain: The project's domain (initial slot values).
        channel: Where messages go while the turn runs (None: recorded only).
        metadata: The message's metadata.
        scope: What the turn's model and tool calls get: its deadline, where usage is counted
            and, for a recorded conversation, where the calls are recorded.
    """

    def __init__(self, sender_id: str, events: list[dict[str, Any]], stack: Stack,
                 domain: Domain, channel: OutputChannel | None,
                 metadata: dict[str, Any] | None = None, *,
                 scope: CallScope | None = None) -> None:
        self.sender_id = sender_id
        self.scope = scope or CallScope()
        self.previous_count = len(events)
        self.events = list(events)
        self.new_events: list[dict[str, Any]] = []
        self.stack = stack
        self.domain = domain
        self.slots = slots_from_events(domain, events)
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

    def add(self, event: dict[str, Any]) -> dict[str, Any]:
        """Record a new event (stamped with the running step); a ``slot`` event sets the slot."""
        if self.stamp:
            meta = event.setdefault("metadata", {})
            if isinstance(meta, dict):
                for key, value in self.stamp.items():
                    meta.setdefault(key, value)
        self.new_events.append(event)
        self.events.append(event)
        if event.get("event") == "slot":
            self.slots[event["name"]] = event.get("value")
            self.pending_channel_events.append(event)
        elif event.get("event") in ("restart", "reset_slots"):
            self.slots = slots_from_events(self.domain, [])
        return event

    async def flush_channel_events(self) -> None:
        """Tell the channel about slot changes (debug shell, SSE stream)."""
        events, self.pending_channel_events = self.pending_channel_events, []
        if self.channel is not None:
            for event in events:
                await self.channel.send_event(self.sender_id, event)
