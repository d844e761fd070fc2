"""The CLI's log set-up: no frame locals in tracebacks, level filtering, JSON lines.

Each check runs in a child process: ``configure_logging`` changes process-wide logging, and the
loggers it caches would outlive the test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LOCALS = """
import structlog
from subagents.logs import configure_logging

configure_logging("INFO", json_logs={json_logs})


def fail_with_a_local():
    api_key = "sk-local-" + "do-not-log"
    raise RuntimeError("boom")


try:
    fail_with_a_local()
except RuntimeError as exc:
    structlog.get_logger("test").error("test.failed", exc_info=exc)
"""

LEVELS = """
import logging
import structlog
from subagents.logs import configure_logging

configure_logging("INFO", json_logs=True)
log = structlog.get_logger("subagents.test")
log.debug("test.hidden", value=1)
log.info("test.shown", value=2)
log.log(logging.WARNING, "test.by_level", value=3)
"""

QUIET = """
import logging
import structlog
from subagents.logs import configure_logging

configure_logging("INFO", json_logs=True)
logging.getLogger("subagents.quiet").setLevel(logging.ERROR)
structlog.get_logger("subagents.quiet").warning("test.quiet")
structlog.get_logger("subagents.loud").warning("test.loud")
"""


def _stderr(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stderr


@pytest.mark.parametrize("json_logs", [True, False])
def test_tracebacks_in_logs_never_show_frame_locals(json_logs):
    err = _stderr(LOCALS.format(json_logs=json_logs))
    assert "RuntimeError" in err
    assert "fail_with_a_local" in err
    assert "do-not-log" not in err


def test_events_below_the_level_are_dropped_and_the_rest_are_json():
    lines = [json.loads(line) for line in _stderr(LEVELS).splitlines()]
    assert [(line["event"], line["value"], line["level"]) for line in lines] == [
        ("test.shown", 2, "info"), ("test.by_level", 3, "warning")]
    assert all(line["logger"] == "subagents.test" for line in lines)


def test_a_stdlib_logger_set_above_the_root_level_still_filters():
    events = [json.loads(line)["event"] for line in _stderr(QUIET).splitlines()]
    assert events == ["test.loud"]


AGAIN = """
import structlog
from subagents.logs import configure_logging

configure_logging("INFO", json_logs=True)
log = structlog.get_logger("subagents.early")
log.warning("test.first")  # cached on first use
configure_logging("INFO", json_logs=True)  # a second set-up (a command run in process)
seen = []


def hear(logger, method, event):
    seen.append(event["event"])
    return event


structlog.get_config()["processors"].insert(0, hear)
log.warning("test.second")
print(seen)
"""


def test_a_logger_used_before_a_second_set_up_follows_it():
    """A logger cached on first use reads the same processors as one bound later, so a
    processor added after a second set-up (what conversation tests do to collect errors)
    hears it."""
    done = subprocess.run([sys.executable, "-c", AGAIN], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "['test.second']"
