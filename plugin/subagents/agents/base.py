"""The base class of the MCP sub agents: Rasa's hook surface, and nothing else.

``run`` = ``process_input`` -> ``send_message`` (the ReAct loop of
:mod:`subagents.agents.engine`) -> ``process_output``. The loop calls the hooks below at the
moments Rasa Pro calls them: ``get_custom_tool_definitions`` while the agent is built,
``build_messages_for_llm_request`` / ``render_prompt_template`` / ``_build_context_for_prompt``
before each model call, ``create_bot_uttered`` for each text the user got,
``build_custom_tool_call_metadata`` before each custom tool call, ``_get_meta_for_mcp_server``
before each MCP tool call, ``process_tool_output`` after each step's tools ran. What differs
between the open and the task agent are the decisions of a step: their policies
(:mod:`subagents.agents.policies`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from subagents.agents import prompt
from subagents.agents.engine import Engine
from subagents.agents.hooks import ours
from subagents.agents.policies import Policy
from subagents.agents.protocol import agent_text_event
from subagents.agents.schemas import (
    AgentInput,
    AgentOutput,
    AgentToolResult,
    AgentToolSchema,
    CustomToolSchema,
)
from subagents.config.sub_agent import AgentConfiguration, McpServerRef, SubAgentConfig
from subagents.llm import Model, build_model, resolve_model_settings
from subagents.observability import traced_agent_run
from subagents.tools.mcp_tools import MCPToolset, build_meta
from subagents.types import CallScope, ChatMessage, Event, JsonObject, OutputChannel

if TYPE_CHECKING:
    from subagents.config.endpoints import EndpointsConfig
    from subagents.mcp.pool import MCPPool


class MCPBaseAgent:
    """Base class of the MCP sub agents. Subclass an agent and override the hooks."""

    PROTOCOL_TYPE: ClassVar[str] = ""
    TEMPLATE_FILE: ClassVar[str] = ""
    POLICY: ClassVar[type[Policy]] = Policy
    """The decisions of a step for this agent kind (:mod:`subagents.agents.policies`)."""
    MAX_UNAVAILABLE_TOOL_CALL_RETRIES: ClassVar[int] = 1
    TOOL_CALL_DEFAULT_TIMEOUT: ClassVar[float] = 10.0
    MAX_PROMPT_CHARS: ClassVar[int] = 200_000
    """The rendered system prompt is cut (and marked) after this many characters, unless
    ``configuration.max_prompt_chars`` is set."""
    MAX_RESPONSE_CHARS: ClassVar[int] = 20_000
    """Model text longer than this is cut (and marked) before it is sent or recorded, unless
    ``configuration.max_response_chars`` is set."""
    MAX_TOOL_RESULT_CHARS: ClassVar[int] = 200_000
    """Tool results longer than this are cut (and marked) before they are recorded, unless
    ``configuration.max_tool_result_chars`` is set."""

    def __init__(self, name: str, description: str, *,
                 configuration: AgentConfiguration | None = None,
                 server_refs: list[McpServerRef] | None = None,
                 llm: Model | None = None, pool: MCPPool | None = None,
                 project_root: Path | None = None) -> None:
        self.name = name
        self.description = description
        self.configuration = configuration or AgentConfiguration()
        self.project_root = project_root or Path.cwd()
        conf = self.configuration
        self.max_prompt_chars = conf.max_prompt_chars or self.MAX_PROMPT_CHARS
        """The prompt cap in effect: ``configuration.max_prompt_chars`` or the class default."""
        self.max_response_chars = conf.max_response_chars or self.MAX_RESPONSE_CHARS
        """The model text cap in effect (``configuration.max_response_chars``)."""
        self.max_tool_result_chars = conf.max_tool_result_chars or self.MAX_TOOL_RESULT_CHARS
        """The tool result cap in effect (``configuration.max_tool_result_chars``)."""
        self.llm = llm or build_model(resolve_model_settings(self.configuration.llm, None),
                                      name=name)
        self.server_refs = list(server_refs or [])
        self._pool = pool
        self.mcp_toolset = MCPToolset(pool, self.server_refs, agent_name=name,
                                      settings=self.configuration.tools,
                                      meta=self._get_meta_for_mcp_server) \
            if pool is not None and self.server_refs else None
        self._template = prompt.compile_template(conf, self.project_root, name,
                                                 self.get_default_prompt_template)
        self._default_builtins: list[AgentToolSchema] | None = None
        self._custom_tools = [CustomToolSchema.from_dict(item)
                              for item in self.get_custom_tool_definitions()]
        self._engine = Engine(self, self.POLICY, mcp_toolset=self.mcp_toolset,
                              elicitations=pool.elicitations if pool is not None else None,
                              consents=pool.consents if pool is not None else None)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config: SubAgentConfig, *, endpoints: EndpointsConfig | None = None,
                    pool: MCPPool | None = None, project_root: Path | None = None,
                    llm: Model | None = None) -> MCPBaseAgent:
        """Build the agent from its ``sub_agents/<name>/config.yml``."""
        conf = config.configuration
        if llm is None:
            settings = resolve_model_settings(conf.llm, endpoints, where=config.agent.name)
            llm = build_model(settings, name=config.agent.name)
        return cls(config.agent.name, config.agent.description, configuration=conf,
                   server_refs=list(config.connections.mcp_servers or []), llm=llm, pool=pool,
                   project_root=project_root)

    @property
    def protocol_type(self) -> str:
        """``mcp_open`` or ``mcp_task`` (how the agent is registered)."""
        return self.PROTOCOL_TYPE

    @property
    def agent_id(self) -> str:
        """``<name>::<protocol_type>``, as in ``mcp_tool_executed`` metadata."""
        return f"{self.name}::{self.protocol_type}"

    @classmethod
    def get_default_prompt_template(cls) -> str:
        """The built-in prompt template of this agent kind."""
        return prompt.default_template(cls.TEMPLATE_FILE)

    async def connect(self) -> None:
        """Connect the agent's MCP servers (shared per process), retried with backoff, and open
        the model client's connection pool."""
        if self.mcp_toolset is not None:
            await self.mcp_toolset.start(self.configuration.max_retries or 5)
        await self.llm.prepare()

    async def disconnect(self) -> None:
        """Release the model client (MCP connections belong to the shared pool)."""
        await self.llm.close()

    # ------------------------------------------------------------------ hooks
    async def process_input(self, input: AgentInput) -> AgentInput:
        """Rewrite the input before a run; identity by default."""
        return input

    async def process_output(self, output: AgentOutput) -> AgentOutput:
        """Rewrite the output after a run (called, unlike in Rasa Pro)."""
        return output

    def get_custom_tool_definitions(self) -> list[JsonObject]:
        """OpenAI-format tool dicts, each with a ``tool_executor(arguments, context)``."""
        from subagents.tools.python import discover_python_tools

        return discover_python_tools(self)

    @ours
    async def build_custom_tool_call_metadata(self, context: JsonObject) -> JsonObject:
        """Extra metadata (e.g. credentials) merged into ``AgentToolContext.metadata``."""
        return {}

    def _get_meta_for_mcp_server(self, server_id: str,
                                 agent_input: AgentInput | None) -> JsonObject:
        """The MCP ``_meta`` of a tool call to server ``server_id``: the server's
        ``meta_map`` in endpoints.yml (static values, then slot values). Called before each
        MCP tool call, as in Rasa Pro; override it to add, say, a user's token (the model never
        sees it)."""
        if self._pool is None or agent_input is None:
            return {}
        return build_meta(self._pool, server_id, agent_input, "", self.name)

    @ours
    async def process_tool_output(self, current_iteration_results: dict[str, AgentToolResult],
                                  cumulative_results: dict[str, AgentToolResult],
                                  output_channel: OutputChannel | None) -> list[Event]:
        """Events to add after an iteration's tools ran (SlotSets update the slot view)."""
        return []

    @ours
    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """Built-in tools of this agent kind (none here)."""
        return []

    @ours
    def render_prompt_template(self, context: AgentInput) -> str:
        """The system prompt; cut (and marked) after ``max_prompt_chars`` characters."""
        return prompt.render(self, context)

    @ours
    def _build_context_for_prompt(self, context: AgentInput) -> dict[str, Any]:
        """The values the prompt template renders."""
        return prompt.prompt_values(self, context)

    @ours
    def build_messages_for_llm_request(self, context: AgentInput,
                                       turns: int = 10) -> list[ChatMessage]:
        """System prompt, then the last ``turns`` utterances as chat messages."""
        return prompt.build_messages(self, context, turns)

    def create_bot_uttered(self, text: str, agent_input: AgentInput,
                           message_type: str = "final_response",
                           llm_time_to_first_token_ms: float | None = None,
                           llm_total_time_ms: float | None = None,
                           streamed: bool = False) -> Event:
        """A ``bot`` event for text the agent sent, with the agent's metadata."""
        return agent_text_event(type(self).__name__, self.name, text, agent_input, message_type,
                                llm_time_to_first_token_ms=llm_time_to_first_token_ms,
                                llm_total_time_ms=llm_total_time_ms, streamed=streamed)

    # ------------------------------------------------------------------ the run
    @traced_agent_run
    async def run(self, input: AgentInput, output_channel: OutputChannel | None = None,
                  cancellation_token: Any = None, *, scope: CallScope | None = None
                  ) -> AgentOutput:
        """``process_input`` -> the loop -> ``process_output``. ``scope`` is what the turn
        gives the run's model and tool calls (deadline, usage tally, recording)."""
        try:
            processed = await self.process_input(input)
        except Exception as exc:  # noqa: BLE001 - a failing hook ends the run, not the process
            return self._engine.failed(input, output_channel,
                                       f"process_input failed: {exc}")
        if scope is not None:
            processed.attach_scope(scope)
        return await self.process_output(await self.send_message(processed, output_channel))

    async def send_message(self, agent_input: AgentInput,
                           output_channel: OutputChannel | None = None) -> AgentOutput:
        """The ReAct loop under the whole-run deadline (``configuration.timeout``)."""
        return await self._engine.run(agent_input, output_channel)
