"""Shared data types: the leaf of the package (it imports nothing else of ours).

Everything the layers exchange lives here: the input and output of an agent run (with the field
names Rasa Pro uses, so custom agents written for it keep working), tool schemas, results and
context, typed tracker events, the output-channel interface the agent writes to, the enums
for agent statuses, exit reasons and agent-frame states, and the JSON codec every layer uses.
``subagents.agents.schemas`` re-exports the agent-facing names under their Rasa-compatible
import path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

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
    "CallRecorder",
    "CallScope",
    "ChatMessage",
    "ClientToolResult",
    "CustomToolSchema",
    "Event",
    "ExitReason",
    "FlowEvent",
    "FollowupAction",
    "FrameState",
    "JsonObject",
    "McpToolExecuted",
    "OutputChannel",
    "SlotSet",
    "ToolResultImage",
    "TrackerEvent",
    "UsageSink",
    "UserUttered",
    "dump_json",
    "load_json",
    "typed_event",
    "typed_events",
]


JsonObject = dict[str, Any]
"""A JSON object: tool arguments, metadata, a JSON schema, an OpenAI-format tool."""
TrackerEvent = dict[str, Any]
"""A tracker event as stored: the rasa-sdk-style dict of :meth:`Event.to_dict`."""
ChatMessage = dict[str, Any]
"""A chat message in the OpenAI format (``{"role": ..., "content": ...}``)."""


# ---------------------------------------------------------------------------- JSON
_DUMP_OPTIONS = (orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
                 | orjson.OPT_PASSTHROUGH_DATACLASS)
_DIGITS_ONLY = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
"""A translation table keeping ASCII digits and blanking every other byte."""
_LONG_NUMBER = b"0" * 20


def dump_json(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """``value`` as compact UTF-8 JSON (orjson: a tenth to a twentieth of the standard
    library's time). Keys that are not strings become strings and ``default`` converts what
    JSON has no type for (datetimes and dataclasses included), as with :func:`json.dumps`;
    NaN and infinities become ``null``. What orjson refuses (an integer past 64 bits, a lone
    surrogate) is written by :mod:`json`, escaped to ASCII.

    Raises:
        TypeError: a value JSON cannot hold and ``default`` does not convert.
    """
    try:
        return orjson.dumps(value, default, _DUMP_OPTIONS)
    except TypeError:
        return json.dumps(value, default=default).encode()


def load_json(text: bytes | str) -> Any:
    """The value of a JSON document, as :func:`json.loads` reads it: orjson, unless the text
    holds a number of 20 digits or more (orjson would read a big integer as a float) or is
    something only the standard library reads (``NaN``, a lone surrogate escape, UTF-16).

    Raises:
        ValueError: the text is not JSON (:class:`json.JSONDecodeError`, or
            :class:`UnicodeDecodeError` for bytes that are not text).
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    # a run of 20 digits, found by C code in a few microseconds (a regular expression takes
    # longer than orjson's whole parse)
    if _LONG_NUMBER not in raw.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


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
    NO_ANSWER = "no_answer"
    """The model sent nothing usable several times in a row (empty replies, malformed tool
    arguments); the user got a fixed reply and the agent waits for their next message."""

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
    events: list[Event] = Field(default_factory=list)
    """The conversation's latest tracker events (see ``earlier``) as typed events
    (:class:`Event`: Rasa's classes, which are also the rasa-sdk-style dicts,
    ``{"event": "user", "text": ...}``); plain dicts given here become typed events."""
    metadata: JsonObject = Field(default_factory=dict)
    timestamp: float | None = None
    recipient_id: str | None = None
    earlier: EarlierEvents = Field(default_factory=EarlierEvents)
    """What the conversation's events before ``events`` add up to (nothing when ``events``
    hold them all)."""
    _call_scope: CallScope | None = PrivateAttr(default=None)
    _exit_conditions: list[Any] | None = PrivateAttr(default=None)

    @field_validator("events", mode="before")
    @classmethod
    def _typed(cls, value: Any) -> Any:
        return typed_events(list(value)) if isinstance(value, list | tuple) else value

    @property
    def exit_conditions(self) -> list[Any] | None:
        """The call step's ``exit_if`` conditions as parsed when the project loaded (their
        texts are ``metadata["exit_if"]``); None when the flow attached none."""
        return self._exit_conditions

    def attach_exit_conditions(self, conditions: list[Any] | None) -> None:
        """Hand the run the parsed ``exit_if`` conditions of its call step."""
        self._exit_conditions = conditions

    @property
    def call_scope(self) -> CallScope | None:
        """What the turn gives the run's model and tool calls (deadline, usage tally,
        recording); None for a run outside a turn."""
        return self._call_scope

    def attach_scope(self, scope: CallScope | None) -> None:
        """Hand the run the turn's :class:`CallScope` (the flow does, before the loop runs)."""
        self._call_scope = scope

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
    events: list[Event] = Field(default_factory=list)
    """Chronological: BotUttered, mcp_tool_executed, SlotSet, hook events (typed events; plain
    dicts given here become typed events)."""
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

    @field_validator("events", mode="before")
    @classmethod
    def _typed(cls, value: Any) -> Any:
        return [typed_event(e) if isinstance(e, dict) else e for e in value] \
            if isinstance(value, list | tuple) else value


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


# ---------------------------------------------------------------------------- one turn's calls
class UsageSink(Protocol):
    """Where a turn counts the tokens its model calls used."""

    def add(self, model: str, input_tokens: int, output_tokens: int) -> None:
        """Count one call of ``model``."""
        ...


class CallRecorder(Protocol):
    """Where a recorded turn keeps what its model, tool and A2A calls were asked and answered."""

    def record_model_call(self, caller: str, messages: list[ChatMessage],
                          tools: list[JsonObject] | None, response: Any) -> None:
        """A model call that answered."""
        ...

    def record_model_error(self, caller: str, error: BaseException) -> None:
        """A model call that failed."""
        ...

    def record_tool_call(self, tool: Any, arguments: Any, result: Any, *,
                         flow_step: JsonObject | None = None) -> None:
        """A tool call and its result (``flow_step``: the flow step that called it directly)."""
        ...

    def record_a2a_call(self, agent: str, reply: JsonObject) -> None:
        """What a remote A2A agent answered."""
        ...


@dataclass(slots=True)
class CallScope:
    """What one turn hands each model and tool call it makes, as an argument: by when the call
    must end, where its token usage is counted and, when the conversation is recorded, where
    the call is recorded. A call made outside a turn gets ``None`` (no deadline, nothing
    counted or recorded)."""

    deadline: float | None = None
    """A ``time.monotonic()`` value; every model call (its retries included) ends by then."""
    usage: UsageSink | None = None
    recorder: CallRecorder | None = None

    def time_left(self) -> float | None:
        """Seconds until the deadline (None without one; may be negative)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def within(self, seconds: float | None) -> CallScope:
        """The same scope with its deadline at most ``seconds`` from now."""
        if seconds is None:
            return self
        deadline = time.monotonic() + seconds
        if self.deadline is not None:
            deadline = min(deadline, self.deadline)
        return CallScope(deadline, self.usage, self.recorder)


# ---------------------------------------------------------------------------- tracker events
class Event(dict[str, Any]):
    """A tracker event: the rasa-sdk-style dict stored in the tracker
    (``{"event": <type>, "timestamp": ..., ...}``) with Rasa's attributes on top.

    Agents receive and return these objects, so a class written against Rasa
    (``isinstance(event, SlotSet)``, ``event.key``, ``event.text``, ``event.metadata``) works
    as it is; everything that reads events as dicts (stores, HTTP, the action server) gets the
    very same dict. The constructors take Rasa's arguments (``SlotSet(key, value)``,
    ``ActionExecuted(action_name)``) and the names used here before (``SlotSet(name=...)``).
    """

    __slots__ = ()
    type_name: ClassVar[str] = "event"
    _metadata_always: ClassVar[bool] = False

    def __init__(self, timestamp: float | None = None, metadata: JsonObject | None = None,
                 **fields: Any) -> None:
        super().__init__(event=self._event_name(fields), timestamp=timestamp or time.time(),
                         **fields)
        if metadata is not None or self._metadata_always:
            self["metadata"] = metadata or {}

    def _event_name(self, fields: JsonObject) -> str:
        return self.type_name

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def __reduce__(self) -> Any:
        # pickled and copied as the typed event it is (dict subclasses otherwise lose it)
        return (_rebuild, (type(self), dict(self)))

    def __copy__(self) -> Event:
        return _rebuild(type(self), dict(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> Event:
        import copy

        return _rebuild(type(self), copy.deepcopy(dict(self), memo))

    @property
    def metadata(self) -> JsonObject:
        """The event's metadata (``{}`` when it has none)."""
        value = self.get("metadata")
        return value if isinstance(value, dict) else {}

    @property
    def timestamp(self) -> float:
        """When the event happened (seconds since the epoch)."""
        return float(self.get("timestamp") or 0.0)

    def to_dict(self) -> TrackerEvent:
        """The event as a plain tracker dict."""
        return dict(self)

    def as_dict(self) -> TrackerEvent:
        """Rasa's name for :meth:`to_dict`."""
        return dict(self)


