"""Rasa names that have no direct counterpart here: events as dicts, exceptions, JSON helpers.

Events are ``dict`` subclasses in the tracker format (``{"event": "slot", "name", "value"}``),
so whatever a hook returns is recorded as it is; they also expose Rasa's attributes
(``SlotSet.key``, ``.value``; ``BotUttered.text``, ...).
"""

from __future__ import annotations

import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

from subagents.exceptions import AgentInitializationError


class Event(dict[str, Any]):
    """Base of the event shims: a tracker-format dict."""

    type_name = "event"

    def __init__(self, timestamp: float | None = None,
                 metadata: dict[str, Any] | None = None, **fields: Any) -> None:
        super().__init__(event=self.type_name, timestamp=timestamp or time.time(), **fields)
        if metadata is not None:
            self["metadata"] = metadata

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def as_dict(self) -> dict[str, Any]:
        """The event as a plain dict."""
        return dict(self)


class SlotSet(Event):
    """``SlotSet(key, value)``: set a slot."""

    type_name = "slot"

    def __init__(self, key: str, value: Any = None, timestamp: float | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        super().__init__(timestamp, metadata, name=key, value=value)

    @property
    def key(self) -> str:
        """The slot's name."""
        return str(self["name"])


class BotUttered(Event):
    """A bot message."""

    type_name = "bot"

    def __init__(self, text: str | None = None, data: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None, timestamp: float | None = None) -> None:
        super().__init__(timestamp, metadata or {}, text=text, data=data or {})


class UserUttered(Event):
    """A user message."""

    type_name = "user"

    def __init__(self, text: str | None = None, intent: dict[str, Any] | None = None,
                 entities: list[dict[str, Any]] | None = None,
                 parse_data: dict[str, Any] | None = None, timestamp: float | None = None,
                 input_channel: str | None = None, message_id: str | None = None,
                 metadata: dict[str, Any] | None = None, **_: Any) -> None:
        parse = dict(parse_data or {})
        if intent is not None:
            parse.setdefault("intent", intent)
        if entities is not None:
            parse.setdefault("entities", entities)
        super().__init__(timestamp, metadata or {}, text=text, parse_data=parse,
                         input_channel=input_channel, message_id=message_id)


class ActionExecuted(Event):
    """An action ran."""

    type_name = "action"

    def __init__(self, action_name: str | None = None, policy: str | None = None,
                 confidence: float | None = None, timestamp: float | None = None,
                 metadata: dict[str, Any] | None = None, **_: Any) -> None:
        super().__init__(timestamp, metadata, name=action_name, policy=policy,
                         confidence=confidence)


class FollowupAction(Event):
    """Run this action next."""

    type_name = "followup"

    def __init__(self, name: str, timestamp: float | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        super().__init__(timestamp, metadata, name=name)


class ProtocolType(StrEnum):
    """Rasa's agent protocol types."""

    MCP_OPEN = "mcp_open"
    MCP_TASK = "mcp_task"
    A2A = "a2a"


class RasaException(Exception):  # noqa: N818 - Rasa's name
    """Base of Rasa's exceptions."""


class FileNotFoundException(RasaException, FileNotFoundError):  # noqa: N818 - Rasa's name
    """A file does not exist."""


class FileIOException(RasaException):
    """A file could not be read or parsed."""


class InvalidParameterException(RasaException, ValueError):  # noqa: N818 - Rasa's name
    """A parameter has an invalid value."""


AgentInitializationException = AgentInitializationError


def read_json_file(filename: str | Path) -> Any:
    """Read a JSON file (UTF-8); a missing file or bad JSON raises a Rasa-style exception."""
    path = Path(filename)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundException(f"Failed to read file, '{path}' does not exist.") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FileIOException(f"Failed to read JSON from '{path}': {exc}") from exc


def write_text_file(content: str, file_path: str | Path, encoding: str = "utf-8",
                    append: bool = False) -> None:
    """Write (or append) text to a file."""
    with open(file_path, "a" if append else "w", encoding=encoding) as handle:
        handle.write(content)


def write_json_to_file(filename: str | Path, obj: Any, **kwargs: Any) -> None:
    """Write ``obj`` as indented JSON (UTF-8, non-ASCII kept)."""
    write_text_file(json.dumps(obj, indent=2, ensure_ascii=False, **kwargs), filename)
