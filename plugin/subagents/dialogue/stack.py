"""The dialogue stack: flow frames (user flows and patterns) and agent frames."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

START = "START"

AGENT_WAITING = "waiting_for_input"
AGENT_INTERRUPTED = "interrupted"
AGENT_RESUMING = "resuming"


@dataclass
class FlowFrame:
    flow_id: str
    step_id: str = START
    """The step the frame is at (START before the first step)."""
    frame_type: str = "regular"
    """``regular``, ``interrupt`` (started over another flow), ``call`` (called by a flow)."""
    frame_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    awaiting: str | None = None
    """The slot a collect step asked for and is waiting on."""
    interrupted: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    """Pattern context, e.g. the failing agent for pattern_internal_error."""
    kind: str = "flow"

    @property
    def is_pattern(self) -> bool:
        return self.flow_id.startswith("pattern_")


@dataclass
class AgentFrame:
    flow_id: str
    step_id: str
    agent_id: str
    state: str = AGENT_WAITING
    metadata: dict[str, Any] = field(default_factory=dict)
    is_restart: bool = False
    frame_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    kind: str = "agent"


Frame = FlowFrame | AgentFrame


class Stack:
    def __init__(self, frames: list[Frame] | None = None) -> None:
        self.frames: list[Frame] = list(frames or [])

    def top(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    def push(self, frame: Frame) -> None:
        self.frames.append(frame)

    def pop(self) -> Frame:
        return self.frames.pop()

    def remove(self, frame: Frame) -> None:
        self.frames = [f for f in self.frames if f is not frame]

    def flow_frames(self) -> list[FlowFrame]:
        return [f for f in self.frames if isinstance(f, FlowFrame)]

    def user_flow_frames(self) -> list[FlowFrame]:
        return [f for f in self.flow_frames() if not f.is_pattern]

    def top_user_flow(self) -> FlowFrame | None:
        frames = self.user_flow_frames()
        return frames[-1] if frames else None

    def top_flow(self) -> FlowFrame | None:
        frames = self.flow_frames()
        return frames[-1] if frames else None

    def agent_frames(self, flow_id: str | None = None) -> list[AgentFrame]:
        return [f for f in self.frames if isinstance(f, AgentFrame)
                and (flow_id is None or f.flow_id == flow_id)]

    def agent_frame(self, agent_id: str) -> AgentFrame | None:
        return next((f for f in reversed(self.frames)
                     if isinstance(f, AgentFrame) and f.agent_id == agent_id), None)

    def active_agent(self) -> AgentFrame | None:
        """The waiting (or resuming) agent of the top user flow, if any."""
        host = self.top_user_flow()
        if host is None:
            return None
        return next((f for f in reversed(self.agent_frames(host.flow_id))
                     if f.state in (AGENT_WAITING, AGENT_RESUMING)), None)

    def frame_of_flow(self, flow_id: str) -> FlowFrame | None:
        return next((f for f in reversed(self.flow_frames()) if f.flow_id == flow_id), None)

    def to_list(self) -> list[dict[str, Any]]:
        return [asdict(f) for f in self.frames]

    @classmethod
    def from_list(cls, data: list[dict[str, Any]] | None) -> Stack:
        frames: list[Frame] = []
        for item in data or []:
            item = dict(item)
            kind = item.get("kind", "flow")
            frames.append(AgentFrame(**item) if kind == "agent" else FlowFrame(**item))
        return cls(frames)