def _rebuild(cls: type[Event], data: TrackerEvent) -> Event:
    event = dict.__new__(cls)
    dict.update(event, data)
    return event


class UserUttered(Event):
    """The user said something."""

    __slots__ = ()
    type_name: ClassVar[str] = "user"
    _metadata_always: ClassVar[bool] = True

    def __init__(self, text: str | None = None, intent: JsonObject | None = None,
                 entities: list[JsonObject] | None = None, parse_data: JsonObject | None = None,
                 timestamp: float | None = None, input_channel: str | None = None,
                 message_id: str | None = None, metadata: JsonObject | None = None,
                 **_: Any) -> None:
        parse = dict(parse_data or {})
        if intent is not None:
            parse.setdefault("intent", intent)
        if entities is not None:
            parse.setdefault("entities", entities)
        super().__init__(timestamp, metadata, text=text, parse_data=parse,
                         input_channel=input_channel, message_id=message_id)

    @property
    def intent(self) -> JsonObject:
        """The parsed intent (``{}`` when none)."""
        return dict((self.get("parse_data") or {}).get("intent") or {})

    @property
    def entities(self) -> list[JsonObject]:
        """The parsed entities."""
        return list((self.get("parse_data") or {}).get("entities") or [])


class BotUttered(Event):
    """The assistant said something."""

    __slots__ = ()
    type_name: ClassVar[str] = "bot"
    _metadata_always: ClassVar[bool] = True

    def __init__(self, text: str | None = None, data: JsonObject | None = None,
                 metadata: JsonObject | None = None, timestamp: float | None = None) -> None:
        # one dict call (agents record one per text they send)
        dict.__init__(self, event="bot", timestamp=timestamp or time.time(), text=text,
                      data=data or {}, metadata=metadata or {})


