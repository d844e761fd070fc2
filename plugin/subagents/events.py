"""Tracker events as rasa-sdk-style dicts (``{"event": "slot", "name": ..., "value": ...}``).

Each function builds the typed event of :mod:`subagents.types` and returns its ``to_dict()``,
the shape stored in the tracker. The dict shapes are the ones ``rasa_sdk.events`` produces, so
events returned by hooks written with rasa-sdk work as they are.
"""

from __future__ import annotations

import time
from typing import Any

from subagents.types import (
    ActionExecuted,
    AgentEvent,
    BotUttered,
    ClientToolResult,
    FlowEvent,
    JsonObject,
    McpToolExecuted,
    SlotSet,
    TrackerEvent,
    UserUttered,
)


def user_uttered(text: str, *, metadata: JsonObject | None = None,
                 parse_data: JsonObject | None = None) -> TrackerEvent:
    """A ``user`` event."""
    return UserUttered(text=text, metadata=metadata, parse_data=parse_data or {}).to_dict()


def bot_uttered(text: str | None, *, data: JsonObject | None = None,
                metadata: JsonObject | None = None) -> TrackerEvent:
    """A ``bot`` event."""
    return BotUttered(text=text, data=data or {}, metadata=metadata).to_dict()


def slot_set(name: str, value: Any) -> TrackerEvent:
    """A ``slot`` event."""
    return SlotSet(name=name, value=value).to_dict()


def action_executed(name: str, *, metadata: JsonObject | None = None) -> TrackerEvent:
    """An ``action`` event."""
    return ActionExecuted(name=name, metadata=metadata).to_dict()


def mcp_tool_executed(tool_name: str, arguments: JsonObject, result: str | None, *,
                      is_error: bool, error_message: str | None, agent_id: str,
                      duration_ms: float | None = None) -> TrackerEvent:
    """An ``mcp_tool_executed`` event (``metadata.agent_id`` names the agent).

    One per executed call, so the dict :class:`McpToolExecuted` gives is built directly,
    key for key (a test holds the two equal)."""
    return {"event": McpToolExecuted.type_name, "timestamp": time.time(),
            "tool_name": tool_name, "arguments": arguments, "result": result,
            "is_error": is_error, "error_message": error_message, "duration_ms": duration_ms,
            "metadata": {"agent_id": agent_id}}


def agent_event(name: str, agent_id: str, flow_id: str | None, *,
                metadata: JsonObject | None = None, **fields: Any) -> TrackerEvent:
    """``agent_started`` / ``agent_completed`` / ``agent_interrupted`` / ``agent_resumed`` /
    ``agent_cancelled`` (with ``reason``) / ``agent_client_tool_requested``."""
    return AgentEvent(name=name, agent_id=agent_id, flow_id=flow_id, metadata=metadata,
                      extra=fields).to_dict()


def flow_event(name: str, flow_id: str, step_id: str | None = None, *,
               metadata: JsonObject | None = None) -> TrackerEvent:
    """``flow_started`` / ``flow_completed`` / ``flow_interrupted`` / ``flow_resumed`` /
    ``flow_cancelled``."""
    return FlowEvent(name=name, flow_id=flow_id, step_id=step_id, metadata=metadata).to_dict()


def client_tool_result(tool_call_id: str, result: Any) -> TrackerEvent:
    """The client delivered the result of a client-executed tool."""
    return ClientToolResult(tool_call_id=tool_call_id, result=result).to_dict()


def is_event(value: Any) -> bool:
    """Whether ``value`` looks like a tracker event dict."""
    return isinstance(value, dict) and isinstance(value.get("event"), str)
