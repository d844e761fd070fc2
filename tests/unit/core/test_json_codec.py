"""The package's JSON codec (orjson, with the standard library where orjson reads or writes
differently): every value reads back as :mod:`json` would read it."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime

import pytest
from subagents.types import SlotSet, dump_json, load_json

BIG = 123456789012345678901234567890


def test_integers_past_64_bits_keep_every_digit() -> None:
    text = dump_json({"id": BIG, "small": 2 ** 63 - 1})
    assert load_json(text) == {"id": BIG, "small": 2 ** 63 - 1}
    assert load_json(text.decode()) == {"id": BIG, "small": 2 ** 63 - 1}
    # a 20-digit integer in a text orjson could read: read by json, not rounded to a float
    assert load_json(b'{"n": 18446744073709551617}')["n"] == 18446744073709551617


def test_what_only_the_standard_library_reads_is_still_read() -> None:
    assert math.isnan(load_json('{"a": NaN}')["a"])
    assert load_json('{"a": "\\ud800"}') == {"a": "\ud800"}
    assert load_json('{"a": 1}'.encode("utf-16")) == {"a": 1}


def test_text_that_is_not_json_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        load_json(b"{not json")
    with pytest.raises(UnicodeDecodeError):
        load_json(b"\xff\xfe\xfa")


def test_written_as_json_dumps_would_read_it() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    moment = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    value = {1: "one", "when": moment, "point": Point(1), "text": "héllo \u2028",
             "event": SlotSet("city", "Berlin")}
    written = dump_json(value, str)
    assert isinstance(written, bytes)
    # what JSON has no type for goes through ``default``, as json.dumps(..., default=str) does
    assert json.loads(written) == json.loads(json.dumps(value, default=str))
    assert b" " not in dump_json({"a": [1, 2]})  # compact


def test_what_orjson_refuses_is_written_by_json() -> None:
    assert load_json(dump_json({"n": BIG})) == {"n": BIG}
    assert load_json(dump_json({"s": "\ud800"})) == {"s": "\ud800"}  # escaped to ASCII
    assert dump_json({"a": float("nan")}) == b'{"a":null}'


def test_a_value_json_cannot_hold_raises_type_error() -> None:
    with pytest.raises(TypeError):
        dump_json({"a": object()})
