"""What the dialogue needs of a sub agent: :class:`SubAgent`, and the one thing every kind of
agent shares, the ``bot`` event of a text it sent (:func:`agent_text_event`).

The MCP agents (:class:`~subagents.agents.base.MCPBaseAgent` and its subclasses) and the remote
A2A agent (:class:`~subagents.agents.a2a_agent.A2AAgent`) implement it independently; the flow's
call steps (``dialogue/agent_steps.py``), the processor that builds and connects the agents and
the A2A server that publishes them use nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from subagents.config.sub_agent import AgentConfiguration
from subagents.types import AgentInput, AgentOutput, BotUttered, CallScope, Event, OutputChannel


class SubAgent(Protocol):
    """A sub agent as the dialogue sees it: connected at start-up, run once per invocation of
    its call step (the registry builds it with its class's ``from_config``)."""

    name: str
    description: str
    configuration: AgentConfiguration

    @property
    def protocol_type(self) -> str:
        """``mcp_open``, ``mcp_task`` or ``a2a``."""
        ...

    async def connect(self) -> None:
        """Connect what the agent needs (MCP servers, the remote agent); raise when it cannot."""
        ...

    async def disconnect(self) -> None:
        """Release what :meth:`connect` opened."""
        ...

    def run(self, input: AgentInput, output_channel: OutputChannel | None = None,
            cancellation_token: Any = None, *, scope: CallScope | None = None
            ) -> Awaitable[AgentOutput]:
        """One invocation: the input of the call step in, the agent's output back."""
        ...


def agent_text_event(source: str, agent_name: str, text: str | None, agent_input: AgentInput,
                     message_type: str, *, llm_time_to_first_token_ms: float | None = None,
                     llm_total_time_ms: float | None = None, streamed: bool = False) -> Event:
    """The ``bot`` event of a text an agent sent, with the metadata Rasa Pro gives it
    (``utter_source`` is the agent's class name)."""
    meta = {"utter_source": source, "agent_name": agent_name,
            "agent_message_type": message_type,
            "agent_id": agent_input.metadata.get("agent_id"),
            "model_id": agent_input.metadata.get("model_id"),
            "llm_time_to_first_token_ms": llm_time_to_first_token_ms,
            "llm_total_time_ms": llm_total_time_ms}
    if streamed:
        meta["streamed_text"] = True
    return BotUttered(text, metadata=meta)
