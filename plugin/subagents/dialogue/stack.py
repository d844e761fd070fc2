"""The dialogue stack: flow frames (user flows and patterns) and agent frames.

The stack is stored with the conversation (``Stack.to_list`` / ``Stack.from_list``), so frames
are plain dataclasses and their enums are string enums that serialise as their values.
"""

from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

import structlog

from subagents.types import FrameState

log = structlog.get_logger("subagents.dialogue")


_FRAME_IDS = random.Random()
"""Frame ids' own generator, seeded from the system (again in a forked child): code that seeds
the ``random`` module, e.g. a custom action made reproducible, cannot make frame ids repeat."""
os.register_at_fork(after_in_child=_FRAME_IDS.seed)


def _frame_id() -> str:
    """Ten random hex digits. A frame id only tells the frames of one stack apart, so it needs
    no system entropy (a system call per frame)."""
    return f"{_FRAME_IDS.getrandbits(40):010x}"


_SCALARS = (str, int, float, bool, type(None))


def _plain_copy(value: Any) -> Any:
    """A deep copy of a frame's JSON-shaped value (dicts and lists rebuilt, scalars shared)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return type(value)((key, _plain_copy(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return type(value)(_plain_copy(item) for item in value)
    return copy.deepcopy(value)

START = "START"
"""The step id of a flow frame before its first step ran."""


class FrameType(StrEnum):
    """How a flow frame came onto the stack."""

    REGULAR = "regular"
    """Started on an empty stack (or by a link from a regular frame)."""
    INTERRUPT = "interrupt"
    """Started while another user flow was running, which it interrupted."""
    CALL = "call"
    """Called by a ``call:`` step of another flow; the caller continues when it ends."""


@dataclass
class FlowFrame:
    """A running flow or pattern."""

    flow_id: str
    step_id: str = START
    """The step the frame is at (START before the first step)."""
    frame_type: FrameType = FrameType.REGULAR
    frame_id: str = field(default_factory=_frame_id)
    awaiting: str | None = None
    """The slot a collect step asked for and is waiting on."""
    interrupted: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    """Pattern context, e.g. the failing agent for pattern_internal_error."""
    kind: str = "flow"
    flow_hash: str | None = None
    """The fingerprint of the flow's definition when the frame first ran (detects changes)."""

    @property
    def is_pattern(self) -> bool:
        """Whether the frame runs a conversation pattern (``pattern_*``) rather than a user flow."""
        return self.flow_id.startswith("pattern_")

    def context(self) -> dict[str, Any]:
        """What conditions and responses read as ``context.<key>`` while this frame runs."""
        return {"flow_id": self.flow_id, "step_id": self.step_id, "frame_id": self.frame_id,
                "frame_type": str(self.frame_type), **self.info}


@dataclass
class AgentFrame:
    """A sub agent that a flow's call step started and that outlives the turn."""

    flow_id: str
    step_id: str
    agent_id: str
    state: FrameState = FrameState.WAITING
    metadata: dict[str, Any] = field(default_factory=dict)
    """The agent's state between turns (its pending question, structured results, ...)."""
    is_restart: bool = False
    frame_id: str = field(default_factory=_frame_id)
    kind: str = "agent"


Frame = FlowFrame | AgentFrame
_FIELDS = {kind: tuple(f.name for f in fields(kind)) for kind in (FlowFrame, AgentFrame)}


class Stack:
    """The frames of one conversation, bottom first."""

    def __init__(self, frames: list[Frame] | None = None) -> None:
        self.frames: list[Frame] = list(frames or [])

    def top(self) -> Frame | None:
        """The topmost frame, or None on an empty stack."""
        return self.frames[-1] if self.frames else None

    def push(self, frame: Frame) -> None:
        """Put ``frame`` on top."""
        self.frames.append(frame)

    def pop(self) -> Frame:
        """Remove and return the topmost frame."""
        return self.frames.pop()

    def remove(self, frame: Frame) -> None:
        """Remove ``frame`` (by identity) wherever it is."""
        self.frames = [f for f in self.frames if f is not frame]

    def remove_flow(self, frame: FlowFrame) -> None:
        """Remove a flow frame together with the agent frames of its flow."""
        self.frames = [f for f in self.frames if f is not frame and not (
            isinstance(f, AgentFrame) and f.flow_id == frame.flow_id)]

    def call_chain(self, frame: FlowFrame) -> list[FlowFrame]:
        """``frame`` and, if a ``call:`` step started it, its callers below it, top first."""
        flows = self.flow_frames()
        chain = [frame]
        index = next((i for i, f in enumerate(flows) if f is frame), -1)
        while index > 0 and flows[index].frame_type == FrameType.CALL:
            index -= 1
            chain.append(flows[index])
        return chain

    def flow_frames(self) -> list[FlowFrame]:
        """All flow frames, bottom first."""
        return [f for f in self.frames if isinstance(f, FlowFrame)]

    def user_flow_frames(self) -> list[FlowFrame]:
        """Flow frames that are not patterns, bottom first."""
        return [f for f in self.flow_frames() if not f.is_pattern]

    def top_user_flow(self) -> FlowFrame | None:
        """The topmost user flow (patterns skipped)."""
        frames = self.user_flow_frames()
        return frames[-1] if frames else None

    def top_flow(self) -> FlowFrame | None:
        """The topmost flow frame, pattern or not."""
        frames = self.flow_frames()
        return frames[-1] if frames else None

    def agent_frames(self, flow_id: str | None = None) -> list[AgentFrame]:
        """Agent frames, bottom first; only those of ``flow_id`` when given."""
        return [f for f in self.frames if isinstance(f, AgentFrame)
                and (flow_id is None or f.flow_id == flow_id)]

    def agent_frame(self, agent_id: str) -> AgentFrame | None:
        """The topmost frame of the agent ``agent_id``."""
        return next((f for f in reversed(self.frames)
                     if isinstance(f, AgentFrame) and f.agent_id == agent_id), None)

    def active_agent(self) -> AgentFrame | None:
        """The waiting (or resuming) agent of the top user flow, if any."""
        host = self.top_user_flow()
        if host is None:
            return None
        return next((f for f in reversed(self.agent_frames(host.flow_id))
                     if f.state in (FrameState.WAITING, FrameState.RESUMING)), None)

    def frame_of_flow(self, flow_id: str) -> FlowFrame | None:
        """The topmost frame running ``flow_id``."""
        return next((f for f in reversed(self.flow_frames()) if f.flow_id == flow_id), None)

    def to_list(self) -> list[dict[str, Any]]:
        """The frames as JSON-ready dicts, for the tracker store."""
        return [{name: _plain_copy(getattr(frame, name)) for name in _FIELDS[type(frame)]}
                for frame in self.frames]

    @classmethod
    def from_list(cls, data: list[dict[str, Any]] | None) -> Stack:
        """Rebuild a stack stored with :meth:`to_list`; a frame that no longer loads is dropped."""
        frames: list[Frame] = []
        for item in data or []:
            item = dict(item)
            try:
                if item.get("kind", "flow") == "agent":
                    item["state"] = FrameState(item.get("state", FrameState.WAITING))
                    frames.append(AgentFrame(**item))
                else:
                    item["frame_type"] = FrameType(item.get("frame_type", FrameType.REGULAR))
                    frames.append(FlowFrame(**item))
            except (TypeError, ValueError) as exc:
                log.warning("dialogue.stack.frame_dropped", error=str(exc))
        return cls(frames)
