"""Run the ``subagents`` command in a child process.

Tests that need the command's exit status and messages run it this way, not through
``subagents.cli.main`` in the test process: the command configures process-wide logging, and the
loggers it caches would stop later tests from capturing log events.
"""

from __future__ import annotations

import subprocess
import sys


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``subagents ARGS...`` with its output captured (text)."""
    return subprocess.run([sys.executable, "-m", "subagents.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)