class SlotSet(Event):
    """A slot got a value: ``SlotSet(key, value)`` as in Rasa (``name=`` works too)."""

    __slots__ = ()
    type_name: ClassVar[str] = "slot"

    def __init__(self, key: str | None = None, value: Any = None,
                 timestamp: float | None = None, metadata: JsonObject | None = None, *,
                 name: str | None = None) -> None:
        dict.__init__(self, event="slot", timestamp=timestamp or time.time(),
                      name=key if key is not None else name, value=value)
        if metadata is not None:
            self["metadata"] = metadata

    @property
    def key(self) -> str:
        """The slot's name."""
        return str(self["name"])


class ActionExecuted(Event):
    """An action ran: ``ActionExecuted(action_name)`` as in Rasa (``name=`` works too)."""

    __slots__ = ()
    type_name: ClassVar[str] = "action"

    def __init__(self, action_name: str | None = None, policy: str | None = None,
                 confidence: float | None = None, timestamp: float | None = None,
                 metadata: JsonObject | None = None, *, name: str | None = None,
                 **_: Any) -> None:
        super().__init__(timestamp, metadata, name=action_name or name, policy=policy,
                         confidence=confidence)

    @property
    def action_name(self) -> str | None:
        """The action's name."""
        return self.get("name")


class FollowupAction(Event):
    """Run this action next."""

    __slots__ = ()
    type_name: ClassVar[str] = "followup"

    def __init__(self, name: str, timestamp: float | None = None,
                 metadata: JsonObject | None = None) -> None:
        super().__init__(timestamp, metadata, name=name)


