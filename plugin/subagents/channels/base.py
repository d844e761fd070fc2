"""The output channel interface that agents and the dialogue runtime write to."""

from __future__ import annotations

from typing import Any


class OutputChannel:
    """Receives bot text as soon as it exists. Subclass and override what you need.

    Streaming channels set ``supports_streaming = True`` and get
    ``send_response_chunk_start`` / ``send_response_chunk`` / ``send_response_chunk_end``;
    others get one ``send_text_message`` per message.
    """

    supports_streaming: bool = False
    can_send_later: bool = False
    """True when the channel can reach the user after their request was answered (a socket, a
    messaging platform's send API); such a channel gets the replies of turns that no user
    message started, e.g. an agent resumed when a sign-in completed."""
    streaming_chosen: bool | None = None
    """When a bool, overrides ``supports_streaming`` (per request)."""

    def wants_streaming(self) -> bool:
        """Whether to stream: the explicit choice if one was made, else ``supports_streaming``."""
        if isinstance(self.streaming_chosen, bool):
            return self.streaming_chosen
        return self.supports_streaming

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Send one text message to ``recipient_id``; subclasses must implement it."""
        raise NotImplementedError

    async def send_text_with_buttons(self, recipient_id: str, text: str,
                                     buttons: list[dict[str, Any]], **kwargs: Any) -> None:
        """Send text with buttons; by default passes them to ``send_text_message``."""
        await self.send_text_message(recipient_id, text, buttons=buttons, **kwargs)

    async def send_response_chunk_start(self, recipient_id: str) -> None:
        """Begin a streamed message; channels that stream override it."""

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        """Send one chunk of a streamed message; channels that stream override it."""

    async def send_response_chunk_end(self, recipient_id: str, interrupted: bool = False) -> None:
        """End a streamed message, ``interrupted`` when it stopped early."""

    async def send_event(self, recipient_id: str, event: dict[str, Any]) -> None:
        """Tool and slot events, for channels that show them (debug shell, SSE stream)."""
        return


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
