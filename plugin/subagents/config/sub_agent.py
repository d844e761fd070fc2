"""``sub_agents/<dir>/config.yml``: one sub agent's configuration."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from subagents.config._base import StrictModel
from subagents.config.budgets import Budgets
from subagents.config.endpoints import normalize_model_keys


class Protocol(StrEnum):
    """The agent's protocol: ``RASA`` (an MCP agent) or ``A2A``."""

    RASA = "RASA"
    A2A = "A2A"


class AgentSection(StrictModel):
    """The ``agent:`` section of a sub agent's config.yml."""

    name: str
    """Unique agent name, used as the target of a flow's ``call:`` step."""
    description: str
    """What the agent does; rendered as ``{{ description }}`` in the prompt."""
    protocol: Protocol = Protocol.RASA
    """``RASA`` (MCP agents) or ``A2A``; case-insensitive."""

    @field_validator("protocol", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        if isinstance(value, str) and value.upper() in ("RASA", "A2A"):
            return value.upper()
        raise ValueError(f"invalid protocol {value!r}: use RASA or A2A")

    @field_validator("name", "description")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class ToolSettings(StrictModel):
    """Per-tool settings under ``configuration.tools.<tool_name>``."""

    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Overrides ``tool_timeout`` for this tool (seconds)."""
    read_only: bool | None = None
    """Marks the tool read-only (may run in parallel); overrides the MCP annotation."""
    requires_approval: bool = False
    """Ask the user for a yes before running the tool."""
    inputs_from_state: dict[str, str] = Field(default_factory=dict)
    """argument -> ``slots.<name>`` or ``metadata.<key>``; hidden from the model."""
    outputs_to_state: dict[str, str] = Field(default_factory=dict)
    """slot -> result field (``result`` for the whole text result)."""


class ClientToolDef(StrictModel):
    """A tool executed by the client: the run parks until the client sends the result."""

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class AgentConfiguration(StrictModel):
    """The ``configuration:`` section of a sub agent's config.yml."""

    llm: dict[str, Any] | None = None
    """Inline model settings (``provider``, ``model``, ...) or ``{model_group: <id>}``."""
    prompt_template: str | None = None
    """Path (relative to the project folder) of a Jinja2 prompt template."""
    module: str | None = None
    """``pkg.mod.Class``: a subclass of MCPOpenAgent/MCPTaskAgent to use instead."""
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Whole-run deadline per invocation, in seconds; on expiry the run ends as a fatal error."""
    max_retries: int | None = 5
    """Attempts to connect to the MCP servers at startup (0 or null mean 5)."""
    include_date_time: bool = True
    timezone: str | None = "UTC"
    enable_filler_messages: bool = True
    tool_timeout: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    max_agent_steps: int = Field(default=10, ge=1)
    raise_on_tool_invocation_failure: bool = False
    max_parallel_tools: int = Field(default=3, ge=1)
    exit_conditions: list[str] | None = None
    """Open agents: stop after a ``text`` answer or right after a named tool ran."""
    tool_result_budget: int | None = Field(default=None, gt=0)
    """Results longer than this many characters enter the context as a preview (the full
    result stays available through the ``recall`` tool)."""
    max_prompt_chars: int | None = Field(default=None, gt=0)
    """The rendered system prompt is cut after this many characters (default 200,000)."""
    max_response_chars: int | None = Field(default=None, gt=0)
    """Model text is cut after this many characters (default 20,000)."""
    max_tool_result_chars: int | None = Field(default=None, gt=0)
    """Tool results are cut after this many characters (default 200,000)."""
    elicitation_timeout: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    """Seconds an MCP server's request for the user's input waits for the answer; after that
    the request is cancelled."""
    tool_result_images: bool = False
    """Image parts of tool results reach the model as images (for models that accept them)
    instead of a short placeholder."""
    tools: dict[str, ToolSettings] = Field(default_factory=dict)
    client_tools: list[ClientToolDef] = Field(default_factory=list)
    progress_messages: bool = True
    """Tell the user, in a short message, about progress a running MCP call reports."""
    progress_interval: float = Field(default=5.0, ge=0, allow_inf_nan=False)
    """Least seconds between two progress messages of one run."""
    filler_fast_tool_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Send no filler text when every called tool usually answers within this many ms."""
    budgets: Budgets = Field(default_factory=Budgets)
    """Caps on model tokens, model calls, tool calls and cost, per run and per conversation."""
    # A2A-only keys, accepted so projects written for the reference load; unused here.
    agent_card: Any = None
    auth: Any = None
    max_polling_time: Any = None
    polling_initial_delay: Any = None
    push_notification_url: Any = None
    pre_call_hook: str | None = None

    @field_validator("llm")
    @classmethod
    def _llm_keys(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None or "model_group" in value:
            return value
        return normalize_model_keys(value)

    @field_validator("max_retries")
    @classmethod
    def _retries(cls, value: int | None) -> int:
        return value if value else 5

    @field_validator("tool_timeout")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError("tool_timeout must be a finite number of seconds greater than 0")
        return value


class McpServerRef(StrictModel):
    """An MCP server the agent uses, optionally limited to some of its tools."""

    name: str
    include_tools: list[str] | None = None
    exclude_tools: list[str] | None = None
    # filled in from endpoints.yml in the reference; accepted and ignored here
    url: str | None = None
    type: str | None = None
    meta_map: Any = None
    additional_params: Any = None
    pre_call_hook: Any = None

    @model_validator(mode="after")
    def _exclusive(self) -> McpServerRef:
        if self.include_tools is not None and self.exclude_tools is not None:
            raise ValueError("include_tools and exclude_tools are mutually exclusive")
        return self


class Connections(StrictModel):
    """The ``connections:`` section of a sub agent's config.yml."""

    mcp_servers: list[McpServerRef] | None = None


class SubAgentConfig(StrictModel):
    """The whole ``config.yml`` of one sub agent."""

    agent: AgentSection
    configuration: AgentConfiguration = Field(default_factory=AgentConfiguration)
    connections: Connections = Field(default_factory=Connections)

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.agent.name

    def server_names(self) -> list[str]:
        """Names of the MCP servers the agent connects to."""
        return [s.name for s in self.connections.mcp_servers or []]

