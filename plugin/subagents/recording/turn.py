"""Recording conversations: every model, tool and A2A call of a turn, kept with the tracker.

With recording on (``subagents serve --record`` for every conversation of a process, or the
assistant's ``switch_recording`` for one), each turn collects what its model calls were asked
and answered, what its tool calls were given and returned, and what remote A2A agents answered.
A recorded turn's :class:`TurnRecording` travels to its calls in
the turn's :class:`~subagents.types.CallScope`; the processor stores the collection in the
metadata of the turn's closing ``action_listen`` event (key ``recording``), so it lives with the
tracker in any store; ``subagents test export`` turns it into a conversation test.

The switch of one conversation is stored with the conversation, never in a process: an
``action_listen`` event whose metadata says ``record_conversation: true`` (or ``false``). Every
worker that shares the tracker store sees it, and a restart keeps it. The conversation's
dialogue-state snapshot carries its latest value, which a turn loads anyway
(:func:`recorder_for`), so it costs no store round trip; a switch made while a turn runs waits
for the conversation's lock and takes effect from the next turn on.

Before anything is stored, values of sensitive fields (``password``, ``api_key``, ``token``, ...
plus the names in ``SUBAGENTS_RECORD_REDACT_FIELDS``, comma-separated) become ``[redacted]``, and
so does every occurrence of the value of a secret-looking environment variable (names ending in
``_KEY``, ``_TOKEN``, ``_SECRET`` or containing ``PASSWORD``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from subagents import events as ev

METADATA_KEY = "recording"
SWITCH_KEY = "record_conversation"
REDACT_FIELDS_ENV = "SUBAGENTS_RECORD_REDACT_FIELDS"
REDACTED = "[redacted]"
DEFAULT_SENSITIVE_FIELDS = frozenset({
    "password", "passwd", "secret", "token", "access_token", "refresh_token", "api_key",
    "apikey", "authorization", "cookie", "credit_card", "card_number", "cvv", "iban", "ssn",
})
_SECRET_ENV = re.compile(r"(_KEY|_TOKEN|_SECRET)$|PASSWORD", re.IGNORECASE)
_MIN_SECRET_LENGTH = 6

_enabled_for_all = False
"""Set by ``serve --record``: a setting of the process, read when a turn starts."""


def enable(*, all_conversations: bool = True) -> None:
    """Record every conversation of this process (``serve --record``); False turns it off."""
    global _enabled_for_all
    _enabled_for_all = all_conversations


def reset() -> None:
    """Turn recording of every conversation off (for tests)."""
    enable(all_conversations=False)


def switch_event(on: bool) -> dict[str, Any]:
    """The event that turns recording of its conversation on (or off) from the next turn on.

    An ``action_listen`` (the conversation waits for the user, as it did before), so trackers
    keep only event types Rasa knows.
    """
    return ev.action_executed("action_listen", metadata={SWITCH_KEY: on})


def conversation_switch(events: list[dict[str, Any]]) -> bool | None:
    """The latest recording switch among ``events`` (None when they hold none)."""
    for event in reversed(events):  # the cheapest test first
        metadata = event.get("metadata")
        if metadata and isinstance(metadata, dict) and SWITCH_KEY in metadata \
                and event.get("event") == "action":
            value = metadata[SWITCH_KEY]
            if isinstance(value, bool):
                return value
    return None


def is_switch_event(event: dict[str, Any]) -> bool:
    """Whether ``event`` is a recording switch (and not the end of a turn)."""
    return event.get("event") == "action" and isinstance(
        (event.get("metadata") or {}).get(SWITCH_KEY), bool)


def is_recording(events: list[dict[str, Any]]) -> bool:
    """Whether the next turn of the conversation with these events (all of them) is
    recorded."""
    return _enabled_for_all or conversation_switch(events) is True


def records_all() -> bool:
    """Whether every conversation of this process is recorded (``serve --record``)."""
    return _enabled_for_all


def recorder_for(switched_on: bool) -> TurnRecording | None:
    """The recording of the next turn of a conversation whose stored switch is (or is not)
    ``switched_on``, or None when that turn is not recorded."""
    return TurnRecording() if _enabled_for_all or switched_on else None


class TurnRecording:
    """What one recorded turn's model, tool and A2A calls were asked and answered (a
    :class:`~subagents.types.CallRecorder`); every entry is redacted as it is added."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def _add(self, entry: dict[str, Any]) -> None:
        self.entries.append(redact(entry))

    def record_model_call(self, caller: str, messages: list[dict[str, Any]],
                          tools: list[dict[str, Any]] | None, response: Any) -> None:
        """One model call: who asked, the request's messages and tool names, the reply."""
        calls = [{"id": c.id, "name": c.name,
                  "arguments": c.arguments if c.arguments is not None else c.raw_arguments}
                 for c in getattr(response, "tool_calls", None) or []]
        names = [str((t.get("function") or {}).get("name") or t.get("name"))
                 for t in tools or [] if isinstance(t, dict)]
        self._add({"kind": "model", "caller": caller,
                   "request": {"messages": _plain(messages), "tools": names},
                   "response": {"text": getattr(response, "text", None), "tool_calls": calls}})

    def record_model_error(self, caller: str, error: BaseException) -> None:
        """A model call that failed (the script then answers with an error)."""
        status = getattr(error, "status_code", None) or getattr(error, "status", None)
        self._add({"kind": "model", "caller": caller, "request": {},
                   "error": {"status": int(status) if isinstance(status, int) else 500,
                             "message": str(error)[:500]}})

    def record_tool_call(self, tool: Any, arguments: Any, result: Any, *,
                         flow_step: dict[str, Any] | None = None) -> None:
        """One tool call: the tool (name, source, description, schema), arguments, result.

        An agent's call passes its tool (``source``, ``schema``) and its tool result. A flow
        step that calls an MCP tool directly passes the tool as the server listed it
        (``server``, ``description``, ``input_schema``), the result as its output expressions
        see it (``content``, ``structuredContent``, ``isError``, ``meta``) or, when the call
        failed, ``{"is_error": True, "error_message": ...}``, and ``flow_step`` (``flow_id``,
        ``step_id``).
        """
        schema = getattr(tool, "schema", None)
        server = getattr(tool, "server", None)
        source = getattr(tool, "source", None) or (f"mcp:{server}" if server else "")
        dumped = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
        entry = {"kind": "tool", "tool_name": str(getattr(tool, "name", "unknown")),
                 "source": str(source),
                 "description": getattr(schema, "description", None)
                 if schema is not None else getattr(tool, "description", None),
                 "input_schema": getattr(schema, "parameters", None)
                 if schema is not None else getattr(tool, "input_schema", None),
                 "arguments": _plain(arguments), "result": _plain(dumped)}
        if flow_step is not None:
            entry["flow_step"] = _plain(flow_step)
        self._add(entry)

    def record_a2a_call(self, agent: str, reply: dict[str, Any]) -> None:
        """What a remote A2A agent answered one call, as an ``a2a_script`` reply
        (``message``, or ``state`` with ``text``, ``artifacts`` and ``working``; or
        ``error``)."""
        self._add({"kind": "a2a", "agent": agent, "reply": _plain(reply)})

    def metadata(self, base: dict[str, Any] | None) -> dict[str, Any]:
        """``base`` plus this turn's recording (for the turn's closing event)."""
        return {**(base or {}), METADATA_KEY: list(self.entries)}


