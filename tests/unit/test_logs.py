"""The CLI's log set-up never prints frame locals: they may hold secrets or conversation data.

Each check runs in a child process: ``configure_logging`` changes process-wide logging, and the
loggers it caches would outlive the test.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
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


@pytest.mark.parametrize("json_logs", [True, False])
def test_tracebacks_in_logs_never_show_frame_locals(json_logs):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(json_logs=json_logs)],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "RuntimeError" in done.stderr
    assert "fail_with_a_local" in done.stderr
    assert "do-not-log" not in done.stderr
