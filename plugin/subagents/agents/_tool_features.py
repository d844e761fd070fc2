"""Per-tool settings (``configuration.tools.<name>``): state mapping (A2), large-result
budget with ``recall`` (A4), approvals (A5)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..config.sub_agent import ToolSettings
from ..tools.base import CallContext, Tool
from .schemas import AgentInput, AgentToolResult, AgentToolSchema

RECALL = "recall"
_YES = re.compile(r"^\s*(yes|y|yeah|yep|sure|ok|okay|go ahead|please do|do it|confirm(ed)?|"
                  r"approved?|fine)\b", re.I)


def is_yes(text: str) -> bool:
    return bool(_YES.match(text or ""))


def state_value(source: str, agent_input: AgentInput) -> Any:
    """``slots.<name>`` or ``metadata.<key>`` (dotted) from the agent input."""
    kind, _, path = source.partition(".")
    if kind == "slots":
        slot = agent_input.slot(path)
        return slot.value if slot is not None else None
    current: Any = agent_input.metadata
    for part in path.split("."):
        current = current.get(part) if isinstance(current, dict) else None
    return current


def with_state_inputs(tool: Tool, settings: ToolSettings) -> Tool:
    """Hide ``inputs_from_state`` arguments from the model and fill them at call time."""
    hidden = settings.inputs_from_state
    if not hidden:
        return tool
    params = dict(tool.schema.parameters or {})
    params["properties"] = {k: v for k, v in (params.get("properties") or {}).items()
                            if k not in hidden}
    params["required"] = [r for r in params.get("required") or [] if r not in hidden]
    schema = AgentToolSchema(name=tool.name, description=tool.schema.description,
                             parameters=params, strict=tool.schema.strict)
    inner = tool.run

    async def run(arguments: dict[str, Any], ctx: CallContext) -> AgentToolResult:
        filled = {**arguments, **{arg: state_value(src, ctx.agent_input)
                                  for arg, src in hidden.items()}}
        return await inner(filled, ctx)

    return Tool(schema=schema, run=run, source=tool.source, read_only=tool.read_only,
                timeout=tool.timeout, validate_arguments=tool.validate_arguments)


def state_outputs(settings: ToolSettings, result: str) -> list[tuple[str, Any]]:
    """(slot, value) pairs from ``outputs_to_state`` (``result`` = the whole text)."""
    pairs: list[tuple[str, Any]] = []
    parsed: Any = None
    for slot, field in settings.outputs_to_state.items():
        if field == "result":
            pairs.append((slot, result))
            continue
        if parsed is None:
            try:
                parsed = json.loads(result)
            except json.JSONDecodeError:
                parsed = {}
        value: Any = parsed
        for part in field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            pairs.append((slot, value))
    return pairs


def preview(call_id: str, text: str, budget: int) -> str:
    """A4: what the model sees of a result longer than the budget."""
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
    schema = AgentToolSchema(
        name=RECALL, description="Read more of a tool result that was truncated.",
        parameters={"type": "object", "properties": {
            "call_id": {"type": "string", "description": "The id of the truncated call."},
            "offset": {"type": "integer", "default": 0},
            "length": {"type": "integer", "default": 4000}}, "required": ["call_id"]})

    async def run(arguments: dict[str, Any], ctx: CallContext) -> AgentToolResult:
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
