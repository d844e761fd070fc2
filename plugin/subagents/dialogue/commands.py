"""Commands the dialogue understanding produces, and their text forms.

One command per line: ``start flow X``, ``set slot X Y``, ``cancel flow``, ``continue agent``,
``restart agent X``, ``offtopic reply``, ``cannot handle``. Rasa's v1 forms (``StartFlow(x)``,
``SetSlot(x, y)``, ``CancelFlow()``, ``ChitChat()``, ``CannotHandle()``, ``ContinueAgent()``,
``RestartAgent(x)``) are accepted too. Lines that match nothing are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StartFlow:
    flow: str


@dataclass(frozen=True)
class SetSlot:
    name: str
    value: Any


@dataclass(frozen=True)
class CancelFlow:
    pass


@dataclass(frozen=True)
class ContinueAgent:
    pass


@dataclass(frozen=True)
class RestartAgent:
    agent: str


@dataclass(frozen=True)
class ChitChat:
    pass


@dataclass(frozen=True)
class CannotHandle:
    reason: str | None = None


Command = StartFlow | SetSlot | CancelFlow | ContinueAgent | RestartAgent | ChitChat | CannotHandle

_LINE_FORMS: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"^start flow ([\w\-]+)$", re.I), lambda m: StartFlow(m.group(1))),
    (re.compile(r"^set slot ([\w\-]+)\s+(.+)$", re.I), lambda m: SetSlot(m.group(1),
                                                                      parse_value(m.group(2)))),
    (re.compile(r"^cancel flow$", re.I), lambda m: CancelFlow()),
    (re.compile(r"^continue agent$", re.I), lambda m: ContinueAgent()),
    (re.compile(r"^restart agent ([\w\-]+)$", re.I), lambda m: RestartAgent(m.group(1))),
    (re.compile(r"^(offtopic reply|chitchat)$", re.I), lambda m: ChitChat()),
    (re.compile(r"^cannot handle$", re.I), lambda m: CannotHandle()),
    (re.compile(r"^StartFlow\(\s*['\"]?([\w\-]+)['\"]?\s*\)$"), lambda m: StartFlow(m.group(1))),
    (re.compile(r"^SetSlot\(\s*['\"]?([\w\-]+)['\"]?\s*,\s*(.*)\)$"),
     lambda m: SetSlot(m.group(1), parse_value(m.group(2)))),
    (re.compile(r"^CancelFlow\(\s*\)$"), lambda m: CancelFlow()),
    (re.compile(r"^ContinueAgent\(\s*\)$"), lambda m: ContinueAgent()),
    (re.compile(r"^RestartAgent\(\s*['\"]?([\w\-]+)['\"]?\s*\)$"),
     lambda m: RestartAgent(m.group(1))),
    (re.compile(r"^ChitChat\(\s*\)$"), lambda m: ChitChat()),
    (re.compile(r"^CannotHandle\(\s*\)$"), lambda m: CannotHandle()),
]
_SET_SLOTS = re.compile(r"^/SetSlots\((.*)\)$", re.S)
_FLOW = re.compile(r"^/([\w\-]+)$")


def parse_value(raw: str) -> Any:
    """``"Berlin"`` -> Berlin, ``null``/``none`` -> None, ``true``/``false`` -> bool; numbers
    stay text (the collect step coerces to the slot type)."""
    text = raw.strip().rstrip(",").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    low = text.lower()
    if low in ("null", "none", "undefined"):
        return None
    if low in ("true", "false"):
        return low == "true"
    return text


def parse_commands(text: str | None) -> list[Command]:
    """Parse a command generator's answer; unknown lines are ignored."""
    commands: list[Command] = []
    for raw in (text or "").splitlines():
        line = raw.strip().strip("`").strip()
        line = re.sub(r"^[-*\d.)\s]+", "", line) if not line.startswith("/") else line
        for pattern, build in _LINE_FORMS:
            match = pattern.match(line)
            if match:
                commands.append(build(match))
                break
    return commands


def parse_deterministic(text: str, flows: set[str]) -> list[Command] | None:
    """Inputs that need no model: ``/flow_id`` and ``/SetSlots(a=1, b=x)`` (button payloads)."""
    stripped = text.strip()
    match = _SET_SLOTS.match(stripped)
    if match:
        commands: list[Command] = []
        for part in _split_args(match.group(1)):
            if "=" in part:
                name, value = part.split("=", 1)
                commands.append(SetSlot(name.strip(), parse_value(value)))
        return commands
    match = _FLOW.match(stripped)
    if match and match.group(1) in flows:
        return [StartFlow(match.group(1))]
    if stripped == "/session_start" and "pattern_session_start" in flows:
        return [StartFlow("pattern_session_start")]  # how projects greet (e2e tests send it)
    return None


def _split_args(text: str) -> list[str]:
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current)
    return parts
