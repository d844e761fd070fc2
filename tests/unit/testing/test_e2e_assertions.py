"""Rasa's assertion semantics on hand-built event lists (pure functions, no assistant)."""

from __future__ import annotations

import pytest
from subagents import events as ev
from subagents.testing.assertions import AssertionFailed, Window, check, shape_problem
from subagents.testing.diff import near_miss
from subagents.testing.e2e import _window

CLARIFY = ev.flow_event("flow_started", "pattern_clarification", metadata={
    "names": ["transfer money", "check balance"],
    "clarification_ids": ["transfer_money", "check_balance"]})


@pytest.mark.parametrize(("spec", "holds"), [
    (["transfer money", "check balance"], True),
    (["transfer money"], False),  # the list form needs the same set of names
    ({"flow_ids": ["transfer_money"], "operator": "any"}, True),
    ({"flow_ids": ["transfer_money", "nope"], "operator": "any"}, True),
    ({"flow_ids": ["transfer_money"], "operator": "all"}, False),
    ({"flow_ids": ["check_balance", "transfer_money"], "operator": "all"}, True),
    ({"flow_ids": ["nope"], "operator": "any"}, False),
])
def test_pattern_clarification_contains(spec, holds):
    window = Window([CLARIFY], [])
    if holds:
        assert check("pattern_clarification_contains", spec, window) is CLARIFY
    else:
        with pytest.raises(AssertionFailed):
            check("pattern_clarification_contains", spec, window)


def test_slot_was_not_set_looks_at_the_last_value():
    reset = [ev.slot_set("city", "Rome"), ev.slot_set("city", None)]
    check("slot_was_not_set", [{"name": "city"}], Window(reset, []))  # last is None: holds
    check("slot_was_not_set", [{"name": "city", "value": "Rome"}], Window(reset, []))
    with pytest.raises(AssertionFailed):
        check("slot_was_not_set", [{"name": "city"}], Window(reset[:1], []))
    assert check("slot_was_set", [{"name": "city", "value": 50}],
                 Window([ev.slot_set("city", 50.0)], [])) is not None  # Python ==
    with pytest.raises(AssertionFailed):
        check("slot_was_set", [{"name": "flag", "value": "true"}],
              Window([ev.slot_set("flag", True)], []))


def test_buttons_compare_pairwise_in_order():
    message = ev.bot_uttered("Pick", data={"buttons": [{"title": "Yes", "payload": "/y"},
                                                       {"title": "No", "payload": "/n"}]})
    window = Window([message], [])
    assert check("bot_uttered", {"buttons": [{"title": "Yes", "payload": "/y"}]}, window)
    with pytest.raises(AssertionFailed):
        check("bot_uttered", {"buttons": [{"title": "No", "payload": "/n"}]}, window)
    with pytest.raises(AssertionFailed):
        check("bot_did_not_utter", {"buttons": [{"title": "No", "payload": "/n"}]}, window)


def test_the_first_step_also_searches_the_events_before_it():
    prior = [ev.slot_set("tier", "gold"), ev.bot_uttered("Welcome!")]
    first = Window([], prior, first_step=True)
    later = Window([], prior, first_step=False)
    check("slot_was_set", [{"name": "tier"}], first)
    check("bot_uttered", {"text_matches": "Welcome"}, first)
    with pytest.raises(AssertionFailed):
        check("slot_was_set", [{"name": "tier"}], later)
    with pytest.raises(AssertionFailed):  # flow assertions never look before the turn
        check("flow_started", "x", Window([], [ev.flow_event("flow_started", "x")], True))


def test_the_window_runs_to_the_next_different_user_text():
    events = [ev.user_uttered("hi"), ev.bot_uttered("one"), ev.user_uttered("hi"),
              ev.bot_uttered("two"), ev.user_uttered("bye"), ev.bot_uttered("three")]
    window = _window(events, "hi", {}, first_step=False)
    assert window is not None
    assert [e.get("text") for e in window.events if e["event"] == "bot"] == ["one", "two"]
    assert _window(events, "never said", {}, first_step=False) is None


@pytest.mark.parametrize(("name", "spec", "problem"), [
    ("flow_started", {"flow_ids": ["a", "b"], "operator": "all"}, "exactly one flow id"),
    ("flow_started", {"flow_ids": ["a"], "operator": "some"}, "operator is"),
    ("flow_started", {"flow_ids": ["a"]}, "needs 'operator'"),
    ("generative_response_is_relevant", {"utter_name": "x"}, "needs 'threshold'"),
    ("bot_uttered", {}, "needs at least one"),
    ("tool_executed", {"tool": "x"}, "unknown key(s) tool"),
    ("event_happened", {"agent_id": "x"}, "event: <event type>"),
])
def test_assertion_shapes(name, spec, problem):
    assert problem in (shape_problem(name, spec) or "")


def test_near_miss_marks_the_changed_characters():
    text = near_miss("Sunny in Berlin.", ["Sunny in Berlin!", "Something else entirely"])
    assert "- Sunny in Berlin." in text
    assert "+ Sunny in Berlin!" in text
    assert "?                ^" in text
    assert near_miss("Sunny.", ["Completely different words here"]) == ""
