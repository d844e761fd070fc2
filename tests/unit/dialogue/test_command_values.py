"""Slot values set by commands are coerced like the task agent's set_slot tools."""

from __future__ import annotations

import pytest
from subagents.dialogue.flow_executor import coerce_command_value


@pytest.mark.parametrize(("kind", "values", "given", "expected"), [
    ("bool", None, "yes", True),
    ("bool", None, False, False),
    ("float", None, "2", 2.0),
    ("categorical", ["inside", "outside"], "Outside", "outside"),
    ("categorical", None, 7, 7),
    ("text", None, True, True),
    ("list", None, "a", "a"),
])
def test_values_are_coerced_to_the_slot_type(kind, values, given, expected):
    assert coerce_command_value(kind, values, given) == expected


@pytest.mark.parametrize(("kind", "values", "given"), [
    ("bool", None, "perhaps"), ("float", None, "two"),
    ("categorical", ["inside", "outside"], "terrace"),
])
def test_values_that_do_not_fit_are_refused(kind, values, given):
    with pytest.raises(ValueError):  # noqa: PT011 - the message is for the log
        coerce_command_value(kind, values, given)
