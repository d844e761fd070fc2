"""Assertions of conversation tests: their shapes (for validation) and how each is judged.

Rasa's assertion types keep Rasa's keys and semantics; ours (agents, tools, events, streaming)
follow the same pattern. An assertion is judged against a window of events (one user turn, plus
the events before it for some types on the first step) and returns the matching event, ``None``
(held, but with no single event to point at) or raises :class:`AssertionFailed`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

RASA_ASSERTIONS: dict[str, frozenset[str] | None] = {
    "flow_started": frozenset({"flow_ids", "operator"}),
    "flow_completed": frozenset({"flow_id", "flow_step_id"}),
    "flow_cancelled": frozenset({"flow_id", "flow_step_id"}),
    "pattern_clarification_contains": frozenset({"flow_ids", "operator"}),
    "action_executed": None,
    "slot_was_set": None,
    "slot_was_not_set": None,
    "bot_uttered": frozenset({"utter_name", "text_matches", "buttons", "metadata"}),
    "bot_did_not_utter": frozenset({"utter_name", "text_matches", "buttons", "metadata"}),
    "generative_response_is_relevant": frozenset({"threshold", "utter_name", "utter_source"}),
    "generative_response_is_grounded": frozenset({"threshold", "utter_name", "ground_truth",
                                                  "utter_source"}),
}
"""Rasa's assertion types and the keys of their mapping form (None: not a mapping)."""

AGENT_ASSERTIONS = frozenset({"agent_started", "agent_completed", "agent_interrupted",
                              "agent_resumed", "agent_cancelled"})
OUR_ASSERTIONS: dict[str, frozenset[str] | None] = {
    **dict.fromkeys(AGENT_ASSERTIONS, frozenset({"agent_id", "flow_id", "reason", "metadata"})),
    "agent_not_started": frozenset({"agent_id", "flow_id"}),
    "tool_executed": frozenset({"tool_name", "arguments", "is_error", "agent_id", "result"}),
    "tool_not_called": frozenset({"tool_name", "agent_id"}),
    "client_tool_requested": frozenset({"tool_name", "arguments"}),
    "event_happened": None,
    "event_not_happened": None,
    "streamed": frozenset({"min_chunks", "max_first_text_ms", "text_matches"}),
    "hook_called": frozenset({"agent_id", "hook", "times"}),
}
ASSERTIONS: dict[str, frozenset[str] | None] = {**RASA_ASSERTIONS, **OUR_ASSERTIONS}

MANTLE_PREFIXES = ("skill_", "memory_", "ordered_block_")
MANTLE_NAMES = frozenset({"tools_within_one_turn"})
"""Assertion types of Rasa's other (non-CALM) engine: known, but not supported here."""

NEGATIVE = frozenset({"bot_did_not_utter", "slot_was_not_set", "agent_not_started",
                      "tool_not_called", "event_not_happened", "hook_called", "streamed"})
"""Assertions that match no event; with ``assertion_order_enabled`` they do not move on."""

AGENT_HOOKS = ("process_input", "process_output", "process_tool_output",
               "build_custom_tool_call_metadata", "get_custom_tool_definitions",
               "get_agent_specific_built_in_tools", "render_prompt_template",
               "build_messages_for_llm_request", "create_bot_uttered")
"""Agent methods a project may override; ``hook_called`` counts their calls in a turn."""

GENERATIVE = frozenset({"generative_response_is_relevant", "generative_response_is_grounded"})

PRIOR_ON_FIRST_STEP = frozenset({"action_executed", "slot_was_set", "slot_was_not_set",
                                 "bot_uttered", "bot_did_not_utter"})
"""On the first step of a case these also search the events before the first message."""

MANTLE_HINT = "this assertion belongs to Rasa's non-CALM engine"


class AssertionFailed(Exception):  # noqa: N818 - reads as a verdict, not an error
    """An assertion did not hold; the message says why."""


@dataclass
class Window:
    """The events an assertion looks at."""

    events: list[dict[str, Any]]
    """Events of the turn."""
    prior: list[dict[str, Any]]
    """Events before the turn (only searched by some types on a case's first step)."""
    first_step: bool = False
    user_text: str = ""


