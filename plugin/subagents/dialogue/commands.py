"""Commands the dialogue understanding produces, and their text forms.

One command per line: ``start flow X``, ``set slot X Y``, ``cancel flow``, ``continue agent``,
``restart agent X``, ``offtopic reply``, ``cannot handle``, ``disambiguate flows X Y``,
``repeat message``, ``skip question``, and the knowledge command in both of Rasa's current
spellings, ``search and reply`` (the search-ready generator's) and ``provide info``. Rasa's v1
forms (``StartFlow(x)``, ``SetSlot(x, y)``, ``CancelFlow()``, ``ChitChat()``,
``CannotHandle()``, ``ContinueAgent()``, ``RestartAgent(x)``, ``Clarify(x, y)``,
``RepeatBotMessages()``, ``SkipQuestion()``, ``SearchAndReply()``) are accepted too. Lines that
match nothing are ignored.

Button payloads need no model: ``/SetSlots(a=1, b=x)`` sets slots and ``/name`` is an intent
(a flow whose ``nlu_trigger`` names it starts, or the flow with that id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StartFlow:
    """Start the flow ``flow`` (interrupting the running one)."""

    flow: str


@dataclass(frozen=True)
class SetSlot:
    """Set the slot ``name`` to ``value`` (coerced to the slot's type)."""

    name: str
    value: Any


@dataclass(frozen=True)
class CancelFlow:
    """Cancel the running user flow."""


@dataclass(frozen=True)
class ContinueAgent:
    """The message is for the sub agent that is waiting for the user."""


@dataclass(frozen=True)
class RestartAgent:
    """Run the completed sub agent ``agent`` again."""

    agent: str


@dataclass(frozen=True)
class ChitChat:
    """Small talk or an off-topic message."""


@dataclass(frozen=True)
class KnowledgeAnswer:
    """A question the knowledge base may answer; runs ``pattern_search``."""


@dataclass(frozen=True)
class CannotHandle:
    """The message could not be understood."""

    reason: str | None = None


@dataclass(frozen=True)
class Clarify:
    """The message could mean several flows; ask which one."""

    flows: tuple[str, ...]


@dataclass(frozen=True)
class RepeatBotMessages:
    """Say the last bot messages again."""


@dataclass(frozen=True)
class SkipQuestion:
    """The user wants to skip the question being asked."""


@dataclass(frozen=True)
class SessionStart:
    """A new session starts (the ``session_start`` intent)."""


@dataclass(frozen=True)
class SessionEnd:
    """The session ends (the ``session_end`` intent)."""


@dataclass(frozen=True)
class Restart:
    """Start the conversation afresh (the ``restart`` intent)."""


@dataclass(frozen=True)
class Intent:
    """An intent (a ``/name`` payload, or one a client sent in the message metadata), resolved
    against the flows' ``nlu_trigger`` with its ``confidence``."""

    name: str
    confidence: float = 1.0


@dataclass(frozen=True)
class InternalError:
    """Something prevents understanding the message; runs ``pattern_internal_error``.

    Attributes:
        error_type: The pattern's ``context.error_type`` (Rasa's names, e.g.
            ``rasa_internal_error_user_input_too_long``).
        info: The pattern's ``context.info`` (e.g. ``{"max_characters": 420}``).
    """

    error_type: str = "rasa_internal_error_default"
    info: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class HandleCodeChange:
    """Flows on the stack changed since they started; runs ``pattern_code_change``."""

    flows: tuple[str, ...] = ()


Command = (StartFlow | SetSlot | CancelFlow | ContinueAgent | RestartAgent | ChitChat
           | KnowledgeAnswer | CannotHandle | Clarify | RepeatBotMessages | SkipQuestion
           | SessionStart | SessionEnd | Restart | Intent | InternalError | HandleCodeChange)

_LINE_FORMS: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"^start flow ([\w\-]+)$", re.I), lambda m: StartFlow(m.group(1))),
    (re.compile(r"^set slot ([\w\-]+)\s+(.+)$", re.I), lambda m: SetSlot(m.group(1),
                                                                      parse_value(m.group(2)))),
    (re.compile(r"^cancel flow$", re.I), lambda m: CancelFlow()),
    (re.compile(r"^continue agent$", re.I), lambda m: ContinueAgent()),
    (re.compile(r"^restart agent ([\w\-]+)$", re.I), lambda m: RestartAgent(m.group(1))),
    (re.compile(r"^(offtopic reply|chitchat)$", re.I), lambda m: ChitChat()),
    (re.compile(r"^(search and reply|provide info)['\"`]*$", re.I),
     lambda m: KnowledgeAnswer()),
    (re.compile(r"^cannot handle$", re.I), lambda m: CannotHandle()),
    (re.compile(r"^disambiguate flows\s+(.+)$", re.I),
     lambda m: Clarify(tuple(m.group(1).replace(",", " ").split()))),
    (re.compile(r"^repeat message$", re.I), lambda m: RepeatBotMessages()),
    (re.compile(r"^skip question$", re.I), lambda m: SkipQuestion()),
    (re.compile(r"^StartFlow\(\s*['\"]?([\w\-]+)['\"]?\s*\)$"), lambda m: StartFlow(m.group(1))),
    (re.compile(r"^SetSlot\(\s*['\"]?([\w\-]+)['\"]?\s*,\s*(.*)\)$"),
     lambda m: SetSlot(m.group(1), parse_value(m.group(2)))),
    (re.compile(r"^CancelFlow\(\s*\)$"), lambda m: CancelFlow()),
    (re.compile(r"^ContinueAgent\(\s*\)$"), lambda m: ContinueAgent()),
    (re.compile(r"^RestartAgent\(\s*['\"]?([\w\-]+)['\"]?\s*\)$"),
     lambda m: RestartAgent(m.group(1))),
    (re.compile(r"^ChitChat\(\s*\)$"), lambda m: ChitChat()),
    (re.compile(r"^CannotHandle\(\s*\)$"), lambda m: CannotHandle()),
    (re.compile(r"^SearchAndReply\(\s*\)$"), lambda m: KnowledgeAnswer()),
    (re.compile(r"^Clarify\(\s*\[?(.*?)\]?\s*\)$"),
     lambda m: Clarify(tuple(re.findall(r"[\w\-]+", m.group(1))))),
    (re.compile(r"^RepeatBotMessages\(\s*\)$"), lambda m: RepeatBotMessages()),
    (re.compile(r"^SkipQuestion\(\s*\)$"), lambda m: SkipQuestion()),
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
    """Inputs that need no model: ``/SetSlots(a=1, b=x)`` and ``/name`` (button payloads).

    ``/name`` is the flow ``name`` when there is one, otherwise an :class:`Intent`.
    """
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
    if match:
        return [Intent(match.group(1))]
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
