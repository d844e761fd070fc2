"""What a client may send with a message, checked before a turn touches any state.

A client (a channel, an HTTP caller) sends a sender id, a text and metadata. Internal agent
state - a pending approval question, tool calls parked for the client, a mocked clock - lives
only in the tracker; none of it is ever taken from a request. Of the metadata a client sends:

* ``client_tool_results`` delivers results of client-executed tools, and only for calls an
  agent of this conversation has parked (checked against the tracker);
* every other key reaches agents (``AgentInput.metadata``, and so ``inputs_from_state:
  metadata.<key>``, MCP credential templates and custom tool executors), as message metadata
  reaches agents and custom actions in Rasa; the user event records it, so custom actions see it
  in ``tracker.latest_message``;
* a project may narrow what reaches agents to an allow-list (``message_metadata:
  {allowed_keys: [...]}`` in ``config.yml``): then only those keys, and the keys the project's
  own files read (``inputs_from_state``, MCP credential templates and ``per_user`` keys), reach
  them; the others are only recorded;
* reserved names (internal state the runtime sets itself) and names starting with ``_`` are
  dropped entirely.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from subagents.config.mcp_sessions import metadata_keys
from subagents.exceptions import SubagentsError

if TYPE_CHECKING:
    from subagents.config.project import Project
    from subagents.dialogue.stack import Stack
    from subagents.types import OutputChannel

MAX_SENDER_ID_LENGTH = 255
"""The longest sender id every tracker store accepts (characters)."""

RESERVED_METADATA_KEYS = frozenset({
    "pending_approval", "pending_client_tools", "client_tool_results", "structured_results",
    "mocked_datetime", "exit_if", "restarted", "resumed_after_interruption", "agent_response",
    "agent_name", "agent_message_type", "active_flow", "step_id", "utter_source", "sender_id",
    "agent_id", "model_id", "context_id", "task_id", "pending_elicitation"})
"""Metadata names the runtime itself sets; a client can never set them."""


class ClientInputError(SubagentsError, ValueError):
    """The request cannot be accepted as sent (HTTP 400 or 409); nothing was recorded."""

    code = "client.invalid"
    status = 400

    def __init__(self, message: str, *, code: str, status: int = 400) -> None:
        super().__init__(message, code=code)
        self.status = status


class TurnFailedError(SubagentsError):
    """A turn could not complete; nothing of it was recorded and the user got ``reply``.

    Attributes:
        error_id: Correlates the generic reply with the logged details.
        reply: The internal-error text sent to the user.
        cause_code: The stable code of the underlying error.
    """

    code = "dialogue.turn_failed"

    def __init__(self, error_id: str, reply: str, *, cause_code: str) -> None:
        super().__init__(f"the turn failed ({cause_code}); error id {error_id}")
        self.error_id = error_id
        self.reply = reply
        self.cause_code = cause_code


@dataclass
class ClientMetadata:
    """A message's metadata, split by what each part may influence."""

    for_agents: dict[str, Any] = field(default_factory=dict)
    recorded: dict[str, Any] = field(default_factory=dict)
    tool_results: dict[str, Any] = field(default_factory=dict)


def check_sender_id(sender_id: object) -> str:
    """A non-empty string of at most 255 characters, storable in every tracker store."""
    if not isinstance(sender_id, str) or not sender_id.strip():
        raise ClientInputError("the sender id must be a non-empty string",
                               code="client.sender_id.invalid")
    if len(sender_id) > MAX_SENDER_ID_LENGTH:
        raise ClientInputError(f"the sender id is longer than {MAX_SENDER_ID_LENGTH} characters",
                               code="client.sender_id.too_long")
    if "\x00" in sender_id or not _encodable(sender_id):
        raise ClientInputError("the sender id contains characters that cannot be stored",
                               code="client.sender_id.invalid")
    return sender_id


def check_message_id(message_id: object) -> None:
    """None, or a non-empty string of at most 255 characters."""
    if message_id is None:
        return
    if not isinstance(message_id, str) or not message_id.strip() or \
            len(message_id) > MAX_SENDER_ID_LENGTH or not _encodable(message_id):
        raise ClientInputError(f"a message id must be a non-empty string of at most "
                               f"{MAX_SENDER_ID_LENGTH} characters",
                               code="client.message_id.invalid")


