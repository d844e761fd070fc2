"""``inputs_from_state`` / ``outputs_to_state`` (``configuration.tools.<name>``).

``inputs_from_state`` maps an argument to ``slots.<name>`` or ``metadata.<key>`` (dotted): the
argument is hidden from the model and filled from the conversation state at call time.
``outputs_to_state`` maps a slot to ``result`` (the whole result text) or a dotted field of a
JSON result: after a successful call the slot is set (a list slot is extended).
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from subagents.config.sub_agent import ToolSettings
from subagents.tools.base import (
    CallContext,
    PlannedCall,
    SlotEffect,
    Tool,
    ToolOutcome,
    Toolset,
    WrapperToolset,
)
from subagents.types import AgentInput, AgentToolResult, AgentToolSchema, JsonObject


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

    async def run(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
        filled = {**arguments, **{arg: state_value(src, ctx.agent_input)
                                  for arg, src in hidden.items()}}
        result = inner(filled, ctx)
        return await result if inspect.isawaitable(result) else result

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


class StateMappingToolset(WrapperToolset):
    """Applies ``inputs_from_state`` to the offered tools and ``outputs_to_state`` to results."""

    def __init__(self, inner: Toolset, settings: dict[str, ToolSettings]) -> None:
        super().__init__(inner)
        self.settings = settings

    def tools(self) -> list[Tool]:
        """The inner tools, state inputs hidden."""
        out = []
        for tool in self.inner.tools():
            settings = self.settings.get(tool.name)
            out.append(with_state_inputs(tool, settings) if settings is not None else tool)
        return out

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """The inner call; a successful result also sets the mapped slots."""
        outcome = await self.inner.call(call, ctx)
        settings = self.settings.get(call.name)
        source = call.tool.source if call.tool is not None else ""
        if settings is None or not settings.outputs_to_state or outcome.deferred is not None \
                or outcome.result.is_error or source == "builtin":
            return outcome
        for slot_name, value in state_outputs(settings, outcome.result.result or ""):
            slot = ctx.agent_input.slot(slot_name)
            outcome.effects.append(SlotEffect(slot_name, value, extend_list=bool(
                slot is not None and slot.type == "list")))
        return outcome
