"""The CLI's log set-up never prints frame locals: they may hold secrets or conversation data."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from subagents.logs import configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


def _fail_with_a_local() -> None:
    api_key = "sk-local-" + "do-not-log"  # noqa: F841 - a local the traceback must not show
    raise RuntimeError("boom")


@pytest.mark.parametrize("json_logs", [True, False])
def test_tracebacks_in_logs_never_show_frame_locals(restore_logging, capsys, json_logs):
    configure_logging("INFO", json_logs=json_logs)
    try:
        _fail_with_a_local()
    except RuntimeError as exc:
        structlog.get_logger("test").error("test.failed", exc_info=exc)
    err = capsys.readouterr().err
    assert "RuntimeError" in err
    assert "_fail_with_a_local" in err
    assert "do-not-log" not in err


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
