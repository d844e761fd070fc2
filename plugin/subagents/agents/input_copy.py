"""A fresh copy of an agent's input for each attempt, without ``copy.deepcopy``'s cost.

Agent inputs are JSON-shaped (events, metadata and slot values are dicts, lists and scalars).
The events of a conversation - thousands of dicts in a long one - are copied through
``marshal`` (a C round trip, about twice as fast as rebuilding them in Python); what marshal
cannot take (another type anywhere inside) is copied by type, which is several times faster
than ``deepcopy``, itself the fallback for objects that are not JSON-shaped.
"""

from __future__ import annotations

import copy
import marshal
from typing import Any

from subagents.types import AgentInput, AgentInputSlot, EarlierEvents, typed_events

_IMMUTABLE = (str, int, float, bool, type(None))
_SCALARS = frozenset(_IMMUTABLE)


def json_copy(value: Any) -> Any:
    """A deep copy of ``value``: dicts and lists rebuilt, scalars shared, other objects
    deep-copied."""
    kind = type(value)
    # the common case first, without a call per scalar: the events of a long conversation
    # are thousands of plain dicts of mostly scalars, copied on every agent attempt
    if kind is dict:
        return {key: item if type(item) in _SCALARS else json_copy(item)
                for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _SCALARS else json_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    if isinstance(value, _IMMUTABLE):
        return value
    return copy.deepcopy(value)


def fast_copy(value: Any) -> Any:
    """:func:`json_copy`'s result, through marshal when every object inside is of a type it
    takes (dicts, lists, tuples, strings, numbers, booleans, None; no subclasses)."""
    try:
        return marshal.loads(marshal.dumps(value))
    except (ValueError, TypeError):  # a type marshal does not take, or nested too deep
        return json_copy(value)


def _copy_slot(slot: AgentInputSlot) -> AgentInputSlot:
    return slot.model_copy(update={
        "value": json_copy(slot.value), "allowed_values": json_copy(slot.allowed_values),
        "mappings": json_copy(slot.mappings)})


def copy_input(agent_input: AgentInput) -> AgentInput:
    """A copy of ``agent_input`` that shares nothing mutable with it; its events are typed
    events (:func:`subagents.types.typed_events`), whatever the original held."""
    if type(agent_input) is not AgentInput or any(
            type(slot) is not AgentInputSlot for slot in agent_input.slots):
        copied = agent_input.model_copy(deep=True)  # a subclass may hold more state
        copied.events = typed_events(copied.events)
        return copied
    return agent_input.model_copy(update={
        "slots": [_copy_slot(slot) for slot in agent_input.slots],
        "events": typed_events(fast_copy(agent_input.events)),
        "metadata": json_copy(agent_input.metadata),
        "earlier": _copy_earlier(agent_input.earlier)})


def _copy_earlier(earlier: EarlierEvents) -> EarlierEvents:
    """A deep copy of the summary of earlier events (a third of ``model_copy(deep=True)``'s
    cost: its fields are JSON-shaped)."""
    if type(earlier) is not EarlierEvents:
        return earlier.model_copy(deep=True)  # a subclass may hold more state
    return earlier.model_copy(update={
        "usage": fast_copy(earlier.usage), "fillers": list(earlier.fillers),
        "open_runs": list(earlier.open_runs)})
