"""``subagents shell``: an interactive conversation in the terminal."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from pathlib import Path

import structlog

from subagents.channels.console import ConsoleOutputChannel
from subagents.config.project import ProjectPaths
from subagents.exceptions import SubagentsError

log = structlog.get_logger("subagents.cli.shell")


def _reader(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None],
            ready: threading.Event) -> None:
    """Read lines on a daemon thread (so Ctrl-C/Ctrl-D never wait for a blocked input()).

    The prompt is shown only once the previous message has been answered (``ready``), so it
    never lands in the middle of the bot's output.
    """
    while True:
        ready.wait()
        ready.clear()
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            loop.call_soon_threadsafe(queue.put_nowait, None)
            return
        loop.call_soon_threadsafe(queue.put_nowait, line)


async def _shell(project: Path | ProjectPaths, debug: bool) -> None:
    from subagents.dialogue.client_input import TurnFailedError
    from subagents.dialogue.processor import Assistant

    assistant = Assistant.load(project)
    channel = ConsoleOutputChannel(debug=debug)
    print("Starting the assistant (connecting its MCP servers)...", flush=True)
    async with assistant:
        sender = f"shell-{uuid.uuid4().hex[:8]}"
        print("Talk to your assistant. /restart starts a new conversation; Ctrl-D quits.",
              flush=True)
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        ready = threading.Event()
        ready.set()
        threading.Thread(target=_reader, args=(asyncio.get_running_loop(), queue, ready),
                         daemon=True).start()
        while (line := await queue.get()) is not None:
            text = line.strip()
            if text == "/restart":
                sender = f"shell-{uuid.uuid4().hex[:8]}"
                print("(a new conversation started)", flush=True)
            elif text:
                try:
                    await assistant.handle_message(sender, text, None, channel)
                except TurnFailedError as exc:  # the reply is shown; the details are in the log
                    print(f"(the turn failed; error id {exc.error_id})", flush=True)
                except SubagentsError as exc:
                    log.warning("shell.turn.failed", code=exc.code)
                    print(f"(the assistant could not answer: [{exc.code}] {exc})", flush=True)
            sys.stdout.flush()
            ready.set()


def run_shell(project: Path | ProjectPaths, *, debug: bool = False) -> int:
    """Run the shell until Ctrl-D (exit status 0) or Ctrl-C (130)."""
    from subagents.cli import interrupt

    try:
        interrupt.run(_shell(project, debug))
    except KeyboardInterrupt:
        print("\nbye", flush=True)
        return interrupt.EXIT_INTERRUPTED
    print("\nbye", flush=True)
    return 0
