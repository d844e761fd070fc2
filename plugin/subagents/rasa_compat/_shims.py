"""Rasa names that have no direct counterpart here: exceptions, JSON helpers, enums.

Rasa's event classes are the package's own typed events (:mod:`subagents.types`): tracker-format
dicts with Rasa's constructors and attributes (``SlotSet.key``, ``.value``; ``BotUttered.text``,
...), re-exported here.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from subagents.exceptions import AgentInitializationError
from subagents.types import (
    ActionExecuted,
    BotUttered,
    Event,
    FollowupAction,
    McpToolExecuted,
    SlotSet,
    UserUttered,
)

__all__ = ["ActionExecuted", "BotUttered", "Event", "FollowupAction", "McpToolExecuted",
           "SlotSet", "UserUttered"]


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

# The keys of a tool definition in the OpenAI function-calling format and of chat messages, by
# the names Rasa gives them (an agent class builds its own tool dicts with these).
TOOL_TYPE_KEY = "type"
TOOL_TYPE_FUNCTION_KEY = "function"
TOOL_NAME_KEY = "name"
TOOL_DESCRIPTION_KEY = "description"
TOOL_PARAMETERS_KEY = "parameters"
TOOL_STRICT_KEY = "strict"
TOOL_PROPERTIES_KEY = "properties"
TOOL_REQUIRED_KEY = "required"
TOOL_ADDITIONAL_PROPERTIES_KEY = "additionalProperties"
TOOL_PROPERTY_TYPE_KEY = "type"
TOOL_INPUT_SCHEMA_KEY = "input_schema"
KEY_ROLE = "role"
KEY_CONTENT = "content"
KEY_TOOL_CALL_ID = "tool_call_id"
KEY_TOOL_CALLS = "tool_calls"
KEY_FUNCTION = "function"
KEY_NAME = "name"
KEY_ARGUMENTS = "arguments"
KEY_ID = "id"
KEY_TYPE = "type"


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
