"""The result budget (``configuration.tool_result_budget``) and the ``recall`` tool.

A result longer than the budget reaches the model as a preview: its first characters, its
length, its shape (JSON keys or list length) and how to read more. The built-in ``recall`` tool
reads any part of the whole result. The tracker always keeps the whole result.
"""

from __future__ import annotations

import json

from subagents.tools.base import (
    CallContext,
    PlannedCall,
    Tool,
    ToolOutcome,
    Toolset,
    WrapperToolset,
)
from subagents.types import AgentToolResult, AgentToolSchema, JsonObject

RECALL = "recall"


def preview(call_id: str, text: str, budget: int) -> str:
    """What the model sees of a result longer than the budget."""
    head = text[:budget]
    shape = ""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        shape = f" It is a JSON object with keys: {', '.join(list(parsed)[:30])}."
    elif isinstance(parsed, list):
        shape = f" It is a JSON list of {len(parsed)} items."
    return (f"{head}\n[Result truncated: {len(text)} characters in all.{shape} Call "
            f"`{RECALL}` with call_id \"{call_id}\" (and offset/length) to read more.]")


def recall_tool(store: dict[str, str]) -> Tool:
    """The ``recall`` tool reading the whole results kept in ``store`` (call id -> text)."""
    schema = AgentToolSchema(
        name=RECALL, description="Read more of a tool result that was truncated.",
        parameters={"type": "object", "properties": {
            "call_id": {"type": "string", "description": "The id of the truncated call."},
            "offset": {"type": "integer", "default": 0},
            "length": {"type": "integer", "default": 4000}}, "required": ["call_id"]})

    async def run(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
        text = store.get(str(arguments.get("call_id")))
        if text is None:
            known = ", ".join(store) or "none"
            return AgentToolResult(tool_name=RECALL, is_error=True,
                                   error_message=f"no truncated result with that call_id "
                                                 f"(known: {known})")
        offset = max(0, int(arguments.get("offset") or 0))
        length = max(1, int(arguments.get("length") or 4000))
        return AgentToolResult(tool_name=RECALL, result=text[offset:offset + length])

    return Tool(schema=schema, run=run, source="builtin", read_only=True)


class ResultBudgetToolset(WrapperToolset):
    """Offers ``recall`` and turns results over ``budget`` characters into previews."""

    def __init__(self, inner: Toolset, budget: int) -> None:
        super().__init__(inner)
        self.budget = budget
        self.full_results: dict[str, str] = {}
        """Whole results over the budget, by call id (for ``recall``)."""
        self._recall = recall_tool(self.full_results)

    def tools(self) -> list[Tool]:
        """The inner tools, then ``recall``."""
        return [*self.inner.tools(), self._recall]

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """The inner call; a long successful result gets a preview for the model."""
        outcome = await self.inner.call(call, ctx)
        text = outcome.result.result
        if outcome.deferred is None and not outcome.result.is_error and text is not None \
                and len(text) > self.budget and call.name != RECALL:
            self.full_results[call.id] = text
            outcome.model_text = preview(call.id, text, self.budget)
        return outcome
