"""Turns that no user message starts: a parked agent continues when its call's answer arrives.

When a user finishes an MCP server's sign-in in their browser, the call the agent parked on runs
at once (see :mod:`subagents.mcp.oauth.consent`). If the conversation's latest message came over a
channel that can reach the user without a request of theirs (Socket.IO, Slack, Telegram,
Twilio: :attr:`OutputChannel.can_send_later`), the agent is resumed right away in a turn of its
own, under the conversation's lock like any turn (:meth:`Assistant.resume_parked_call
<subagents.dialogue.processor.Assistant.resume_parked_call>`), and its reply goes to that
channel. Over
request/response channels (the REST webhook, the SSE stream) nothing can carry the reply, so the
conversation waits for the user's next message, which collects the call's result as before.

The channel is remembered in memory (the parked call lives in this process's memory too, so the
worker holding it is the one that resumes); the agent gets the allow-listed metadata of the
conversation's latest user message from the tracker, so it acts for the same user (e.g. with
the same per-user MCP session).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import structlog

from subagents.dialogue.client_input import split_client_metadata
from subagents.dialogue.stack import Stack

if TYPE_CHECKING:
    from subagents.types import OutputChannel

log = structlog.get_logger("subagents.dialogue")

PENDING_ELICITATION = "pending_elicitation"


class ReachableChannels:
    """The channel of each conversation's latest message, for channels that can send later
    (at most ``size`` conversations, the least recent forgotten first)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._latest: OrderedDict[str, OutputChannel] = OrderedDict()

    def remember(self, sender_id: str, channel: OutputChannel | None) -> None:
        """Note the channel of ``sender_id``'s latest message (forgotten when it cannot send
        later: the user is then reached on their next request only)."""
        if channel is None or not channel.can_send_later:
            self._latest.pop(sender_id, None)
            return
        self._latest[sender_id] = channel
        self._latest.move_to_end(sender_id)
        while len(self._latest) > self.size:
            self._latest.popitem(last=False)

    def get(self, sender_id: str) -> OutputChannel | None:
        """The channel to resume ``sender_id``'s conversation on, if any."""
        return self._latest.get(sender_id)


def split_owner_key(owner_key: str) -> tuple[str, str]:
    """``<conversation>:<tool call id>`` -> (conversation, tool call id)."""
    sender_id, _, call_id = owner_key.rpartition(":")
    return sender_id, call_id


def parked_on(stack: Stack, call_id: str) -> bool:
    """Whether the conversation's waiting agent is parked on the MCP call ``call_id``."""
    frame = stack.active_agent()
    pending = frame.metadata.get(PENDING_ELICITATION) if frame is not None else None
    call = pending.get("call") if isinstance(pending, dict) else None
    return isinstance(call, dict) and call.get("id") == call_id


def latest_metadata(events: list[dict[str, Any]],
                    allowed: frozenset[str] | None) -> dict[str, Any]:
    """The metadata of the latest user message that agents saw with it (``allowed``: the keys
    that reach agents; None: every key)."""
    latest = next((e for e in reversed(events) if e.get("event") == "user"), None)
    recorded = (latest or {}).get("metadata")
    return split_client_metadata(recorded if isinstance(recorded, dict) else {},
                                 allowed).for_agents
