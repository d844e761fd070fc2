"""Shared data types: the leaf of the package (it imports nothing else of ours).

Everything the layers exchange lives here: the input and output of an agent run (with the field
names Rasa Pro uses, so custom agents written for it keep working), tool schemas, results and
context, typed tracker events, the output-channel interface the agent writes to, and the enums
for agent statuses, exit reasons and agent-frame states. ``subagents.agents.schemas`` re-exports
the agent-facing names under their Rasa-compatible import path.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ActionExecuted",
    "AgentEvent",
    "AgentInput",
    "AgentInputSlot",
    "AgentOutput",
    "AgentStatus",
    "AgentToolContext",
    "AgentToolResult",
    "AgentToolSchema",
    "BotUttered",
    "ChatMessage",
    "ClientToolResult",
    "CustomToolSchema",
    "Event",
    "ExitReason",
    "FlowEvent",
    "FrameState",
    "JsonObject",
    "McpToolExecuted",
    "OutputChannel",
    "SlotSet",
    "ToolResultImage",
    "TrackerEvent",
    "UserUttered",
]


JsonObject = dict[str, Any]
"""A JSON object: tool arguments, metadata, a JSON schema, an OpenAI-format tool."""
TrackerEvent = dict[str, Any]
"""A tracker event as stored: the rasa-sdk-style dict of :meth:`Event.to_dict`."""
ChatMessage = dict[str, Any]
"""A chat message in the OpenAI format (``{"role": ..., "content": ...}``)."""


class AgentStatus(StrEnum):
    """The status an agent run ends with (``AgentOutput.status``)."""

    COMPLETED = "completed"
    INPUT_REQUIRED = "input_required"
    FATAL_ERROR = "fatal_error"
    RECOVERABLE_ERROR = "recoverable_error"
    CANCELLED = "cancelled"
    SUBMITTED = "submitted"


class ExitReason(StrEnum):
    """Why a run ended (``AgentOutput.exit_reason``).

    A run ended by an ``exit_conditions`` tool reports ``tool:<name>``, built with
    :meth:`for_tool`.
    """

    TEXT = "text"
    """The model answered with text: a question to the user, or a final answer."""
    TASK_COMPLETED = "task_completed"
    """The open agent's model called ``task_completed``."""
    EXIT_IF = "exit_if"
    """The task agent's ``exit_if`` conditions hold."""
    MAX_STEPS = "max_steps"
    """``max_agent_steps`` model calls were made."""
    BUDGET = "budget"
    """A cap of ``configuration.budgets`` was reached."""
    TIMEOUT = "timeout"
    """The whole-run deadline (``configuration.timeout``) passed."""
    ERROR = "error"
    """A fatal error ended the run."""
    NO_RESULT = "no_result"
    """A custom tool returned neither a result nor an error (a recoverable error)."""
    CLIENT_TOOL = "client_tool"
    """The run waits for the client to execute a client-side tool."""
    APPROVAL = "approval"
    """The run waits for the user to approve a tool call."""
    ELICITATION = "elicitation"
    """The run waits for the user's answer to an MCP server's request for input."""

    @staticmethod
    def for_tool(name: str) -> str:
        """The exit reason of a run ended by the ``exit_conditions`` tool ``name``."""
        return f"tool:{name}"


class FrameState(StrEnum):
    """Where a sub agent called by a flow stands between turns (its frame on the stack)."""

    WAITING = "waiting_for_input"
    """The agent asked the user something; the next message goes to it."""
    INTERRUPTED = "interrupted"
    """Another flow started while the agent waited; it resumes only if the user agrees."""
    RESUMING = "resuming"
    """The user agreed to go back; the agent is re-invoked with its pending question."""


class AgentInputSlot(BaseModel):
    """A slot as an agent sees it: its value and what the domain says about it."""

    name: str
    value: Any = None
    type: str = "any"
    """The slot's type name: text, bool, float, categorical, list, any, ..."""
    allowed_values: list[Any] | None = None
    mappings: list[dict[str, Any]] = Field(default_factory=list)
    description: str | None = None
    verify: bool = False
    """The model must confirm the value with the user before setting it."""


