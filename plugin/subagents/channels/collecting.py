"""An output channel that collects what it is sent, for the REST route, A2A and tests."""

from __future__ import annotations

from typing import Any

from subagents.types import OutputChannel


class CollectingOutputChannel(OutputChannel):
    """Collects messages (and streamed chunks) in memory; used by the REST channel and tests."""

    def __init__(self, *, streaming: bool = False) -> None:
        self.supports_streaming = streaming
        self.messages: list[dict[str, Any]] = []
        self.log: list[tuple[str, Any]] = []
        """Arrival order: ("text", msg), ("start"|"chunk"|"end", ...), ("event", e)."""
        self._chunks: list[str] = []

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Collect the message with any buttons, custom payload, image or attachment."""
        message: dict[str, Any] = {"recipient_id": recipient_id, "text": text}
        for key in ("buttons", "custom", "image", "attachment"):
            if kwargs.get(key):
                message[key] = kwargs[key]
        self.messages.append(message)
        self.log.append(("text", message))

    async def send_response_chunk_start(self, recipient_id: str) -> None:
        """Start collecting the chunks of a streamed message."""
        self._chunks = []
        self.log.append(("start", recipient_id))

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        """Collect one chunk of the streamed message."""
        self._chunks.append(chunk)
        self.log.append(("chunk", chunk))

    async def send_response_chunk_end(self, recipient_id: str, interrupted: bool = False) -> None:
        """Join the collected chunks into one message marked ``streamed``, unless empty."""
        text = "".join(self._chunks).strip()
        self.log.append(("end", interrupted))
        if text:
            self.messages.append({"recipient_id": recipient_id, "text": text, "streamed": True})
        self._chunks = []

    async def send_event(self, recipient_id: str, event: dict[str, Any]) -> None:
        """Record the event in ``log``."""
        self.log.append(("event", event))

    @property
    def texts(self) -> list[str]:
        """The texts of all collected messages, in order."""
        return [m["text"] for m in self.messages]
