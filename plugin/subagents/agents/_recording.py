"""Recording what a tool call did: its event, its result for the model, the slots it set."""

from __future__ import annotations

from typing import Any

import structlog

from subagents import events as ev
from subagents.agents._plan import AgentRun
from subagents.tools.base import SlotEffect, ToolOutcome
from subagents.types import AgentInputSlot, TrackerEvent

log = structlog.get_logger("subagents.agent")


def record_tool(run: AgentRun, outcome: ToolOutcome, *, agent_id: str, agent_name: str
                ) -> tuple[str, TrackerEvent | None]:
    """Record a call that ran, then its slot effects; return the model's answer and the tool
    event (None for built-ins, which get no event)."""
    call, result = outcome.call, outcome.result
    run.count_tool(call.name)
    source = call.tool.source if call.tool else ""
    duration_ms = round(outcome.duration_ms, 1)
    event = None
    if source != "builtin":
        event = ev.mcp_tool_executed(
            call.name, call.arguments, result.result, is_error=result.is_error,
            error_message=result.error_message, agent_id=agent_id, duration_ms=duration_ms)
        run.events.append(event)
        if not result.is_error:
            run.results[call.id] = result
            run.structured.append({"name": call.name, "result": result.result or ""})
    for effect in outcome.effects:
        apply_effect(run, effect)
    # log.bind().info: the lazy proxy's own path, without its failed attribute lookup
    log.bind().info("agent.tool.finished", agent=agent_name, tool=call.name, source=source,
                    is_error=result.is_error, duration_ms=duration_ms)
    if result.is_error:
        return f"Error: {result.error_message}", event
    if outcome.model_text is not None:
        return outcome.model_text, event
    return (result.result if result.result is not None else ""), event


def apply_effect(run: AgentRun, effect: SlotEffect) -> None:
    """Set a slot a call set and record the SlotSet where the call happened."""
    value = effect.value
    slot = run.input.slot(effect.name)
    if effect.extend_list and slot is not None:
        value = list(slot.value or []) + (value if isinstance(value, list) else [value])
    if effect.only_if_changed:
        before = run.recorded_slots.get(effect.name, run.initial_slot_values.get(effect.name))
        first = effect.name not in run.recorded_slots
        apply_slot(run, effect.name, value)
        if value == before and first:
            return
        run.recorded_slots[effect.name] = value
    else:
        apply_slot(run, effect.name, value)
        run.slot_set_by_hook.add(effect.name)
    run.events.append(ev.slot_set(effect.name, value))


def apply_slot(run: AgentRun, name: str, value: Any) -> None:
    """Update the run's view of a slot (a slot not in the input is added)."""
    slot = run.input.slot(name)
    if slot is None:
        run.input.slots.append(AgentInputSlot(name=name, value=value, type="any"))
    else:
        slot.value = value
    run.slot_values[name] = value