def shape_problem(name: str, spec: Any) -> str | None:
    """Why ``spec`` is not a valid value for assertion ``name`` (None if it is)."""
    keys = ASSERTIONS[name]
    if name in ("flow_started", "flow_completed", "flow_cancelled",
                "pattern_clarification_contains") and (
            isinstance(spec, str) or (isinstance(spec, list) and
                                      name == "pattern_clarification_contains")):
        return None
    if name == "action_executed":
        return None if isinstance(spec, str) else "takes an action name"
    if name in ("slot_was_set", "slot_was_not_set"):
        return _slot_list_problem(spec)
    if name in ("event_happened", "event_not_happened"):
        if not isinstance(spec, dict) or not isinstance(spec.get("event"), str):
            return "takes a mapping with 'event: <event type>' and the fields to match"
        return None
    if not isinstance(spec, dict):
        return f"takes a mapping with {_keys(keys)}"
    unknown = sorted(set(spec) - (keys or frozenset()))
    if unknown:
        return f"unknown key(s) {', '.join(unknown)}; use {_keys(keys)}"
    return _required_problem(name, spec)


def _keys(keys: frozenset[str] | None) -> str:
    return ", ".join(sorted(keys or ()))


def _slot_list_problem(spec: Any) -> str | None:
    if not isinstance(spec, list):
        return "takes a list of {name, value?}"
    for item in spec:
        if not isinstance(item, dict) or "name" not in item or set(item) - {"name", "value"}:
            return f"takes a list of {{name, value?}}, not {item!r}"
    return None


def _required_problem(name: str, spec: dict[str, Any]) -> str | None:
    required = {"flow_completed": "flow_id", "flow_cancelled": "flow_id",
                "generative_response_is_relevant": "threshold",
                "generative_response_is_grounded": "threshold",
                "tool_executed": "tool_name", "tool_not_called": "tool_name",
                "client_tool_requested": "tool_name", "agent_not_started": "agent_id",
                "hook_called": "hook",
                "flow_started": "flow_ids", "pattern_clarification_contains": "flow_ids"}
    if name in AGENT_ASSERTIONS:
        required[name] = "agent_id"
    key = required.get(name)
    if key and key not in spec:
        return f"needs {key!r}"
    if name == "hook_called" and spec["hook"] not in AGENT_HOOKS:
        return f"hook is one of {', '.join(AGENT_HOOKS)}"
    if name in ("bot_uttered", "bot_did_not_utter") and not spec:
        return "needs at least one of utter_name, text_matches, buttons, metadata"
    operator = spec.get("operator")
    if name in ("flow_started", "pattern_clarification_contains") and operator is None:
        return "needs 'operator' (any or all) beside flow_ids"
    if operator is not None and str(operator).lower() not in ("any", "all"):
        return "operator is 'any' or 'all'"
    if name == "flow_started" and operator == "all" and len(spec.get("flow_ids") or []) != 1:
        return "operator 'all' needs exactly one flow id"
    return None


# ---------------------------------------------------------------------------------- judging
def bot_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bot messages with text or buttons."""
    return [e for e in events if e.get("event") == "bot" and (
        e.get("text") or (e.get("data") or {}).get("buttons"))]


def subset(actual: Any, wanted: Any) -> bool:
    """``wanted`` is contained in ``actual``: mappings key by key (recursively), else ``==``."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            k in actual and subset(actual[k], v) for k, v in wanted.items())
    return bool(actual == wanted)


def check(name: str, spec: Any, window: Window) -> dict[str, Any] | None:
    """Judge one (non-generative) assertion; return the matching event or None."""
    events = window.events
    if window.first_step and name in PRIOR_ON_FIRST_STEP:
        events = window.prior + window.events
    handler = _HANDLERS.get(name)
    if handler is None:
        raise AssertionFailed(f"assertion type {name!r} cannot be judged here")
    match: dict[str, Any] | None = handler(spec, events)
    return match


def _first(events: list[dict[str, Any]], test: Any, what: str) -> dict[str, Any]:
    for event in events:
        if test(event):
            return event
    raise AssertionFailed(what)


