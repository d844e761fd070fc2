"""Events as rasa-sdk-style dicts (``{"event": "slot", "name": ..., "value": ...}``).

The dict shapes are the ones ``rasa_sdk.events`` produces, so events returned by hooks written
with rasa-sdk work as they are; the agent events use the reference's names and fields.
"""

from __future__ import annotations

import time
from typing import Any


def _event(event_type: str, metadata: dict[str, Any] | None = None, /,
           **fields: Any) -> dict[str, Any]:
    event = {"event": event_type, "timestamp": time.time(), **fields}
    if metadata is not None:
        event["metadata"] = metadata
    return event


def user_uttered(text: str, *, metadata: dict[str, Any] | None = None,
                 parse_data: dict[str, Any] | None = None) -> dict[str, Any]:
    return _event("user", metadata or {}, text=text, parse_data=parse_data or {},
                  input_channel=None, message_id=None)


def bot_uttered(text: str | None, *, data: dict[str, Any] | None = None,
                metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return _event("bot", metadata or {}, text=text, data=data or {})


def slot_set(name: str, value: Any) -> dict[str, Any]:
    return _event("slot", name=name, value=value)


def action_executed(name: str, *, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return _event("action", metadata, name=name, policy=None, confidence=None)


def mcp_tool_executed(tool_name: str, arguments: dict[str, Any], result: str | None, *,
                      is_error: bool, error_message: str | None, agent_id: str,
                      duration_ms: float | None = None) -> dict[str, Any]:
    return _event("mcp_tool_executed", {"agent_id": agent_id}, tool_name=tool_name,
                  arguments=arguments, result=result, is_error=is_error,
                  error_message=error_message, duration_ms=duration_ms)


def agent_event(name: str, agent_id: str, flow_id: str | None, *,
                metadata: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """``agent_started`` / ``agent_completed`` / ``agent_interrupted`` / ``agent_resumed`` /
    ``agent_cancelled`` (with ``reason``) / ``agent_client_tool_requested``."""
    return _event(name, metadata, agent_id=agent_id, flow_id=flow_id, **fields)


def flow_event(name: str, flow_id: str, step_id: str | None = None, *,
               metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """``flow_started`` / ``flow_completed`` / ``flow_interrupted`` / ``flow_resumed`` /
    ``flow_cancelled``."""
    return _event(name, metadata, flow_id=flow_id, step_id=step_id)


def client_tool_result(tool_call_id: str, result: Any) -> dict[str, Any]:
    """The client delivered the result of a client-executed tool (DECISIONS A6)."""
    return _event("client_tool_result", tool_call_id=tool_call_id, result=result)


def is_event(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("event"), str)
