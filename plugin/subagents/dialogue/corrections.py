"""Corrections: the user changes a slot that a flow on the stack already collected.

When the project has ``pattern_correction``, a ``SetSlot`` command for such a slot does not set
it directly. All such slots of a turn form one correction: ``pattern_correction`` runs with
this context

* ``corrected_slots``: ``{slot: new value}``;
* ``new_slot_values``: the new values, in order;
* ``is_reset_only``: every corrected slot is collected only with ``ask_before_filling: true``
  (the flow asks again instead of taking the value);
* ``reset_flow_id`` / ``reset_step_id``: the active user flow and its earliest collect step of
  a corrected slot, when it has one.

Its ``action_correct_flow_slot`` moves that flow back to that step and sets the new values, so
the flow goes on from there and every later step runs again (a confirmation is asked again).

A slot counts as corrected when it has a value, the new value differs from it, it is not the
slot being asked for right now (that is a plain answer), and a collect step of a flow on the
stack fills it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subagents.config.flows import Flow
from subagents.config.project import Project
from subagents.dialogue.turn import Turn

CORRECTION = "pattern_correction"


@dataclass(frozen=True)
class CorrectionPlan:
    """The slots one correction changes and the context of its pattern frame."""

    slots: dict[str, Any]
    context: dict[str, Any]


def _collects(flow: Flow, slot: str) -> list[bool]:
    """``ask_before_filling`` of every collect step of ``flow`` that fills ``slot``."""
    return [s.model.ask_before_filling for s in flow.steps
            if s.kind == "collect" and s.model.collect == slot]


def plan_correction(project: Project, turn: Turn, values: dict[str, Any]) -> CorrectionPlan | None:
    """Which of the slot values a turn's commands set are corrections.

    Args:
        project: The loaded project.
        turn: The current turn.
        values: Slot name -> the value a command sets (already coerced to the slot's type).

    Returns:
        The correction, or None when there is none (or the project has no correction pattern).
    """
    if CORRECTION not in project.flows:
        return None
    top = turn.stack.top_flow()
    asked = top.awaiting if top is not None else None
    flows = [project.flows[f.flow_id] for f in turn.stack.user_flow_frames()
             if f.flow_id in project.flows]
    corrected: dict[str, Any] = {}
    modes: list[bool] = []
    for name, value in values.items():
        old = turn.slots.get(name)
        found = [mode for flow in flows for mode in _collects(flow, name)]
        if old is None or name == asked or str(old) == str(value) or not found:
            continue
        corrected[name] = value
        modes += found
    if not corrected:
        return None
    context: dict[str, Any] = {"corrected_slots": corrected,
                               "new_slot_values": list(corrected.values()),
                               "is_reset_only": all(modes),
                               "reset_flow_id": None, "reset_step_id": None}
    host = turn.stack.top_user_flow()
    active = project.flows.get(host.flow_id) if host is not None else None
    if active is not None:
        step = next((s for s in active.steps
                     if s.kind == "collect" and s.model.collect in corrected), None)
        if step is not None:
            context.update(reset_flow_id=active.id, reset_step_id=step.id)
    return CorrectionPlan(corrected, context)
