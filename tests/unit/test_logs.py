"""The CLI's logging set-up: events at or above the level come out as JSON, others cost
nothing and never appear."""

from __future__ import annotations

import json
import logging

import pytest
import structlog
from subagents.logs import configure_logging


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_events_below_the_level_are_dropped_and_the_rest_are_json(restore_logging, capsys):
    configure_logging("INFO", json_logs=True)
    log = structlog.get_logger("subagents.test")
    log.debug("test.hidden", value=1)
    log.info("test.shown", value=2)
    log.log(logging.WARNING, "test.by_level", value=3)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(line["event"], line["value"], line["level"]) for line in lines] == [
        ("test.shown", 2, "info"), ("test.by_level", 3, "warning")]
    assert all(line["logger"] == "subagents.test" for line in lines)


def test_a_stdlib_logger_set_above_the_root_level_still_filters(restore_logging, capsys):
    configure_logging("INFO", json_logs=True)
    logging.getLogger("subagents.quiet").setLevel(logging.ERROR)
    try:
        structlog.get_logger("subagents.quiet").warning("test.quiet")
        structlog.get_logger("subagents.loud").warning("test.loud")
    finally:
        logging.getLogger("subagents.quiet").setLevel(logging.NOTSET)
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events == ["test.loud"]