class EarlierEvents(BaseModel):
    """What the conversation's events before ``AgentInput.events`` add up to.

    An agent gets the latest events of a conversation (the window a turn loads, the latest 20
    transcript lines and the events between them at least), not all of them; this sums up
    the others."""

    count: int = 0
    """How many events come before ``AgentInput.events``."""
    usage: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Model -> ``calls``, ``input_tokens``, ``output_tokens`` recorded by their turns."""
    tool_calls: int = 0
    """``mcp_tool_executed`` events among them."""
    fillers: list[str] = Field(default_factory=list)
    """Texts of the latest filler messages among them (at most 50)."""
    open_runs: list[str] = Field(default_factory=list)
    """Agents whose run had started and not yet completed where ``events`` begin."""


class AgentInput(BaseModel):
    """Everything an agent gets for one invocation; it never sees tracker or stack."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    """The agent's name (the ``call:`` target)."""
    user_message: str = ""
    slots: list[AgentInputSlot] = Field(default_factory=list)
    conversation_history: str = ""
    events: list[TrackerEvent] = Field(default_factory=list)
    """Tracker events as rasa-sdk-style dicts (``{"event": "user", "text": ...}``): the
    conversation's latest events (see ``earlier``)."""
    metadata: JsonObject = Field(default_factory=dict)
    timestamp: float | None = None
    recipient_id: str | None = None
    earlier: EarlierEvents = Field(default_factory=EarlierEvents)
    """What the conversation's events before ``events`` add up to (nothing when ``events``
    hold them all)."""

    @property
    def slot_names(self) -> list[str]:
        """The names of the slots in the input, in order."""
        return [slot.name for slot in self.slots]

    def slot(self, name: str) -> AgentInputSlot | None:
        """The slot called ``name``, or None."""
        return next((s for s in self.slots if s.name == name), None)


class AgentOutput(BaseModel):
    """The result of one agent run, handed back to the flow."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    status: AgentStatus
    response_message: str | None = None
    unsent_response_message: str | None = None
    events: list[TrackerEvent] = Field(default_factory=list)
    """Chronological: BotUttered, mcp_tool_executed, SlotSet, hook events."""
    structured_results: list[list[dict[str, Any]]] = Field(default_factory=list)
    task_id: str | None = None
    context_id: str | None = None
    timestamp: float | None = None
    metadata: dict[str, Any] | None = None
    error_message: str | None = None
    exit_reason: str | None = None
    """``text``, ``task_completed``, ``exit_if``, ``max_steps``, ``timeout``, ``tool:<name>``,
    ``error``."""
    steps: int = 0
    """Model calls made in this invocation."""
    usage: dict[str, int] = Field(default_factory=dict)
    tool_calls: dict[str, int] = Field(default_factory=dict)
    """Executed tool calls per tool name."""


class AgentToolContext(BaseModel):
    """Passed to custom tool executors; ``metadata`` is never shown to the model."""

    metadata: JsonObject = Field(default_factory=dict)


class ToolResultImage(BaseModel):
    """An image a tool returned (base64 ``data``); the text result holds its placeholder."""

    mime_type: str
    data: str


class AgentToolResult(BaseModel):
    """What a tool call produced: a text result, or an error the model is told about."""

    tool_name: str
    result: str | None = None
    is_error: bool = False
    error_message: str | None = None
    images: list[ToolResultImage] = Field(default_factory=list, repr=False)
    """Images of the result, shown to the model only when the agent's
    ``tool_result_images`` is on (never recorded in the tracker)."""


def _normalise_parameters(parameters: JsonObject) -> JsonObject:
    """Give the provider an object schema (``type``, ``required``, closed at the top level).

    Only the top level is touched: a parameter without a type, or a free-form object, stays as
    the server declared it, so the model is never told less than the server accepts.
    """
    if not parameters:
        return {}
    params = dict(parameters)
    params.setdefault("type", "object")
    params.setdefault("additionalProperties", False)
    params.setdefault("required", [])
    return params


class AgentToolSchema(BaseModel):
    """A tool as offered to the model (OpenAI function-tool shape)."""

    name: str
    parameters: JsonObject = Field(default_factory=dict)
    strict: bool = False
    description: str | None = None
    type: str = "function"

    @field_validator("parameters")
    @classmethod
    def _normalise(cls, value: JsonObject) -> JsonObject:
        return _normalise_parameters(value)

    @classmethod
    def from_openai_json_format(cls, tool: JsonObject) -> AgentToolSchema:
        """From ``{"type": "function", "function": {name, description, parameters, strict}}``."""
        if not isinstance(tool, dict) or "type" not in tool or "function" not in tool:
            raise ValueError("a tool definition needs 'type': 'function' and a 'function' "
                             "mapping with 'name' and 'description' (OpenAI format)")
        function = tool["function"]
        if not isinstance(function, dict) or "name" not in function or \
                "description" not in function:
            raise ValueError("a tool's 'function' needs 'name' and 'description'")
        return cls(name=function["name"], description=function["description"],
                   parameters=function.get("parameters") or {},
                   strict=bool(function.get("strict", tool.get("strict", False))))

    def to_openai(self) -> JsonObject:
        """The tool in the OpenAI function-tool format offered to the model."""
        function: JsonObject = {"name": self.name, "parameters": self.parameters,
                                    "strict": self.strict}
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


ToolExecutor = Callable[[JsonObject, AgentToolContext],
                        "AgentToolResult | Awaitable[AgentToolResult]"]


class CustomToolSchema(BaseModel):
    """A custom (Python) tool: its definition for the model and the function that runs it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tool_name: str
    tool_definition: AgentToolSchema
    tool_executor: Any
    read_only: bool = False

    @classmethod
    def from_dict(cls, item: JsonObject) -> CustomToolSchema:
        """From an OpenAI-format tool dict with a callable ``tool_executor``."""
        if "tool_executor" not in item or not callable(item["tool_executor"]):
            raise ValueError("a custom tool definition needs a callable 'tool_executor'")
        definition = {k: v for k, v in item.items() if k not in ("tool_executor", "read_only")}
        schema = AgentToolSchema.from_openai_json_format(definition)
        return cls(tool_name=schema.name, tool_definition=schema,
                   tool_executor=item["tool_executor"], read_only=bool(item.get("read_only")))


