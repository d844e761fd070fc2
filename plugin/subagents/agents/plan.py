"""A model response parsed into a plan, what a step's calls did, and what a step returns."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from subagents.llm import LLMResponse, ToolCall
from subagents.tools.base import Deferral, PlannedCall, ToolOutcome
from subagents.types import AgentStatus, ChatMessage, ExitReason, JsonObject

_NAME_RUN = re.compile(r"^[A-Za-z0-9_.\-]+")
_SANITISE = re.compile(r"[^A-Za-z0-9_\-]")


@dataclass
class Outcome:
    """How a run ends; turned into an :class:`AgentOutput` at the end."""

    status: AgentStatus
    exit_reason: str
    """An :class:`ExitReason`, or ``tool:<name>`` (:meth:`ExitReason.for_tool`)."""
    error_message: str | None = None
    response_message: str | None = None

    @classmethod
    def fatal(cls, message: str, reason: ExitReason = ExitReason.ERROR) -> Outcome:
        """A fatal error with ``message``."""
        return cls(AgentStatus.FATAL_ERROR, reason, error_message=message)


# ---------------------------------------------------------------------------- step results
@dataclass(frozen=True)
class Continue:
    """The run goes on with another step; ``note`` is a system message for the model."""

    note: str | None = None


@dataclass(frozen=True)
class Finish:
    """The run ends with ``outcome`` (completed, waiting for the user's answer, or failed)."""

    outcome: Outcome


@dataclass(frozen=True)
class Park:
    """The run waits for deferred calls (client tools, approvals); its state is saved in the
    output metadata and the next invocation resumes it."""

    outcome: Outcome


StepResult = Continue | Finish | Park


# ---------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    """A model response, parsed before anything runs."""

    response: LLMResponse
    text: str
    """Stripped text ('' when none)."""
    calls: list[PlannedCall]
    """Calls of offered tools, to run (or defer) through the toolset."""
    unavailable: list[PlannedCall]
    """Calls of tools that are not offered; answered with an error, never run."""
    builtin: list[PlannedCall]
    """Calls of built-in tools the agent handles itself (``task_completed``)."""
    malformed: list[ToolCall]
    """Calls whose arguments were not valid JSON."""
    has_text: bool = False
    """The model sent some text, perhaps only whitespace (which is never sent or recorded)."""

    @property
    def has_tool_calls(self) -> bool:
        """Whether the response calls any tool."""
        return bool(self.calls or self.unavailable or self.builtin)

    def called(self, name: str) -> bool:
        """Whether the response calls ``name`` (an offered or a handled tool)."""
        for calls in (self.builtin, self.calls):
            for call in calls:
                if call.name == name:
                    return True
        return False


@dataclass
class Executed:
    """The outcomes of a step's calls, in call order."""

    outcomes: list[ToolOutcome] = field(default_factory=list)

    @property
    def ran(self) -> list[ToolOutcome]:
        """The calls that ran (not deferred)."""
        return [o for o in self.outcomes if o.deferred is None]

    def deferred(self, reason: Deferral | None = None) -> list[PlannedCall]:
        """The deferred calls (for ``reason``, or all)."""
        return [o.call for o in self.outcomes if o.deferred is not None
                and (reason is None or o.deferred == reason)]

    def succeeded(self, name: str) -> bool:
        """Whether a call of ``name`` ran without an error."""
        return any(o.call.name == name and not o.result.is_error for o in self.ran)


def repair_name(name: str, offered: set[str], taken: set[str]) -> tuple[str, bool]:
    """Return (name, available). Repairs ``task_completed" />`` style suffixes; otherwise
    sanitises the name for the provider (``unknown_tool`` when nothing usable is left)."""
    stripped = name.strip()
    if stripped in offered:
        return stripped, True
    match = _NAME_RUN.match(stripped)
    if match:
        head, rest = match.group(0), stripped[match.end():]
        if head in offered and not any(ch.isalnum() for ch in rest):
            return head, True
    clean = _SANITISE.sub("", stripped)[:64]
    if not clean or clean in offered:
        clean = "unknown_tool"
        index = 1
        while clean in taken:
            clean = f"unknown_tool_{index}"
            index += 1
    return clean, False


def assistant_message(plan: Plan) -> ChatMessage:
    """The assistant turn as the provider must see it again (arguments re-serialised)."""
    calls = [*plan.calls, *plan.unavailable, *plan.builtin]
    if len(calls) > 1:
        order = {c.id: i for i, c in enumerate(plan.response.tool_calls)}
        calls.sort(key=lambda c: order.get(c.id, len(order)))
    return {"role": "assistant", "content": plan.text or None, "tool_calls": [
        {"id": c.id, "type": "function",
         "function": {"name": c.name, "arguments": _dumps(c.arguments)}} for c in calls]}


def _dumps(arguments: JsonObject) -> str:
    # json.dumps({}) is "{}": the common call without arguments skips the encoder
    return "{}" if arguments == {} else json.dumps(arguments)


def tool_message(call_id: str, content: str) -> ChatMessage:
    """The answer to one tool call, as the provider expects it."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def unavailable_text(name: str, offered: list[str]) -> str:
    """The error answer to a call of a tool that is not offered."""
    names = sorted(offered)
    text = f"Error: `{name}` is not an available tool, so nothing was run. "
    if not names:
        text += "No tools are available. "
    elif len(names) <= 30:
        text += f"Available tools: {', '.join(names)}. "
    else:
        text += "Use only the tools listed in this request. "
    return text + "Call a tool by its exact name, or answer the user directly."
