"""MCP calls that ask the user for input (elicitation) are deferred like client tools.

The innermost wrapper: it names the conversation and call an MCP call belongs to, so that a
server's request for input during the call reaches this conversation's user. When the server
asks, the call is deferred (:attr:`Deferral.ELICITATION`) while it goes on waiting in the
background (held in the MCP pool's :class:`~subagents.mcp.callbacks.ElicitationRegistry`);
calling it again with the same call id (after the answer was sent) waits for that same call
instead of starting a new one.
"""

from __future__ import annotations

from subagents.mcp.callbacks import (
    ELICITATION_TIMEOUT,
    ElicitationOwner,
    ElicitationRegistry,
    elicitation_owner,
)
from subagents.tools.base import (
    CallContext,
    Deferral,
    PlannedCall,
    ToolOutcome,
    Toolset,
    WrapperToolset,
)
from subagents.types import AgentInput


def elicitation_key(agent_input: AgentInput, call_id: str) -> str:
    """The registry key of a call: its conversation and its tool call id."""
    conversation = agent_input.recipient_id or str(agent_input.metadata.get("sender_id") or "")
    return f"{conversation}:{call_id}"


class ElicitationToolset(WrapperToolset):
    """Lets MCP calls ask the user; defers a call whose server asked."""

    def __init__(self, inner: Toolset, timeout: float = ELICITATION_TIMEOUT, *,
                 registry: ElicitationRegistry) -> None:
        super().__init__(inner)
        self.registry = registry
        """Where the calls that wait for an answer are held (the MCP pool's)."""
        self.timeout = timeout
        """Seconds a question waits for the user's answer before it is cancelled."""

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """Run the call with its owner known; defer it if the server asked for input."""
        if call.tool is None or not call.tool.source.startswith("mcp:"):
            return await self.inner.call(call, ctx)
        key = elicitation_key(ctx.agent_input, call.id)
        with elicitation_owner(ElicitationOwner(key, self.timeout)):
            outcome = await self.inner.call(call, ctx)
        if self.registry.question(key) is not None:
            return ToolOutcome.deferral(call, Deferral.ELICITATION)
        return outcome