class McpToolExecuted(Event):
    """An agent executed a tool (MCP, custom or client-executed); ``metadata.agent_id``
    names the agent."""

    __slots__ = ()
    type_name: ClassVar[str] = "mcp_tool_executed"

    def __init__(self, tool_name: str, arguments: JsonObject, result: str | None, *,
                 is_error: bool, error_message: str | None, agent_id: str,
                 duration_ms: float | None = None, timestamp: float | None = None) -> None:
        # one dict call: one event per executed tool call
        dict.__init__(self, event="mcp_tool_executed", timestamp=timestamp or time.time(),
                      tool_name=tool_name, arguments=arguments, result=result,
                      is_error=is_error, error_message=error_message, duration_ms=duration_ms,
                      metadata={"agent_id": agent_id})


class AgentEvent(Event):
    """An agent lifecycle event: ``agent_started``, ``agent_completed``,
    ``agent_interrupted``, ``agent_resumed``, ``agent_cancelled`` (with ``reason``),
    ``agent_client_tool_requested`` or ``agent_budget_exceeded``."""

    __slots__ = ()

    def __init__(self, name: str, agent_id: str, flow_id: str | None, *,
                 metadata: JsonObject | None = None, timestamp: float | None = None,
                 extra: JsonObject | None = None) -> None:
        dict.__init__(self, event=name, timestamp=timestamp or time.time(), agent_id=agent_id,
                      flow_id=flow_id, **(extra or {}))
        if metadata is not None:
            self["metadata"] = metadata


class FlowEvent(Event):
    """A flow lifecycle event: ``flow_started``, ``flow_completed``, ``flow_interrupted``,
    ``flow_resumed`` or ``flow_cancelled``."""

    __slots__ = ()

    def __init__(self, name: str, flow_id: str, step_id: str | None = None, *,
                 metadata: JsonObject | None = None, timestamp: float | None = None) -> None:
        dict.__init__(self, event=name, timestamp=timestamp or time.time(), flow_id=flow_id,
                      step_id=step_id)
        if metadata is not None:
            self["metadata"] = metadata


class ClientToolResult(Event):
    """The client delivered the result of a client-executed tool."""

    __slots__ = ()
    type_name: ClassVar[str] = "client_tool_result"

    def __init__(self, tool_call_id: str, result: Any, timestamp: float | None = None,
                 metadata: JsonObject | None = None) -> None:
        super().__init__(timestamp, metadata, tool_call_id=tool_call_id, result=result)


_EVENT_CLASSES: dict[str, type[Event]] = {
    cls.type_name: cls for cls in (UserUttered, BotUttered, SlotSet, ActionExecuted,
                                   FollowupAction, McpToolExecuted, ClientToolResult)}


def typed_event(event: TrackerEvent) -> Event:
    """``event`` (a tracker dict) as its typed class, sharing nothing at the top level with
    the dict; an event that is typed already is returned as it is."""
    if isinstance(event, Event):
        return event
    name = event.get("event")
    cls = _EVENT_CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        cls = AgentEvent if isinstance(name, str) and name.startswith("agent_") else \
            FlowEvent if isinstance(name, str) and name.startswith("flow_") else Event
    typed = dict.__new__(cls)
    dict.update(typed, event)
    return typed


def typed_events(events: Sequence[TrackerEvent]) -> list[Event]:
    """Each of ``events`` as its typed class (:func:`typed_event`)."""
    classes = _EVENT_CLASSES
    out: list[Event] = []
    append = out.append
    for event in events:
        if isinstance(event, Event):
            append(event)
            continue
        cls = classes.get(event.get("event"))  # type: ignore[arg-type]
        if cls is None:
            append(typed_event(event))
            continue
        typed = dict.__new__(cls)
        dict.update(typed, event)
        append(typed)
    return out


# the models that name Event, built now that it is defined: a subclass written elsewhere (where
# Event is not in scope) then inherits complete fields instead of failing as not fully defined
AgentInput.model_rebuild()
AgentOutput.model_rebuild()
