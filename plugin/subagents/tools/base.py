"""The tool abstraction every tool kind shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..types import AgentInput, AgentToolContext, AgentToolResult, AgentToolSchema


@dataclass
class CallContext:
    """What a tool runner may use; ``tool_context.metadata`` never reaches the model."""

    agent_input: AgentInput
    tool_context: AgentToolContext
    timeout: float


Runner = Callable[[dict[str, Any], CallContext], Awaitable[AgentToolResult]]


@dataclass
class Tool:
    schema: AgentToolSchema
    run: Runner
    source: str
    """``mcp:<server>``, ``custom``, ``builtin``."""
    read_only: bool = False
    timeout: float | None = None
    """Overrides the agent's ``tool_timeout``."""
    validate_arguments: bool = True

    @property
    def name(self) -> str:
        return self.schema.name


@dataclass
class PlannedCall:
    """A tool call of a model response, resolved against the offered tools."""

    id: str
    name: str
    arguments: dict[str, Any]
    tool: Tool | None


@dataclass
class ToolOutcome:
    call: PlannedCall
    result: AgentToolResult
    started: float = 0.0
    finished: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        return (self.finished - self.started) * 1000
