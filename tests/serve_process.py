"""``subagents serve`` in a child process on 127.0.0.1, for tests that need real workers.

The server's output is read all along (so a chatty server never blocks on a full pipe) and kept
for the test to show when something goes wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

READY = b"subagents: serving on"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    """One running ``subagents serve``: its base URL and what it printed so far."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.output: list[str] = []

    def log(self) -> str:
        """The server's output so far (for assertion messages)."""
        return "".join(self.output)


async def _drain(stream: asyncio.StreamReader, server: ServeProcess,
                 ready: asyncio.Event) -> None:
    while line := await stream.readline():
        server.output.append(line.decode(errors="replace"))
        if READY in line:
            ready.set()
    ready.set()  # the process ended: whoever waits for readiness looks at its exit status


@contextlib.asynccontextmanager
async def serve_process(project: Path, *args: str, env: dict[str, str] | None = None,
                        ready_within: float = 90,
                        command: str = "serve") -> AsyncIterator[ServeProcess]:
    """Run ``subagents serve --project PROJECT --port <free> ARGS...`` until the block ends.

    A port another process took between the pick and the bind is picked again (twice at
    most).

    Args:
        project: The assistant project folder.
        *args: More ``serve`` options (``--record``, ``--token T``, ...).
        env: Variables added to this process's environment.
        ready_within: Seconds the server may take to start.
        command: The command that serves (``serve``, or ``inspect`` for the inspector).
    """
    for attempt in range(3):
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", command, "--project", str(project),
            "--port", str(port), "--no-model-check", *args,
            env={**os.environ, **(env or {})}, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        server = ServeProcess(port)
        ready = asyncio.Event()
        reader = asyncio.ensure_future(_drain(proc.stderr, server, ready))
        try:
            with anyio.fail_after(ready_within):
                await ready.wait()
            if READY.decode() not in server.log() and "address already in use" in \
                    server.log() and attempt < 2:
                continue  # the finally below reaps it; try another port
            assert READY.decode() in server.log(), \
                f"the server exited before it was ready:\n{server.log()}"
            yield server
            return
        finally:
            await _stop(proc, reader)


async def _stop(proc: asyncio.subprocess.Process, reader: asyncio.Future[None]) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        with anyio.fail_after(30):
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
    with anyio.move_on_after(5):
        await reader
    reader.cancel()


@contextlib.asynccontextmanager
async def example_insurer() -> AsyncIterator[dict[str, str]]:
    """The demo insurer that the example assistant's A2A agent calls, on 127.0.0.1.

    Yields the environment a served copy of the example needs to reach it.
    """
    from subagents.demo.a2a_insurer import build_app
    from subagents.testing.mcp_http import serve_app

    async with serve_app(build_app()) as url:
        yield {"CLINIC_INSURER_URL": url}
