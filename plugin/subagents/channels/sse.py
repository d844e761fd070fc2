"""Server-sent events channel: message start/chunk/end as text is generated, tool and slot
events, then ``done`` (written by the server). With ``trace`` (the inspector's
``?inspect=true``) the agent loop's step records go out too: ``agent_run_start``,
``agent_step``, ``agent_text``, ``agent_tool_call``, ``agent_wait``, ``agent_run_end``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from subagents.types import OutputChannel


def sse_frame(event: str, data: dict[str, Any]) -> bytes:
    """Encode one server-sent event frame with ``data`` as JSON."""
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


class QueueOutputChannel(OutputChannel):
    """Puts SSE frames on a queue as things happen; the HTTP response drains it."""

    supports_streaming = True

    def __init__(self, *, trace: bool = False) -> None:
        self.wants_trace = trace
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._message = 0
        self.texts: list[str] = []

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Queue a ``message`` frame with the text and any buttons or custom payload."""
        self._message += 1
        data: dict[str, Any] = {"id": self._message, "text": text}
        for key in ("buttons", "custom"):
            if kwargs.get(key):
                data[key] = kwargs[key]
        self.texts.append(text)
        await self.queue.put(sse_frame("message", data))

    async def send_response_chunk_start(self, recipient_id: str) -> None:
        """Queue a ``message_start`` frame for a new streamed message."""
        self._message += 1
        await self.queue.put(sse_frame("message_start", {"id": self._message}))

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        """Queue a ``message_chunk`` frame."""
        await self.queue.put(sse_frame("message_chunk", {"id": self._message, "text": chunk}))

    async def send_response_chunk_end(self, recipient_id: str, interrupted: bool = False) -> None:
        """Queue a ``message_end`` frame that says whether the message was interrupted."""
        await self.queue.put(sse_frame("message_end", {"id": self._message,
                                                       "interrupted": interrupted}))

    async def send_event(self, recipient_id: str, event: dict[str, Any]) -> None:
        """Queue ``tool`` frames for executed MCP tools and ``slot`` frames for slot events."""
        if event.get("event") == "mcp_tool_executed":
            await self.queue.put(sse_frame("tool", {
                k: event.get(k) for k in ("tool_name", "arguments", "result", "is_error",
                                          "error_message")}))
        elif event.get("event") == "slot":
            await self.queue.put(sse_frame("slot", {"name": event.get("name"),
                                                    "value": event.get("value")}))

    async def send_trace(self, recipient_id: str, kind: str, data: dict[str, Any]) -> None:
        """One step record of an agent run (only sent when the channel wants traces)."""
        if self.wants_trace:
            await self.queue.put(sse_frame(kind, data))
