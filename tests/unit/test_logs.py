"""The CLI's log set-up never prints frame locals: they may hold secrets or conversation data."""

from __future__ import annotations

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