# ---------------------------------------------------------------------------- output channel
class OutputChannel:
    """Receives bot text as soon as it exists. Subclass and override what you need.

    Streaming channels set ``supports_streaming = True`` and get
    ``send_response_chunk_start`` / ``send_response_chunk`` / ``send_response_chunk_end``;
    others get one ``send_text_message`` per message.
    """

    supports_streaming: bool = False
    can_send_later: bool = False
    """True when the channel can reach the user after their request was answered (a socket, a
    messaging platform's send API); such a channel gets the replies of turns that no user
    message started, e.g. an agent resumed when a sign-in completed."""
    streaming_chosen: bool | None = None
    """When a bool, overrides ``supports_streaming`` (per request)."""

    def wants_streaming(self) -> bool:
        """Whether to stream: the explicit choice if one was made, else ``supports_streaming``."""
        if isinstance(self.streaming_chosen, bool):
            return self.streaming_chosen
        return self.supports_streaming

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Send one text message to ``recipient_id``; subclasses must implement it."""
        raise NotImplementedError

    async def send_text_with_buttons(self, recipient_id: str, text: str,
                                     buttons: list[dict[str, Any]], **kwargs: Any) -> None:
        """Send text with buttons; by default passes them to ``send_text_message``."""
        await self.send_text_message(recipient_id, text, buttons=buttons, **kwargs)

    async def send_response_chunk_start(self, recipient_id: str) -> None:
        """Begin a streamed message; channels that stream override it."""

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        """Send one chunk of a streamed message; channels that stream override it."""

    async def send_response_chunk_end(self, recipient_id: str, interrupted: bool = False) -> None:
        """End a streamed message, ``interrupted`` when it stopped early."""

    async def send_event(self, recipient_id: str, event: TrackerEvent) -> None:
        """Tool and slot events, for channels that show them (debug shell, SSE stream)."""
        return


# ---------------------------------------------------------------------------- tracker events
@dataclass(kw_only=True)
class Event:
    """A tracker event; :meth:`to_dict` gives the rasa-sdk-style dict stored in the tracker.

    The dict shapes are the ones ``rasa_sdk.events`` produces, so events returned by hooks
    written with rasa-sdk work as they are.
    """

    type_name: ClassVar[str] = ""
    timestamp: float = field(default_factory=time.time)
    metadata: JsonObject | None = None
    _metadata_always: ClassVar[bool] = False

    def _fields(self) -> JsonObject:
        return {}

    def _event_name(self) -> str:
        return self.type_name

    def to_dict(self) -> TrackerEvent:
        """The event as a tracker dict: ``{"event": <type>, "timestamp": ..., ...}``."""
        event = {"event": self._event_name(), "timestamp": self.timestamp, **self._fields()}
        if self.metadata is not None or self._metadata_always:
            event["metadata"] = self.metadata or {}
        return event


@dataclass(kw_only=True)
class UserUttered(Event):
    """The user said something."""

    type_name: ClassVar[str] = "user"
    _metadata_always: ClassVar[bool] = True
    text: str
    parse_data: JsonObject = field(default_factory=dict)

    def _fields(self) -> JsonObject:
        return {"text": self.text, "parse_data": self.parse_data, "input_channel": None,
                "message_id": None}


@dataclass(kw_only=True)
class BotUttered(Event):
    """The assistant said something."""

    type_name: ClassVar[str] = "bot"
    _metadata_always: ClassVar[bool] = True
    text: str | None
    data: JsonObject = field(default_factory=dict)

    def _fields(self) -> JsonObject:
        return {"text": self.text, "data": self.data}


@dataclass(kw_only=True)
class SlotSet(Event):
    """A slot got a value."""

    type_name: ClassVar[str] = "slot"
    name: str
    value: Any

    def _fields(self) -> JsonObject:
        return {"name": self.name, "value": self.value}


@dataclass(kw_only=True)
class ActionExecuted(Event):
    """An action ran."""

    type_name: ClassVar[str] = "action"
    name: str

    def _fields(self) -> JsonObject:
        return {"name": self.name, "policy": None, "confidence": None}


@dataclass(kw_only=True)
class McpToolExecuted(Event):
    """An agent executed a tool (MCP, custom or client-executed)."""

    type_name: ClassVar[str] = "mcp_tool_executed"
    tool_name: str
    arguments: JsonObject
    result: str | None
    is_error: bool
    error_message: str | None
    agent_id: str
    duration_ms: float | None = None

    def to_dict(self) -> TrackerEvent:
        """The tracker dict; ``metadata`` carries the ``agent_id``."""
        self.metadata = {"agent_id": self.agent_id}
        return super().to_dict()

    def _fields(self) -> JsonObject:
        return {"tool_name": self.tool_name, "arguments": self.arguments, "result": self.result,
                "is_error": self.is_error, "error_message": self.error_message,
                "duration_ms": self.duration_ms}


@dataclass(kw_only=True)
class AgentEvent(Event):
    """An agent lifecycle event: ``agent_started``, ``agent_completed``,
    ``agent_interrupted``, ``agent_resumed``, ``agent_cancelled`` (with ``reason``) or
    ``agent_client_tool_requested``."""

    name: str
    agent_id: str
    flow_id: str | None
    extra: JsonObject = field(default_factory=dict)

    def _event_name(self) -> str:
        return self.name

    def _fields(self) -> JsonObject:
        return {"agent_id": self.agent_id, "flow_id": self.flow_id, **self.extra}


@dataclass(kw_only=True)
class FlowEvent(Event):
    """A flow lifecycle event: ``flow_started``, ``flow_completed``, ``flow_interrupted``,
    ``flow_resumed`` or ``flow_cancelled``."""

    name: str
    flow_id: str
    step_id: str | None = None

    def _event_name(self) -> str:
        return self.name

    def _fields(self) -> JsonObject:
        return {"flow_id": self.flow_id, "step_id": self.step_id}


@dataclass(kw_only=True)
class ClientToolResult(Event):
    """The client delivered the result of a client-executed tool."""

    type_name: ClassVar[str] = "client_tool_result"
    tool_call_id: str
    result: Any

    def _fields(self) -> JsonObject:
        return {"tool_call_id": self.tool_call_id, "result": self.result}
