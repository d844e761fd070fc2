"""A conversation between turns: the dialogue-state snapshot stored with every turn, and the
window of latest events a turn loads with it.

A turn needs the conversation's state (slot values, which agents ran and in which flow, the
recording switch, ...), the latest messages its prompts read, and the events it adds. It does
not need the whole history: the snapshot (:class:`Snapshot`) holds what the turn would
otherwise work out from every event, and the store returns only the events of the window,
from the first of the latest ``lines`` transcript lines (user messages and bot texts) on,
the latest two user messages at least. The events before the window add up to a summary
(:class:`Earlier`: the model usage and tool calls of a per-conversation budget, the latest
fillers, agent runs still open) that the snapshot carries.

Events are the record; the snapshot is derived from them. A conversation stored without one
(by an earlier version), with one of another format, or with one that is behind its events
(a write that added events without a snapshot) loads its events whole once and the snapshot
is worked out again (:func:`load_conversation`).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from subagents.recording import turn as recording
from subagents.stores.base import ConversationRecord, TrackerStore
from subagents.types import EarlierEvents

SNAPSHOT_VERSION = 1
WINDOW_LINES = 20
"""The fewest transcript lines a window holds: the command generator's transcript (20 lines)
and an agent's history (10 messages) read no more."""
FILLERS_KEPT = 50
"""Filler texts the summary of the events before the window keeps (the latest)."""
_USAGE_KEYS = ("calls", "input_tokens", "output_tokens")

Event = dict[str, Any]
LoadEvents = Callable[[int, int], Awaitable[list[Event]]]
"""``(start, stop)`` -> the stored events from ``start`` up to ``stop`` (excluded)."""


@dataclass
class Earlier:
    """What the events before the window add up to (a turn does not load them)."""

    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    """Model -> calls, input_tokens, output_tokens (as the turns' closing events record)."""
    tool_calls: int = 0
    fillers: list[str] = field(default_factory=list)
    open_runs: list[str] = field(default_factory=list)
    """Agents whose latest run had started and not completed at the window's start."""

    def fold(self, event: Event) -> None:
        """Add one event (the next before the window's new start)."""
        kind = event.get("event")
        metadata = event.get("metadata")
        if kind == "action" and isinstance(metadata, dict) and isinstance(
                metadata.get("usage"), dict):
            for model, counts in metadata["usage"].items():
                entry = self.usage.setdefault(str(model), dict.fromkeys(_USAGE_KEYS, 0))
                for key in _USAGE_KEYS:
                    entry[key] += int((counts or {}).get(key, 0))
        elif kind == "mcp_tool_executed":
            self.tool_calls += 1
        elif kind == "bot" and isinstance(metadata, dict) \
                and metadata.get("agent_message_type") == "filler_message":
            self.fillers = [*self.fillers, str(event.get("text") or "")][-FILLERS_KEPT:]
        elif kind == "agent_started" and event.get("agent_id") not in self.open_runs:
            self.open_runs = [*self.open_runs, str(event.get("agent_id"))]
        elif kind == "agent_completed":
            self.open_runs = [a for a in self.open_runs if a != event.get("agent_id")]

    def for_agent(self, count: int) -> EarlierEvents:
        """The summary as an agent input carries it (``count`` events before its own)."""
        return EarlierEvents(count=count, usage=copy.deepcopy(self.usage),
                             tool_calls=self.tool_calls, fillers=list(self.fillers),
                             open_runs=list(self.open_runs))