def recorded_entries(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The recording of each recorded turn of a conversation, in order."""
    found = []
    for event in events:
        entries = (event.get("metadata") or {}).get(METADATA_KEY)
        if event.get("event") == "action" and isinstance(entries, list):
            found.append(entries)
    return found


# ---------------------------------------------------------------------- redaction
def sensitive_fields() -> frozenset[str]:
    """The field names whose values are redacted (defaults plus the environment's list)."""
    extra = os.environ.get(REDACT_FIELDS_ENV, "")
    return DEFAULT_SENSITIVE_FIELDS | {f.strip().lower() for f in extra.split(",") if f.strip()}


def _secrets() -> list[str]:
    values = {v for k, v in os.environ.items()
              if _SECRET_ENV.search(k) and len(v) >= _MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def redact(value: Any) -> Any:
    """A copy of ``value`` with sensitive fields and secret values replaced by ``[redacted]``.

    JSON text inside strings (tool results, tool arguments) is redacted field by field too.
    """
    return _redact(value, sensitive_fields(), _secrets())


def _redact(value: Any, fields: frozenset[str], secrets: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if str(k).lower() in fields and v not in (None, "")
                else _redact(v, fields, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, fields, secrets) for v in value]
    if isinstance(value, str):
        return _redact_text(value, fields, secrets)
    return value


def _redact_text(text: str, fields: frozenset[str], secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    stripped = text.strip()
    if stripped[:1] in "{[" and any(f in stripped.lower() for f in fields):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            return text
        return json.dumps(_redact(parsed, fields, []), ensure_ascii=False)
    return text


def _plain(value: Any) -> Any:
    """A JSON-compatible copy (anything else becomes its text)."""
    return json.loads(json.dumps(value, default=str))