async def replay_answer(events: list[dict[str, Any]], message_id: str, recipient: str,
                        channel: OutputChannel | None) -> bool:
    """If ``message_id`` was handled already, send its recorded bot messages again."""
    start = next((i for i in range(len(events) - 1, -1, -1)
                  if events[i].get("event") == "user"
                  and events[i].get("message_id") == message_id), None)
    if start is None:
        return False
    for event in events[start + 1:]:
        if event.get("event") == "user":
            break
        if event.get("event") != "bot" or channel is None:
            continue
        data = event.get("data") or {}
        text = str(event.get("text") or "")
        if data.get("buttons"):
            await channel.send_text_with_buttons(recipient, text, data["buttons"])
        elif text or data.get("custom"):
            await channel.send_text_message(recipient, text, **(
                {"custom": data["custom"]} if data.get("custom") else {}))
    return True


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def declared_metadata_keys(project: Project) -> set[str]:
    """Top-level metadata keys the project's agents read through ``inputs_from_state`` or
    through the credential templates and ``per_user`` keys of MCP servers."""
    keys: set[str] = metadata_keys(list(project.endpoints.mcp_servers or []))
    for spec in project.agents.values():
        for settings in spec.config.configuration.tools.values():
            for source in settings.inputs_from_state.values():
                kind, _, path = str(source).partition(".")
                if kind == "metadata" and path:
                    keys.add(path.split(".", 1)[0])
    return keys


def agent_metadata_keys(project: Project) -> frozenset[str] | None:
    """The keys of a message's metadata that reach agents: None (every key but the reserved
    ones) unless ``config.yml`` declares ``message_metadata.allowed_keys``; then those keys
    plus the ones the project's files read (:func:`declared_metadata_keys`)."""
    narrowed = project.pipeline.message_metadata
    if narrowed is None:
        return None
    return frozenset(narrowed.allowed_keys) | frozenset(declared_metadata_keys(project))


def split_client_metadata(metadata: dict[str, Any] | None,
                          allowed: Iterable[str] | None = None) -> ClientMetadata:
    """Split a message's metadata into what agents see, what is recorded, and tool results.

    Args:
        metadata: What the client sent.
        allowed: The keys that reach agents; None: every key that is not reserved.
    """
    if metadata is None:
        return ClientMetadata()
    if not isinstance(metadata, dict):
        raise ClientInputError("the metadata must be an object", code="client.metadata.invalid")
    keys = None if allowed is None else frozenset(allowed) - RESERVED_METADATA_KEYS
    split = ClientMetadata(tool_results=parse_client_results(
        metadata.get("client_tool_results")))
    for key, value in metadata.items():
        if not isinstance(key, str) or key in RESERVED_METADATA_KEYS or key.startswith("_"):
            continue
        split.recorded[key] = value
        if keys is None or key in keys:
            split.for_agents[key] = value
    return split


def parse_client_results(raw: Any) -> dict[str, Any]:
    """``[{"id", "result"}]`` or ``{id: result}`` -> ``{id: result}``; anything else is refused."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    if isinstance(raw, list) and all(isinstance(item, dict) and isinstance(item.get("id"), str)
                                     and "result" in item for item in raw):
        return {item["id"]: item["result"] for item in raw}
    raise ClientInputError('client tool results must be [{"id": "<tool call id>", '
                           '"result": ...}] or {"<tool call id>": result}',
                           code="client.tool_results.invalid")


def parked_call_ids(stack: Stack) -> set[str]:
    """Ids of the tool calls agents of this conversation have parked for the client."""
    from subagents.dialogue.stack import AgentFrame

    ids: set[str] = set()
    for frame in stack.frames:
        pending = frame.metadata.get("pending_client_tools") if isinstance(
            frame, AgentFrame) else None
        if isinstance(pending, dict):
            ids |= {str(c.get("id")) for c in pending.get("calls") or [] if isinstance(c, dict)}
    return ids


def accept_client_results(results: dict[str, Any], stack: Stack) -> dict[str, Any]:
    """The results, if each answers a call parked in this conversation (else HTTP 409)."""
    if not results:
        return {}
    unknown = sorted(set(results) - parked_call_ids(stack))
    if unknown:
        raise ClientInputError(f"no client tool call is waiting for a result with id "
                               f"{json.dumps(unknown[0])}", code="client.tool_results.unknown_call",
                               status=409)
    return results
