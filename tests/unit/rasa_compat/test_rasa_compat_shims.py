"""Rasa-named events and helpers that project code gets through the compatibility layer."""

from __future__ import annotations

import json

import pytest
from subagents.events import is_event
from subagents.rasa_compat import _shims


def test_events_are_tracker_dicts_with_rasas_attributes():
    slot = _shims.SlotSet("price", 9.5)
    assert is_event(slot)
    assert (slot["event"], slot["name"], slot["value"]) == ("slot", "price", 9.5)
    assert (slot.key, slot.value) == ("price", 9.5)
    bot = _shims.BotUttered("hi", metadata={"a": 1})
    assert (bot["event"], bot.text, bot["metadata"]) == ("bot", "hi", {"a": 1})
    user = _shims.UserUttered("hello", intent={"name": "greet"})
    assert user["parse_data"]["intent"] == {"name": "greet"}
    with pytest.raises(AttributeError):
        _ = slot.nothing


def test_json_helpers_write_and_read_and_fail_with_rasas_exceptions(tmp_path):
    path = tmp_path / "db.json"
    _shims.write_json_to_file(path, {"name": "Zoë", "items": [1, 2]})
    assert json.loads(path.read_text(encoding="utf-8")) == {"name": "Zoë", "items": [1, 2]}
    assert "Zoë" in path.read_text(encoding="utf-8")  # not escaped
    assert _shims.read_json_file(path) == {"name": "Zoë", "items": [1, 2]}
    with pytest.raises(_shims.FileNotFoundException):
        _shims.read_json_file(tmp_path / "missing.json")
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(_shims.FileIOException):
        _shims.read_json_file(path)
    assert issubclass(_shims.FileIOException, _shims.RasaException)
