"""What the engine asks of an agent class: Rasa's hooks, and whether a hook is still ours.

:class:`AgentHooks` is the part of :class:`~subagents.agents.base.MCPBaseAgent` the engine and
the policies call, written as a protocol so they never import the agent classes (which import
them). A hook the package implements is marked with :func:`ours`; :func:`is_ours` tells whether
a class or an instance replaced it. Defaults that do nothing need not be called, and the
package's own prompt builders may be cached, while a project's replacement is always called.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from subagents.config.sub_agent import AgentConfiguration
from subagents.llm import Model
from subagents.types import (
    AgentInput,
    AgentToolResult,
    AgentToolSchema,
    ChatMessage,
    CustomToolSchema,
    Event,
    JsonObject,
    OutputChannel,
)

_F = TypeVar("_F", bound=Callable[..., Any])
_MARK = "__subagents_own_hook__"


def ours(function: _F) -> _F:
    """Mark ``function`` as the package's own implementation of a hook."""
    setattr(function, _MARK, True)
    return function


def is_ours(hook: Any) -> bool:
    """Whether ``hook`` (a bound method or function) is the package's own implementation:
    False once a class overrides it or an instance replaces it."""
    return bool(getattr(getattr(hook, "__func__", hook), _MARK, False))


class AgentHooks(Protocol):
    """The hooks of an MCP agent the engine calls, with Rasa's names and signatures."""

    name: str
    description: str
    configuration: AgentConfiguration
    project_root: Path
    llm: Model
    max_prompt_chars: int
    max_response_chars: int
    max_tool_result_chars: int
    _custom_tools: list[CustomToolSchema]
    _template: Any
    MAX_UNAVAILABLE_TOOL_CALL_RETRIES: ClassVar[int]

    @property
    def agent_id(self) -> str:
        """``<name>::<protocol_type>``."""
        ...

    async def build_custom_tool_call_metadata(self, context: JsonObject) -> JsonObject:
        """Extra metadata for custom tool calls."""
        ...

    async def process_tool_output(self, current_iteration_results: dict[str, AgentToolResult],
                                  cumulative_results: dict[str, AgentToolResult],
                                  output_channel: OutputChannel | None) -> list[Event]:
        """Events to add after an iteration's tools ran."""
        ...

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput
                                          ) -> list[AgentToolSchema]:
        """Built-in tools of this agent kind."""
        ...

    def render_prompt_template(self, context: AgentInput) -> str:
        """The system prompt."""
        ...

    def _build_context_for_prompt(self, context: AgentInput) -> dict[str, Any]:
        """The values the prompt template renders."""
        ...

    def build_messages_for_llm_request(self, context: AgentInput,
                                       turns: int = 10) -> list[ChatMessage]:
        """System prompt and history."""
        ...

    def create_bot_uttered(self, text: str, agent_input: AgentInput,
                           message_type: str = "final_response",
                           llm_time_to_first_token_ms: float | None = None,
                           llm_total_time_ms: float | None = None,
                           streamed: bool = False) -> Event:
        """The ``bot`` event of a text the agent sent."""
        ...

    def _get_meta_for_mcp_server(self, server_id: str,
                                 agent_input: AgentInput | None) -> JsonObject:
        """The ``_meta`` of an MCP tool call to ``server_id``."""
        ...
