"""Client-executed tools (``configuration.client_tools``).

The model sees them like any other tool, but a call is never run here: it is deferred, an
``agent_client_tool_requested`` event goes to the client, and the run parks (``input_required``,
exit reason ``client_tool``) with the exchange saved in the output metadata under
``pending_client_tools``. When the client sends the results (``client_tool_results`` in the
input metadata) the loop continues with them; a user message that arrives first makes the model
go on without the missing results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from subagents.config.sub_agent import ClientToolDef
from subagents.tools.base import (
    CallContext,
    Deferral,
    PendingCall,
    PendingCalls,
    PlannedCall,
    Tool,
    ToolOutcome,
    Toolset,
    WrapperToolset,
)
from subagents.types import AgentToolResult, AgentToolSchema, ChatMessage, JsonObject

PENDING_KEY = "pending_client_tools"
RESULTS_KEY = "client_tool_results"
NOT_YET = ("The client has not returned this tool's result yet. Do not call it again; "
           "continue with the user's message.")


def client_tool(definition: ClientToolDef) -> Tool:
    """The tool offered to the model for a client tool definition."""

    async def never(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
        raise AssertionError("client tools are executed by the client")

    schema = AgentToolSchema(name=definition.name, description=definition.description,
                             parameters=definition.parameters)
    return Tool(schema=schema, run=never, source="client")


@dataclass
class Delivered:
    """The client's results applied to the saved calls."""

    messages: list[ChatMessage]
    """The exchange as it was when the run parked."""
    results: list[tuple[PendingCall, str]]
    """(saved call, result text) for each call the client answered, in order."""
    waiting: list[PendingCall]
    """Saved calls still without a result."""


def deliver(pending: PendingCalls, results: JsonObject) -> Delivered:
    """Match the client's results (call id -> result) to the saved calls."""
    delivered, waiting = [], []
    for call in pending.calls:
        if call.id in results:
            text = results[call.id]
            delivered.append((call, text if isinstance(text, str) else json.dumps(text)))
        else:
            waiting.append(call)
    return Delivered(list(pending.messages), delivered, waiting)


class ClientToolset(WrapperToolset):
    """Adds the client tools and defers their calls."""

    def __init__(self, inner: Toolset, definitions: list[ClientToolDef]) -> None:
        super().__init__(inner)
        self._client = [client_tool(d) for d in definitions]

    def tools(self) -> list[Tool]:
        """The inner tools, then the client tools."""
        return [*self.inner.tools(), *self._client]

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """Defer a client tool's call; run any other."""
        if call.tool is not None and call.tool.source == "client":
            return ToolOutcome.deferral(call, Deferral.CLIENT)
        return await self.inner.call(call, ctx)
