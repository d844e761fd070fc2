"""Who an MCP call is made for: the session key and the credentials of a conversation.

Templates in a server's headers and token name ``metadata.<key>`` (message metadata that is
allow-listed for agents) and ``slots.<name>``. Their values are read from the agent input of
the call, used only to open that conversation's session, and never logged or shown to the model.
"""

from __future__ import annotations

from typing import Any

from subagents.config.endpoints import McpServerConfig
from subagents.config.mcp_sessions import PerUserSession, parse_reference
from subagents.exceptions import ToolInvocationError
from subagents.types import AgentInput


def _lookup(agent_input: AgentInput, source: str, name: str) -> Any:
    if source == "metadata":
        return agent_input.metadata.get(name)
    slot = agent_input.slot(name)
    return slot.value if slot is not None else None


def template_values(config: McpServerConfig, agent_input: AgentInput) -> dict[str, str]:
    """The values the server's templates use; a missing one is a ToolInvocationError (the
    model reads that the user's credentials are not available, never a value)."""
    values: dict[str, str] = {}
    for source, name in config.template_refs():
        value = _lookup(agent_input, source, name)
        if value is None or value == "":
            raise ToolInvocationError(
                f"MCP server {config.name!r} needs {source}.{name} of this conversation, "
                "which is not set", code="mcp.credential_missing")
        values[f"{source}.{name}"] = str(value)
    return values


def session_key(config: McpServerConfig, agent_input: AgentInput) -> str | None:
    """The pool key of the caller's own session, or None for a shared server."""
    mode = config.session
    if isinstance(mode, PerUserSession):
        source, name = parse_reference(mode.per_user)
        user = _lookup(agent_input, source, name)
        if user is None or user == "":
            raise ToolInvocationError(
                f"MCP server {config.name!r} keeps one session per user, and {mode.per_user} "
                "is not set in this conversation", code="mcp.session_key_missing")
        return f"user:{user}"
    if mode == "per_conversation":
        conversation = agent_input.metadata.get("sender_id") or agent_input.recipient_id
        if not conversation:
            raise ToolInvocationError(
                f"MCP server {config.name!r} keeps one session per conversation, and this "
                "call has no conversation id", code="mcp.session_key_missing")
        return f"conversation:{conversation}"
    return None
