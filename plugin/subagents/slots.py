"""Slot value coercion, shared by the task agent's ``set_slot_*`` tools and the dialogue layer.

A value is coerced to the slot's type; a value that cannot be is refused with a message that
says what is allowed, so the model (or the user) can correct it.
"""

from __future__ import annotations

import json
from typing import Any

from subagents.types import AgentInputSlot

__all__ = ["coerce_slot_value"]


def _to_bool(slot: AgentInputSlot, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise ValueError(f"slot {slot.name!r} is a bool: use true or false")


def _to_float(slot: AgentInputSlot, value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"slot {slot.name!r} is a number: {value!r} is not one") from None


def _to_category(slot: AgentInputSlot, value: Any) -> Any:
    for allowed in slot.allowed_values or []:
        if str(allowed).lower() == str(value).strip().lower():
            return allowed
    allowed_text = ", ".join(str(a) for a in slot.allowed_values or [])
    raise ValueError(f"{value!r} is not allowed for slot {slot.name!r}; "
                     f"allowed values: {allowed_text}")


def _to_list(slot: AgentInputSlot, value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return parsed
    return [value]


def _to_text(slot: AgentInputSlot, value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


_COERCERS = {"bool": _to_bool, "float": _to_float, "list": _to_list, "text": _to_text,
             "categorical": _to_category, "strict_categorical": _to_category}


def coerce_slot_value(slot: AgentInputSlot, value: Any) -> Any:
    """Coerce ``value`` to the slot's type; raise ValueError saying what is allowed."""
    coerce = _COERCERS.get(slot.type)
    if value is None or coerce is None:
        return value
    if coerce is _to_category and not slot.allowed_values:
        return _to_text(slot, value)
    return coerce(slot, value)
