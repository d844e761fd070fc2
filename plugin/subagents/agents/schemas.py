"""Data contracts of a sub agent run (the reference's field names): input, output, tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["AgentInput", "AgentInputSlot", "AgentOutput", "AgentStatus", "AgentToolContext",
           "AgentToolResult", "AgentToolSchema", "CustomToolSchema", "ExitReason"]


class AgentStatus(StrEnum):
    COMPLETED = "completed"
    INPUT_REQUIRED = "input_required"
    FATAL_ERROR = "fatal_error"
    RECOVERABLE_ERROR = "recoverable_error"
    CANCELLED = "cancelled"
    SUBMITTED = "submitted"


class ExitReason(StrEnum):
    """Why a run ended (``AgentOutput.exit_reason``); ``tool:<name>`` is also possible."""

    TEXT = "text"
    TASK_COMPLETED = "task_completed"
    EXIT_IF = "exit_if"
    MAX_STEPS = "max_steps"
    TIMEOUT = "timeout"
    ERROR = "error"
    CLIENT_TOOL = "client_tool"


class AgentInputSlot(BaseModel):
    name: str
    value: Any = None
    type: str = "any"
    """The slot's type name: text, bool, float, categorical, list, any, ..."""
    allowed_values: list[Any] | None = None
    mappings: list[dict[str, Any]] = Field(default_factory=list)
    description: str | None = None
    verify: bool = False
    """The model must confirm the value with the user before setting it (A7)."""


class AgentInput(BaseModel):
    """Everything an agent gets for one invocation; it never sees tracker or stack."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    """The agent's name (the ``call:`` target)."""
    user_message: str = ""
    slots: list[AgentInputSlot] = Field(default_factory=list)
    conversation_history: str = ""
    events: list[dict[str, Any]] = Field(default_factory=list)
    """Tracker events as rasa-sdk-style dicts (``{"event": "user", "text": ...}``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: float | None = None
    recipient_id: str | None = None

    @property
    def slot_names(self) -> list[str]:
        return [slot.name for slot in self.slots]

    def slot(self, name: str) -> AgentInputSlot | None:
        return next((s for s in self.slots if s.name == name), None)


class AgentOutput(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    status: AgentStatus
    response_message: str | None = None
    unsent_response_message: str | None = None
    events: list[dict[str, Any]] = Field(default_factory=list)
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

    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentToolResult(BaseModel):
    tool_name: str
    result: str | None = None
    is_error: bool = False
    error_message: str | None = None


def _normalise_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """Reference normalisation: closed objects, required lists, typed properties (one level)."""
    if not parameters:
        return {}
    params = dict(parameters)
    params.setdefault("type", "object")
    params.setdefault("additionalProperties", False)
    params.setdefault("required", [])
    props = {}
    for name, prop in (params.get("properties") or {}).items():
        prop = dict(prop) if isinstance(prop, dict) else {}
        if not any(k in prop for k in ("$ref", "anyOf", "oneOf", "allOf", "enum")):
            prop.setdefault("type", "string")
            if prop.get("type") == "object":
                prop.setdefault("additionalProperties", False)
                prop.setdefault("required", [])
        props[name] = prop
    if "properties" in params:
        params["properties"] = props
    return params


class AgentToolSchema(BaseModel):
    """A tool as offered to the model (OpenAI function-tool shape)."""

    name: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool = False
    description: str | None = None
    type: str = "function"

    @field_validator("parameters")
    @classmethod
    def _normalise(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _normalise_parameters(value)

    @classmethod
    def from_openai_json_format(cls, tool: dict[str, Any]) -> AgentToolSchema:
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

    def to_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters,
                                    "strict": self.strict}
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


ToolExecutor = Callable[[dict[str, Any], AgentToolContext],
                        "AgentToolResult | Awaitable[AgentToolResult]"]


class CustomToolSchema(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    tool_name: str
    tool_definition: AgentToolSchema
    tool_executor: Any
    read_only: bool = False

    @classmethod
    def from_dict(cls, item: dict[str, Any]) -> CustomToolSchema:
        if "tool_executor" not in item or not callable(item["tool_executor"]):
            raise ValueError("a custom tool definition needs a callable 'tool_executor'")
        definition = {k: v for k, v in item.items() if k not in ("tool_executor", "read_only")}
        schema = AgentToolSchema.from_openai_json_format(definition)
        return cls(tool_name=schema.name, tool_definition=schema,
                   tool_executor=item["tool_executor"], read_only=bool(item.get("read_only")))
