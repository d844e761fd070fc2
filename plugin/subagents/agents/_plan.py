"""The per-invocation state of a run, and a model response parsed into a plan."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..llm import LLMResponse, ToolCall, Usage
from ..tools.base import PlannedCall, Tool
from ..types import OutputChannelLike as OutputChannel
from .schemas import AgentInput, AgentStatus, AgentToolResult

_NAME_RUN = re.compile(r"^[A-Za-z0-9_.\-]+")
_SANITISE = re.compile(r"[^A-Za-z0-9_\-]")


@dataclass
class Outcome:
    """How a run ends; built by the step functions, turned into an AgentOutput at the end."""

    status: AgentStatus
    exit_reason: str
    error_message: str | None = None
    response_message: str | None = None

    @classmethod
    def fatal(cls, message: str, reason: str = "error") -> Outcome:
        return cls(AgentStatus.FATAL_ERROR, reason, error_message=message)


@dataclass
class Plan:
    """A model response, parsed before anything runs."""

    response: LLMResponse
    text: str
    """Stripped text ('' when none)."""
    calls: list[PlannedCall]
    unavailable: list[PlannedCall]
    builtin: list[PlannedCall]
    """Calls of built-in tools handled by the agent itself (task_completed)."""
    malformed: list[ToolCall]
    client: list[PlannedCall] = field(default_factory=list)
    """Calls of client-executed tools (DECISIONS A6): the run parks until results arrive."""
    approval: list[PlannedCall] = field(default_factory=list)
    """Calls of tools that need the user's yes first (A5): the run parks with a question."""
    has_text: bool = False
    """The model sent some text, perhaps only whitespace (which is never sent or recorded)."""

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.calls or self.unavailable or self.builtin or self.client
                    or self.approval)

    def called(self, name: str) -> bool:
        return any(c.name == name for c in self.builtin) or any(c.name == name
                                                                   for c in self.calls)


@dataclass
class AgentRun:
    """State that lives for one invocation only."""

    input: AgentInput
    channel: OutputChannel | None
    tools: dict[str, Tool] = field(default_factory=dict)
    tool_messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, AgentToolResult] = field(default_factory=dict)
    structured: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    unavailable_rounds: int = 0
    completion_pending: bool = False
    tool_counts: dict[str, int] = field(default_factory=dict)
    slot_values: dict[str, Any] = field(default_factory=dict)
    initial_slot_values: dict[str, Any] = field(default_factory=dict)
    slot_set_by_hook: set[str] = field(default_factory=set)
    output_metadata: dict[str, Any] = field(default_factory=dict)
    recorded_slots: dict[str, Any] = field(default_factory=dict)
    """Slots whose SlotSet was recorded during the run, with the value recorded last."""
    full_results: dict[str, str] = field(default_factory=dict)
    """Results over ``tool_result_budget``, kept whole for ``recall`` (A4)."""

    @property
    def recipient_id(self) -> str | None:
        return self.input.recipient_id or self.input.metadata.get("sender_id")

    def count_tool(self, name: str) -> None:
        self.tool_counts[name] = self.tool_counts.get(name, 0) + 1


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


def assistant_message(plan: Plan) -> dict[str, Any]:
    """The assistant turn as the provider must see it again (arguments re-serialised)."""
    calls = [*plan.calls, *plan.unavailable, *plan.builtin, *plan.client, *plan.approval]
    order = {c.id: i for i, c in enumerate(plan.response.tool_calls)}
    calls.sort(key=lambda c: order.get(c.id, len(order)))
    return {"role": "assistant", "content": plan.text or None, "tool_calls": [
        {"id": c.id, "type": "function",
         "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls]}


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}