@dataclass
class Snapshot:
    """The dialogue state after the conversation's first ``count`` events (the stack is
    stored beside it)."""

    lines: int = WINDOW_LINES
    """Transcript lines the window keeps (the project's prompts read no more)."""
    count: int = 0
    slots: dict[str, Any] = field(default_factory=dict)
    """Slot values set since the last restart (the others have the domain's initial value)."""
    filled: list[str] = field(default_factory=list)
    """Slots that were ever set."""
    agents: dict[str, str] = field(default_factory=dict)
    """Agent -> its latest ``agent_started`` or ``agent_completed``."""
    started_in: dict[str, str | None] = field(default_factory=dict)
    """Agent -> the flow of its latest ``agent_started``."""
    completed_in: list[list[str | None]] = field(default_factory=list)
    """``[agent, flow]`` pairs with an ``agent_completed``."""
    recording: bool | None = None
    """The conversation's recording switch (None: never switched)."""
    line_positions: list[int] = field(default_factory=list)
    """Positions of the latest ``lines`` transcript lines."""
    user_positions: list[int] = field(default_factory=list)
    """Positions of the latest two user messages."""
    window_start: int = 0
    """Where the stored window starts: ``earlier`` sums up the events before it."""
    earlier: Earlier = field(default_factory=Earlier)

    # ------------------------------------------------------------------ events
    def apply(self, event: Event, position: int) -> None:
        """Take the event at ``position`` (the next one) into the state."""
        kind = event.get("event")
        if kind == "slot":
            name = str(event.get("name"))
            self.slots[name] = event.get("value")
            if name not in self.filled:
                self.filled.append(name)
        elif kind in ("restart", "reset_slots"):
            self.slots = {}
        elif kind == "agent_started":
            agent = str(event.get("agent_id"))
            self.agents[agent] = kind
            self.started_in[agent] = event.get("flow_id")
        elif kind == "agent_completed":
            agent = str(event.get("agent_id"))
            self.agents[agent] = kind
            pair = [agent, event.get("flow_id")]
            if pair not in self.completed_in:
                self.completed_in.append(pair)
        elif kind == "action":
            if recording.is_switch_event(event):
                self.recording = bool(event["metadata"][recording.SWITCH_KEY])
        elif kind == "user":
            self.line_positions = _latest(self.line_positions, position, self.lines)
            self.user_positions = _latest(self.user_positions, position, 2)
        elif kind == "bot" and event.get("text"):
            self.line_positions = _latest(self.line_positions, position, self.lines)
        self.count = position + 1

    def apply_all(self, events: Iterable[Event], start: int) -> None:
        """Take ``events`` (from position ``start`` on) into the state."""
        for offset, event in enumerate(events):
            self.apply(event, start + offset)

    def next_window_start(self) -> int:
        """Where the window the next turn loads starts."""
        if len(self.line_positions) < self.lines or len(self.user_positions) < 2:
            return self.window_start  # the conversation is still shorter than a window
        return max(min(self.line_positions[0], self.user_positions[0]), self.window_start)

    def advance(self, events: list[Event], start: int) -> int:
        """Move the window's start to :meth:`next_window_start`, summing up the events it
        leaves behind (``events`` hold the conversation from position ``start`` on)."""
        new_start = self.next_window_start()
        for position in range(self.window_start, new_start):
            self.earlier.fold(events[position - start])
        self.window_start = new_start
        return new_start

    # ------------------------------------------------------------------ questions
    def slot_values(self, initial: dict[str, Any]) -> dict[str, Any]:
        """Every slot's value: the domain's initial ones, then those set since a restart."""
        return {**initial, **self.slots}

    def completed_agents(self) -> list[str]:
        """Agents whose latest started/completed event is a completion."""
        return [agent for agent, kind in self.agents.items() if kind == "agent_completed"]

    def completed_in_flow(self, agent: str, flow_id: str) -> bool:
        """Whether ``agent`` completed a run started by ``flow_id``."""
        return [agent, flow_id] in self.completed_in

    # ------------------------------------------------------------------ stored form
    def to_dict(self) -> dict[str, Any]:
        """The JSON-shaped form the store keeps."""
        return {"v": SNAPSHOT_VERSION, "lines": self.lines, "count": self.count,
                "slots": self.slots, "filled": self.filled, "agents": self.agents,
                "started_in": self.started_in, "completed_in": self.completed_in,
                "recording": self.recording, "line_positions": self.line_positions,
                "user_positions": self.user_positions,
                "earlier": {"usage": self.earlier.usage, "tool_calls": self.earlier.tool_calls,
                            "fillers": self.earlier.fillers,
                            "open_runs": self.earlier.open_runs}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], window_start: int) -> Snapshot:
        """The snapshot stored as ``data`` with a window starting at ``window_start``.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not a snapshot of this format.
        """
        if data.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot format {data.get('v')!r}")
        earlier = data["earlier"]
        return cls(lines=int(data["lines"]), count=int(data["count"]), slots=dict(data["slots"]),
                   filled=list(data["filled"]), agents=dict(data["agents"]),
                   started_in=dict(data["started_in"]),
                   completed_in=[list(p) for p in data["completed_in"]],
                   recording=data["recording"],
                   line_positions=[int(p) for p in data["line_positions"]],
                   user_positions=[int(p) for p in data["user_positions"]],
                   window_start=window_start,
                   earlier=Earlier(usage={str(m): dict(c) for m, c in earlier["usage"].items()},
                                   tool_calls=int(earlier["tool_calls"]),
                                   fillers=list(earlier["fillers"]),
                                   open_runs=list(earlier["open_runs"])))

    @classmethod
    def of_events(cls, events: list[Event], lines: int = WINDOW_LINES) -> Snapshot:
        """The snapshot after ``events`` (a whole conversation), its window not yet moved."""
        snapshot = cls(lines=lines)
        snapshot.apply_all(events, 0)
        return snapshot


def _latest(positions: list[int], position: int, keep: int) -> list[int]:
    """``positions`` and ``position``, the latest ``keep`` of them."""
    return [*positions, position][-keep:]


@dataclass
class LoadedConversation:
    """What a turn starts from: the stack, the snapshot, the window's events."""

    record: ConversationRecord
    snapshot: Snapshot
    events: list[Event]
    start: int
    """The position of ``events[0]``."""


async def load_conversation(store: TrackerStore, sender_id: str,
                            lines: int = WINDOW_LINES) -> LoadedConversation:
    """The conversation as a turn needs it: its stored snapshot and window, brought up to
    date with the events written after the snapshot; loaded whole and worked out again when
    the snapshot is missing, of another format or window size, or does not fit the events."""
    record = await store.load(sender_id)
    snapshot = _usable(record, lines)
    if snapshot is not None:
        if snapshot.count < record.count:  # written without a snapshot since: catch up
            snapshot.apply_all(record.events[snapshot.count - record.start:], snapshot.count)
        return LoadedConversation(record, snapshot, record.events, record.start)
    events = record.events
    if record.start > 0:
        events = [*await store.load_events(sender_id, 0, record.start), *events]
    return LoadedConversation(record, Snapshot.of_events(events, lines), events, 0)


def _usable(record: ConversationRecord, lines: int) -> Snapshot | None:
    if record.state is None:
        return None
    try:
        snapshot = Snapshot.from_dict(record.state, record.start)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if snapshot.lines < lines or not record.start <= snapshot.count <= record.count:
        return None
    return snapshot


async def seed_conversation(store: TrackerStore, sender_id: str, events: list[Event],
                            stack: list[dict[str, Any]] | None = None,
                            lines: int = WINDOW_LINES) -> None:
    """Store a new conversation's ``events`` with their snapshot, as a turn would have (an
    import, a benchmark's long conversations)."""
    snapshot = Snapshot.of_events(events, lines)
    window_start = snapshot.advance(events, 0)
    await store.save_turn(sender_id, events, stack or [], 0, state=snapshot.to_dict(),
                          window_start=window_start)
