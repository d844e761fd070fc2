"""A terminal channel: bot text streams as it is generated; tool calls and slots dimmed."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from subagents.types import OutputChannel

DIM, RESET, BOLD = "\033[2m", "\033[0m", "\033[1m"


class ConsoleOutputChannel(OutputChannel):
    """Prints the bot's messages to a terminal stream; tool calls with ``show_tools`` (default:
    ``debug``), slot changes with ``debug``."""

    supports_streaming = True

    def __init__(self, stream: TextIO | None = None, *, debug: bool = False,
                 color: bool | None = None, prefix: str = "bot> ",
                 show_tools: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.debug = debug
        self.show_tools = debug if show_tools is None else show_tools
        self.color = self.stream.isatty() if color is None else color
        self.prefix = prefix
        self._streaming = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.color else text

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        """Print the text, then any buttons as a numbered list."""
        self._write(f"{self.prefix}{text}\n")
        for index, button in enumerate(kwargs.get("buttons") or [], 1):
            self._write(f"      {index}. {button.get('title')}  "
                        f"{self._dim(str(button.get('payload', '')))}\n")

    async def send_response_chunk_start(self, recipient_id: str) -> None:
        """Print the prefix that starts a streamed message."""
        self._streaming = True
        self._write(self.prefix)

    async def send_response_chunk(self, recipient_id: str, chunk: str) -> None:
        """Print one chunk of the streamed message."""
        self._write(chunk)

    async def send_response_chunk_end(self, recipient_id: str, interrupted: bool = False) -> None:
        """End the streamed line, marking it when it was interrupted."""
        self._streaming = False
        self._write(" …[interrupted]\n" if interrupted else "\n")

    async def send_event(self, recipient_id: str, event: dict[str, Any]) -> None:
        """Print executed tool calls (``show_tools``) and slot values (``debug``)."""
        kind = event.get("event")
        if kind == "mcp_tool_executed" and self.show_tools:
            args = ", ".join(f"{k}={json.dumps(v)}" for k, v in
                             (event.get("arguments") or {}).items())
            outcome = f"error: {event.get('error_message')}" if event.get("is_error") else \
                str(event.get("result") or "")
            outcome = outcome.replace("\n", " ")
            if len(outcome) > 120:
                outcome = outcome[:117] + "..."
            self._write(self._dim(f"      ⚙ {event.get('tool_name')}({args}) → {outcome}") + "\n")
        elif kind == "slot" and self.debug:
            self._write(self._dim(f"      ◆ slot {event.get('name')} = "
                                  f"{json.dumps(event.get('value'))}") + "\n")
