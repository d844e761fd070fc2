"""Each agent attempt gets a copy of its input that shares nothing mutable with the original."""

from __future__ import annotations

import enum
import subprocess
import sys
import textwrap

from subagents import events as ev
from subagents.agents.input_copy import copy_input, fast_copy, json_copy
from subagents.types import AgentInput, AgentInputSlot, EarlierEvents


class Colour(enum.StrEnum):
    RED = "red"


def _input() -> AgentInput:
    return AgentInput(
        id="helper", user_message="hi",
        slots=[AgentInputSlot(name="cart", value={"items": ["tea"]}, allowed_values=["a"],
                              mappings=[{"type": "from_llm"}])],
        events=[ev.user_uttered("hi", metadata={"tags": ["x"]})],
        metadata={"sender_id": "u", "nested": {"list": [1, 2]}}, recipient_id="u")


def test_the_copy_is_equal_and_shares_nothing_mutable():
    original = _input()
    copied = copy_input(original)
    assert copied == original
    copied.events[0]["metadata"]["tags"].append("y")
    copied.events.append(ev.bot_uttered("extra"))
    copied.slots[0].value["items"].append("cake")
    copied.slots[0].mappings[0]["type"] = "changed"
    copied.slots[0].allowed_values.append("b")
    copied.metadata["nested"]["list"].append(3)
    assert original.events[0]["metadata"]["tags"] == ["x"]
    assert len(original.events) == 1
    assert original.slots[0].value == {"items": ["tea"]}
    assert original.slots[0].mappings == [{"type": "from_llm"}]
    assert original.slots[0].allowed_values == ["a"]
    assert original.metadata["nested"]["list"] == [1, 2]


def test_the_summary_of_earlier_events_is_copied_too():
    original = _input()
    original.earlier = EarlierEvents(count=3, usage={"m": {"calls": 1}}, tool_calls=1,
                                     fillers=["On it."], open_runs=["helper"])
    copied = copy_input(original)
    assert copied.earlier == original.earlier
    copied.earlier.usage["m"]["calls"] = 2
    copied.earlier.usage["other"] = {}
    copied.earlier.fillers.append("Still on it.")
    copied.earlier.open_runs.clear()
    assert original.earlier == EarlierEvents(count=3, usage={"m": {"calls": 1}}, tool_calls=1,
                                             fillers=["On it."], open_runs=["helper"])


def test_objects_that_are_not_json_shaped_are_deep_copied():
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    box, inner = Box(), [2]
    copied = json_copy({"box": box, "tuple": (1, inner)})
    assert copied["box"] is not box
    assert copied["box"].items == [1]
    assert copied["box"].items is not box.items
    assert copied["tuple"] == (1, [2])
    assert copied["tuple"][1] is not inner


def test_a_subclassed_input_is_deep_copied_whole():
    class Extended(AgentInput):
        extra: dict = {}

    original = Extended(id="a", extra={"k": [1]})
    copied = copy_input(original)
    assert type(copied) is Extended
    copied.extra["k"].append(2)
    assert original.extra == {"k": [1]}


def test_subclassed_containers_and_scalars_inside_plain_ones_are_copied_by_kind():
    """Plain dicts and lists take a shortcut for their scalars; what is not plain inside them
    (a dict or list subclass, a tuple, an enum member) is still copied as before."""

    class Tags(list):  # type: ignore[type-arg]
        pass

    tags, inner = Tags(["x"]), [2]
    events = [{"event": "slot", "value": (1, inner), "colour": Colour.RED, "tags": tags,
               "flag": True, "count": 3, "score": 0.5, "none": None}]
    copied = json_copy(events)
    assert copied == events
    assert type(copied[0]["value"]) is tuple
    assert copied[0]["value"][1] is not inner
    assert copied[0]["colour"] is Colour.RED
    assert copied[0]["tags"] is not tags
    assert copied[0]["tags"] == ["x"]
    copied[0]["tags"].append("y")
    assert tags == ["x"]


def test_the_events_copy_equals_the_by_type_copy_and_falls_back_for_other_types():
    """Events are copied through marshal when it takes every object inside; a list holding
    an enum member or a container subclass anywhere is copied by type instead, as before."""
    plain = [ev.user_uttered("hi", metadata={"tags": ["x"], "n": 1.5, "ok": True}),
             {"event": "slot", "name": "s", "value": {"deep": [[None, -0.0, 10**30]]}}]
    copied = fast_copy(plain)
    assert copied == plain == json_copy(plain)
    copied[0]["metadata"]["tags"].append("y")
    copied[1]["value"]["deep"][0].append(1)
    assert plain[0]["metadata"]["tags"] == ["x"]
    assert plain[1]["value"]["deep"] == [[None, -0.0, 10**30]]

    class Tags(list):  # type: ignore[type-arg]
        pass

    tags = Tags(["x"])
    odd = [*plain, {"event": "slot", "colour": Colour.RED, "tags": tags}]
    copied = fast_copy(odd)
    assert copied == json_copy(odd)
    assert copied[2]["colour"] is Colour.RED  # not turned into a plain string
    assert copied[2]["tags"] is not tags
    copied[2]["tags"].append("y")
    assert tags == ["x"]


def test_an_input_subclassed_before_any_input_exists_is_complete():
    """In a fresh process, a subclass of AgentInput or AgentOutput written where ``Event`` is
    not in scope works at once (the models were not left half-built at import)."""
    code = textwrap.dedent("""
        from subagents.types import AgentInput, AgentOutput, AgentStatus

        def build():
            class Extended(AgentInput):
                extra: dict = {}

            class Answer(AgentOutput):
                note: str = ""

            return Extended(id="a", extra={"k": 1}), Answer(id="a", status=AgentStatus.COMPLETED)

        extended, answer = build()
        print(type(extended).__name__, type(answer).__name__, extended.events)
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["Extended", "Answer", "[]"]
