"""The command generator's JSON reply: the schema built from the project, and reading it."""

from __future__ import annotations

import jsonschema
import pytest
from subagents.config.domain import SlotDefinition
from subagents.dialogue.command_schema import Offer, command_schema, commands_from_json
from subagents.dialogue.commands import (
    CannotHandle,
    Clarify,
    ContinueAgent,
    RestartAgent,
    SetSlot,
    StartFlow,
)

OFFER = Offer(flows=("book_table", "check_weather"),
              slots=(("city", SlotDefinition(type="text")),
                     ("guests", SlotDefinition(type="float")),
                     ("size", SlotDefinition(type="categorical", values=["s", "m"]))),
              agent_waiting=True, completed_agents=("booker",), clarify=True)


def valid(reply: dict) -> bool:
    try:
        jsonschema.validate(reply, command_schema(OFFER))
    except jsonschema.ValidationError:
        return False
    return True


def test_the_schema_admits_the_offered_commands_with_typed_values():
    assert valid({"commands": [{"command": "start flow", "flow": "book_table"},
                               {"command": "set slot", "slot": "guests", "value": 4},
                               {"command": "set slot", "slot": "size", "value": "m"},
                               {"command": "continue agent"},
                               {"command": "restart agent", "agent": "booker"}]})
    assert valid({"commands": [{"command": "disambiguate flows",
                                "flows": ["book_table", "check_weather"]}]})


@pytest.mark.parametrize("reply", [
    {"commands": [{"command": "start flow", "flow": "order_pizza"}]},  # no such flow
    {"commands": [{"command": "set slot", "slot": "guests", "value": "four"}]},  # not a number
    {"commands": [{"command": "set slot", "slot": "size", "value": "xl"}]},  # not a value
    {"commands": [{"command": "set slot", "slot": "colour", "value": "red"}]},  # no such slot
    {"commands": [{"command": "restart agent", "agent": "nobody"}]},
    {"commands": []},
    {"commands": [{"command": "start flow"}]},
    {"answer": "hello"},
], ids=["flow", "number", "category", "slot", "agent", "empty", "no-flow", "not-commands"])
def test_the_schema_refuses_what_the_project_does_not_have(reply):
    assert not valid(reply)


def test_commands_not_offered_are_not_in_the_schema():
    schema = command_schema(Offer(flows=("a",), slots=()))
    tags = [c["properties"]["command"]["const"]
            for c in schema["properties"]["commands"]["items"]["anyOf"]]
    assert tags == ["start flow", "cancel flow", "offtopic reply", "cannot handle"]


def test_a_json_reply_becomes_commands():
    text = ('{"commands": [{"command": "start flow", "flow": "book_table"}, '
            '{"command": "set slot", "slot": "guests", "value": 4}, '
            '{"command": "continue agent"}, {"command": "restart agent", "agent": "booker"}, '
            '{"command": "disambiguate flows", "flows": ["a", "b"]}, '
            '{"command": "cannot handle"}, {"command": "dance"}]}')
    assert commands_from_json(text) == [
        StartFlow("book_table"), SetSlot("guests", 4), ContinueAgent(), RestartAgent("booker"),
        Clarify(("a", "b")), CannotHandle()]


@pytest.mark.parametrize("text", ["start flow book_table", '{"commands": "start"}', None, "[1]"])
def test_a_reply_that_is_not_the_json_form_is_left_to_the_line_format(text):
    assert commands_from_json(text) is None


def test_a_reply_cut_short_keeps_the_commands_written_in_full():
    whole = '{"commands": [{"command": "start flow", "flow": "book_table"}, '
    assert commands_from_json(whole + '{"command": "set slot", "slot": "guests", "val') == [
        StartFlow("book_table")]  # never SetSlot("guests", None): that would clear the slot
    assert commands_from_json(whole + '{"command": "start flow", "flow": "chec') == [
        StartFlow("book_table")]
    assert commands_from_json('{"commands": [{"command": "start fl') == []
    assert commands_from_json('{\n  "comm') is None
