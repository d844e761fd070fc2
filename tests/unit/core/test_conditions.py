"""The exit_if / next-if predicate language."""

from __future__ import annotations

import pytest
from subagents.conditions import ConditionSyntaxError, parse_condition

SLOTS = {"city": "Berlin", "blank": "", "guests": 3.0, "vip": True, "empty": None,
         "tags": ["a", "b"], "count_text": "2"}


@pytest.mark.parametrize(("text", "expected"), [
    ("slots.city is not null", True),
    ("slots.empty is null", True),
    ("slots.empty is not null", False),
    ("slots.city = 'Berlin'", True),
    ('slots.city == "Paris"', False),
    ("slots.city != 'Paris'", True),
    ("slots.guests > 2", True),
    ("slots.guests >= 3", True),
    ("slots.guests < 3", False),
    ("slots.guests <= 3.0", True),
    ("slots.count_text > 1", True),  # numeric strings compare as numbers
    ("slots.empty > 1", False),  # incompatible types are false, never an error
    ("slots.city > 1", False),
    ("slots.vip", True),
    ("slots.vip is true", True),
    ("slots.vip = 'true'", True),
    ("not slots.vip", False),
    ("slots.tags contains 'a'", True),
    ("slots.city contains 'erl'", True),
    ("slots.city not contains 'x'", True),
    ("slots.city matches '^B.*n$'", True),
    ("slots.city matches '['", False),
    ("slots.city is 'Berlin' and slots.guests > 1", True),
    ("slots.city is 'Rome' or slots.guests > 1", True),
    ("(slots.city is 'Rome' or slots.guests > 10) and slots.vip", False),
    ("NOT (slots.city IS NULL) AND slots.vip IS TRUE", True),
    ("slots.unknown is null", True),
    ("{'a' 'z'} contains slots.tags", False),
    ("{'Berlin' 'Paris'} contains slots.city", True),
    ("{'Rome', 'Paris'} contains slots.city", False),
    ("slots.empty is empty", True),
    ("slots.blank is empty", True),
    ("slots.city is empty", False),
    ("slots.city matches '/^berlin$/i'", True),
    ("slots.city matches '^berlin$'", False),
    ("slots.city matches '(?i)^berlin$'", True),
    ("'{{ slots.city }}' = 'Berlin'", True),
])
def test_condition_evaluates(text, expected):
    assert parse_condition(text).evaluate_slots(SLOTS) is expected


@pytest.mark.parametrize("text", ["slots.city is", "slots.city ==", "(slots.city is null",
                                  "{slots.a} contains 'x'", "{'a' 'b' contains slots.x",
                                  "slots.city is null)", "", "slots.city $ 3", "and or"])
def test_malformed_conditions_are_rejected_at_parse_time(text):
    with pytest.raises(ConditionSyntaxError):
        parse_condition(text)


def test_slot_names_lists_referenced_slots_once_in_order():
    cond = parse_condition("slots.b is null or slots.a > 1 and slots.b != 'x' or context.c")
    assert cond.slot_names == ["b", "a"]


def test_conditions_are_never_evaluated_with_eval():
    cond = parse_condition("slots.city == '__import__(\"os\").system(\"false\")'")
    assert cond.evaluate_slots({"city": "x"}) is False


def test_referenced_slots_merges_conditions_in_order():
    from subagents.conditions import referenced_slots

    conds = [parse_condition("slots.b is null and slots.a > 1"), parse_condition("slots.a")]
    assert referenced_slots(conds) == ["b", "a"]


@pytest.mark.parametrize("payload", ["' or true or '", "x' or '1' = '1", "' or slots.pin or '",
                                     "1234' or 'a", "{{ 7 * 7 }}"])
def test_a_slot_value_never_becomes_condition_code(payload):
    cond = parse_condition("'{{ slots.pin }}' == '1234'")
    assert cond.evaluate_slots({"pin": payload}) is False
    assert cond.evaluate_slots({"pin": "1234"}) is True
    bare = parse_condition("{{ slots.pin }} == '1234'")
    assert bare.evaluate_slots({"pin": payload}) is False
    assert bare.evaluate_slots({"pin": "1234"}) is True


@pytest.mark.parametrize(("text", "expected"), [
    ("{{ slots.city | lower }} = 'berlin'", True),
    ("{{ slots.guests }} > 2", True),
    ("{{ slots.tags | length }} == 2", True),
    ("{{ slots.unknown }} is null", True),
    ("'{% if slots.vip %}gold{% else %}basic{% endif %}' = 'gold'", True),
    ("'{{ slots.city }}-{{ slots.count_text }}' = 'Berlin-2'", True),
    ("{{ context.flow_id }} = 'f'", True),
    ("{{ slots.city.__class__.__mro__ }} is not null", False),  # sandbox: false, no error
])
def test_placeholders_are_values(text, expected):
    cond = parse_condition(text)
    assert cond.evaluate({"slots": SLOTS, "context": {"flow_id": "f"}}) is expected


def test_placeholder_slots_are_referenced():
    cond = parse_condition("'{{ slots.pin }}' == '1' and {{ slots.city | lower }} = 'x'")
    assert cond.slot_names == ["pin", "city"]


@pytest.mark.parametrize(("text", "position"), [
    ("slots.city $ 3", 12),
    ("slots.city is", 14),
    ("{{ slots.city | }} = 'x'", 1),
    ("slots.a = '{{ slots.b }'", 11),
    ("{% if slots.a %}x{% endif %} = 'x'", 1),
    ("(slots.a is null", 17),
])
def test_syntax_errors_carry_code_and_position(text, position):
    with pytest.raises(ConditionSyntaxError) as info:
        parse_condition(text)
    assert info.value.code == "condition.syntax"
    assert info.value.position == position
    assert info.value.text == text
