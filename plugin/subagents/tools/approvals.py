"""Approvals (``configuration.tools.<name>.requires_approval: true``).

A call of such a tool is not run: it is deferred, the agent asks the user a yes/no question and
the run parks (``input_required``, exit reason ``approval``) with the exchange saved in the
output metadata under ``pending_approval``. On the next turn a yes runs the calls; anything else
answers them as declined, and the model continues from there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from subagents.config.sub_agent import ToolSettings
from subagents.tools.base import (
    CallContext,
    Deferral,
    PendingCalls,
    PlannedCall,
    Tool,
    ToolOutcome,
    Toolset,
    WrapperToolset,
)
from subagents.types import ChatMessage

PENDING_KEY = "pending_approval"
DECLINED = "The user did not approve this call, so it was not run."
_YES = re.compile(r"^\s*(yes|y|yeah|yep|sure|ok|okay|go ahead|please do|do it|confirm(ed)?|"
                  r"approved?|fine)\b", re.I)


def is_yes(text: str) -> bool:
    """Whether the user's answer approves."""
    return bool(_YES.match(text or ""))


def question(calls: list[PlannedCall]) -> str:
    """The yes/no question naming each call and its arguments."""
    described = "; ".join(f"{c.name}({', '.join(f'{k}={v!r}' for k, v in c.arguments.items())})"
                          for c in calls)
    return f"Before I go ahead: may I run {described}? Please answer yes or no."


@dataclass
class Answered:
    """The user's answer applied to the saved calls."""

    messages: list[ChatMessage]
    """The exchange as it was when the run parked."""
    to_run: list[PlannedCall]
    """Approved calls whose tool is still offered."""
    declined: list[PlannedCall]
    """Calls answered with :data:`DECLINED`."""
    order: list[str]
    """All call ids, in the order of the model's response."""


def answer(pending: PendingCalls, user_message: str, tools: dict[str, Tool]) -> Answered:
    """Split the saved calls into those to run (on a yes) and those declined."""
    approved = is_yes(user_message)
    planned = [PlannedCall(c.id, c.name, c.arguments, tools.get(c.name)) for c in pending.calls]
    to_run = [c for c in planned if approved and c.tool is not None]
    declined = [c for c in planned if c not in to_run]
    return Answered(list(pending.messages), to_run, declined, [c.id for c in planned])


class ApprovalToolset(WrapperToolset):
    """Defers every call of a tool that needs approval, unless :meth:`approve` let it run."""

    def __init__(self, inner: Toolset, settings: dict[str, ToolSettings]) -> None:
        super().__init__(inner)
        self.settings = settings
        self._approved: set[str] = set()

    def approve(self, call_ids: Iterable[str]) -> None:
        """Let these calls (by id) run: the user said yes."""
        self._approved.update(call_ids)

    def needs_approval(self, tool: Tool) -> bool:
        """Whether calls of ``tool`` wait for the user's yes."""
        settings = self.settings.get(tool.name)
        return bool(settings and settings.requires_approval) and \
            tool.source not in ("builtin", "client")

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """Defer the call if it needs approval; otherwise run it."""
        if call.tool is not None and self.needs_approval(call.tool) \
                and call.id not in self._approved:
            return ToolOutcome.deferral(call, Deferral.APPROVAL)
        return await self.inner.call(call, ctx)