def _flow_started(spec: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    ids = [spec] if isinstance(spec, str) else list(spec.get("flow_ids") or [])
    return _first(events, lambda e: e.get("event") == "flow_started" and e.get("flow_id") in ids,
                  f"no flow among {ids} started")


def _flow_ended(kind: str) -> Any:
    def judge(spec: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
        spec = {"flow_id": spec} if isinstance(spec, str) else spec
        step = spec.get("flow_step_id")
        return _first(events, lambda e: e.get("event") == kind and
                      e.get("flow_id") == spec["flow_id"] and
                      (step is None or e.get("step_id") == step),
                      f"flow {spec['flow_id']!r} was not {kind.split('_')[1]}" +
                      (f" at step {step!r}" if step else ""))
    return judge


def _clarification(spec: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    starts = [e for e in events if e.get("event") == "flow_started" and
              e.get("flow_id") == "pattern_clarification"]
    if not starts:
        raise AssertionFailed("pattern_clarification did not start")
    for event in starts:
        info = {**(event.get("metadata") or {}), **event}
        if isinstance(spec, (str, list)):
            names = {spec} if isinstance(spec, str) else set(spec)
            if set(info.get("names") or []) == names:
                return event
            continue
        ids, found = set(spec.get("flow_ids") or []), set(info.get("clarification_ids") or [])
        operator = str(spec.get("operator", "any")).lower()
        if (operator == "all" and ids == found) or (operator == "any" and ids & found):
            return event
    raise AssertionFailed(f"the clarification offered something else than {spec!r}")


def _action(spec: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    return _first(events, lambda e: e.get("event") == "action" and e.get("name") == spec,
                  f"action {spec!r} was not executed")


def _slot_was_set(spec: list[dict[str, Any]], events: list[dict[str, Any]]
                  ) -> dict[str, Any] | None:
    last = None
    for item in spec:
        sets = [e for e in events if e.get("event") == "slot" and e.get("name") == item["name"]]
        if not sets:
            raise AssertionFailed(f"slot {item['name']!r} was not set")
        if "value" in item:
            sets = [e for e in sets if e.get("value") == item["value"]]
            if not sets:
                raise AssertionFailed(f"slot {item['name']!r} was not set to "
                                      f"{item['value']!r}")
        last = sets[0]
    return last


def _slot_was_not_set(spec: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
    for item in spec:
        sets = [e for e in events if e.get("event") == "slot" and e.get("name") == item["name"]]
        value = sets[-1].get("value") if sets else None
        if "value" not in item and value is not None:
            raise AssertionFailed(f"slot {item['name']!r} was set to {value!r}")
        if "value" in item and sets and value == item["value"]:
            raise AssertionFailed(f"slot {item['name']!r} was set to {value!r}")


def _buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return list((message.get("data") or {}).get("buttons") or [])


def _bot_property_holds(key: str, wanted: Any, message: dict[str, Any]) -> bool:
    meta = message.get("metadata") or {}
    if key == "utter_name":
        return bool(meta.get("utter_action") == wanted)
    if key == "text_matches":
        return re.search(str(wanted), str(message.get("text") or "")) is not None
    if key == "metadata":
        return subset(meta, wanted)
    actual = _buttons(message)
    return bool(actual) and all(
        a.get("title") == w.get("title") and a.get("payload") == w.get("payload")
        for a, w in zip(actual, wanted or [], strict=False))


def _bot_uttered(spec: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    messages = bot_messages(events)
    found: dict[str, Any] | None = None
    for key, wanted in spec.items():
        match = next((m for m in messages if _bot_property_holds(key, wanted, m)), None)
        if match is None:
            raise AssertionFailed(f"no bot message has {key} {wanted!r}; bot messages: "
                                  f"{[m.get('text') for m in messages]}")
        found = found or match
    assert found is not None
    return found


def _bot_did_not_utter(spec: dict[str, Any], events: list[dict[str, Any]]) -> None:
    for message in bot_messages(events):
        for key, wanted in spec.items():
            if key == "buttons":
                pairs = {(b.get("title"), b.get("payload")) for b in _buttons(message)}
                hit = any((w.get("title"), w.get("payload")) in pairs for w in wanted or [])
            else:
                hit = _bot_property_holds(key, wanted, message)
            if hit:
                raise AssertionFailed(f"the bot uttered {message.get('text')!r}, which has "
                                      f"{key} {wanted!r}")


def _agent_event(name: str) -> Any:
    def judge(spec: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
        def test(e: dict[str, Any]) -> bool:
            return e.get("event") == name and e.get("agent_id") == spec["agent_id"] and all(
                spec.get(k) is None or e.get(k) == spec[k] for k in ("flow_id", "reason")) \
                and subset(e.get("metadata") or {}, spec.get("metadata") or {})
        return _first(events, test, f"no {name} event for agent {spec['agent_id']!r}" +
                      (f" in flow {spec['flow_id']!r}" if spec.get("flow_id") else ""))
    return judge


def _agent_not_started(spec: dict[str, Any], events: list[dict[str, Any]]) -> None:
    for e in events:
        if e.get("event") == "agent_started" and e.get("agent_id") == spec["agent_id"] and \
                (spec.get("flow_id") is None or e.get("flow_id") == spec["flow_id"]):
            raise AssertionFailed(f"agent {spec['agent_id']!r} started")


def _tool_test(spec: dict[str, Any]) -> Any:
    def test(e: dict[str, Any]) -> bool:
        if e.get("event") != "mcp_tool_executed" or e.get("tool_name") != spec["tool_name"]:
            return False
        if spec.get("arguments") is not None and not subset(e.get("arguments"),
                                                            spec["arguments"]):
            return False
        agent = str((e.get("metadata") or {}).get("agent_id") or "")
        if spec.get("agent_id") is not None and spec["agent_id"] not in (
                agent, agent.split("::", 1)[0]):
            return False
        return all(spec.get(k) is None or e.get(k) == spec[k] for k in ("is_error", "result"))
    return test


def _tool_executed(spec: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [f"{e.get('tool_name')}({e.get('arguments')})" for e in events
             if e.get("event") == "mcp_tool_executed"]
    return _first(events, _tool_test(spec), f"tool {spec['tool_name']!r} was not executed as "
                  f"asked; tool calls: {calls}")


def _tool_not_called(spec: dict[str, Any], events: list[dict[str, Any]]) -> None:
    for e in events:
        if _tool_test({"tool_name": spec["tool_name"], "agent_id": spec.get("agent_id")})(e):
            raise AssertionFailed(f"tool {spec['tool_name']!r} was called with "
                                  f"{e.get('arguments')!r}")


def _client_tool(spec: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    return _first(events, lambda e: e.get("event") == "agent_client_tool_requested" and
                  e.get("tool_name") == spec["tool_name"] and
                  (spec.get("arguments") is None or
                   subset(e.get("arguments"), spec["arguments"])),
                  f"client tool {spec['tool_name']!r} was not requested")


def _event_test(spec: dict[str, Any]) -> Any:
    fields = {k: v for k, v in spec.items() if k != "event"}
    return lambda e: e.get("event") == spec["event"] and subset(e, fields)


def _event_happened(spec: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    return _first(events, _event_test(spec), f"no {spec['event']} event matches {spec!r}")


def _event_not_happened(spec: dict[str, Any], events: list[dict[str, Any]]) -> None:
    match = next((e for e in events if _event_test(spec)(e)), None)
    if match is not None:
        raise AssertionFailed(f"a matching {spec['event']} event happened")


_HANDLERS: dict[str, Any] = {
    "flow_started": _flow_started,
    "flow_completed": _flow_ended("flow_completed"),
    "flow_cancelled": _flow_ended("flow_cancelled"),
    "pattern_clarification_contains": _clarification,
    "action_executed": _action,
    "slot_was_set": _slot_was_set,
    "slot_was_not_set": _slot_was_not_set,
    "bot_uttered": _bot_uttered,
    "bot_did_not_utter": _bot_did_not_utter,
    **{name: _agent_event(name) for name in AGENT_ASSERTIONS},
    "agent_not_started": _agent_not_started,
    "tool_executed": _tool_executed,
    "tool_not_called": _tool_not_called,
    "client_tool_requested": _client_tool,
    "event_happened": _event_happened,
    "event_not_happened": _event_not_happened,
}
