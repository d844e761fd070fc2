"""The tool abstraction every tool kind shares, and the toolset interface the wrappers compose.

A :class:`Toolset` offers tools and calls them. ``executor.FunctionToolset`` holds plain tools
(MCP, custom Python and built-in ones); each feature around tools (approvals, client-executed tools,
state mapping, the result budget) is a :class:`WrapperToolset` in its own module that changes
what is offered or what a call does, so the agent loop never branches on those features.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from subagents.types import (
    AgentInput,
    AgentToolContext,
    AgentToolResult,
    AgentToolSchema,
    CallScope,
    ChatMessage,
    JsonObject,
)


@dataclass(frozen=True)
class SlotEffect:
    """A slot value a tool call sets; the agent applies it after recording the call."""

    name: str
    value: Any
    extend_list: bool = False
    """For a list slot: append to the current value instead of replacing it."""
    only_if_changed: bool = False
    """Record the SlotSet only when the value differs from the last one recorded."""


@dataclass
class CallContext:
    """What a tool runner may use; ``tool_context.metadata`` never reaches the model."""

    agent_input: AgentInput
    tool_context: AgentToolContext
    timeout: float
    effects: list[SlotEffect] = field(default_factory=list)
    """Slot values the running call sets (filled per call)."""
    on_progress: ProgressSink | None = None
    """Told about progress a running call reports (tool name, progress, total, message)."""
    scope: CallScope | None = None
    """The turn's scope: a recorded turn records the call in it."""

    def for_call(self, timeout: float | None = None) -> CallContext:
        """A context of its own for one call (its own effects list)."""
        return CallContext(self.agent_input, self.tool_context,
                           self.timeout if timeout is None else timeout,
                           on_progress=self.on_progress, scope=self.scope)


Runner = Callable[[JsonObject, CallContext], "AgentToolResult | Awaitable[AgentToolResult]"]
"""Runs a call: the result, or an awaitable of it (a runner that can answer at once should:
the call then needs no timer)."""
ProgressSink = Callable[[str, float, float | None, str | None], Awaitable[None]]
"""``(tool, progress, total, message)``: progress reported by a running call."""


@dataclass
class Tool:
    """One callable tool: the schema offered to the model and the function that runs it."""

    schema: AgentToolSchema
    run: Runner
    source: str
    """``mcp:<server>``, ``custom``, ``builtin``, ``client``."""
    read_only: bool = False
    timeout: float | None = None
    """Overrides the agent's ``tool_timeout``."""
    validate_arguments: bool = True

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        return self.schema.name


@dataclass
class PlannedCall:
    """A tool call of a model response, resolved against the offered tools."""

    id: str
    name: str
    arguments: JsonObject
    tool: Tool | None


class PendingCall(BaseModel):
    """A deferred call as saved while the run waits."""

    id: str
    name: str
    arguments: JsonObject = Field(default_factory=dict)


class PendingCalls(BaseModel):
    """What a parked run saves in the output metadata: the exchange so far and the deferred
    calls. The next invocation gets it back in its input metadata and resumes from it."""

    model_config = ConfigDict(extra="allow")

    messages: list[ChatMessage] = Field(default_factory=list)
    calls: list[PendingCall] = Field(default_factory=list)

    @classmethod
    def of(cls, messages: list[ChatMessage], calls: list[PlannedCall]) -> PendingCalls:
        """The record for ``calls`` deferred after ``messages``."""
        return cls(messages=messages, calls=[PendingCall(id=c.id, name=c.name,
                                                         arguments=c.arguments) for c in calls])

    def to_metadata(self) -> JsonObject:
        """The record as stored in the metadata (plain JSON)."""
        return self.model_dump()


class Deferral(StrEnum):
    """Why a call was not run now: the run parks until the answer arrives."""

    CLIENT = "client_tool"
    """The client executes the tool and sends the result back."""
    APPROVAL = "approval"
    """The user must approve the call first."""
    ELICITATION = "elicitation"
    """The MCP server asked the user for input in the middle of the call."""


@dataclass
class ToolOutcome:
    """What became of one call: its result, or the reason it was deferred."""

    call: PlannedCall
    result: AgentToolResult
    started: float = 0.0
    finished: float = 0.0
    effects: list[SlotEffect] = field(default_factory=list)
    deferred: Deferral | None = None
    model_text: str | None = None
    """What the model reads instead of the whole result (set by the result budget)."""

    @property
    def duration_ms(self) -> float:
        """How long the call took, in milliseconds."""
        return (self.finished - self.started) * 1000

    @classmethod
    def deferral(cls, call: PlannedCall, reason: Deferral) -> ToolOutcome:
        """An outcome for a call that was deferred, not run."""
        now = time.monotonic()
        return cls(call=call, result=AgentToolResult(tool_name=call.name), started=now,
                   finished=now, deferred=reason)


class Toolset(Protocol):
    """Offers tools and calls them."""

    def tools(self) -> list[Tool]:
        """The tools offered to the model, in order."""
        ...

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """Run one call (``call.tool`` is one of :meth:`tools`); failures are error results."""
        ...


class WrapperToolset:
    """A toolset around another; by default it changes nothing. Subclasses override."""

    def __init__(self, inner: Toolset) -> None:
        self.inner = inner

    def tools(self) -> list[Tool]:
        """The inner toolset's tools."""
        return self.inner.tools()

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """The inner toolset's call."""
        return await self.inner.call(call, ctx)
