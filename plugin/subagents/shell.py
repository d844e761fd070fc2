"""``subagents shell``: an interactive conversation in the terminal."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from pathlib import Path

from .channels.console import ConsoleOutputChannel
from .config.project import ProjectPaths


def _reader(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
    """Read lines on a daemon thread (so Ctrl-C/Ctrl-D never wait for a blocked input())."""
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            loop.call_soon_threadsafe(queue.put_nowait, None)
            return
        loop.call_soon_threadsafe(queue.put_nowait, line)


async def _shell(project: Path | ProjectPaths, debug: bool) -> None:
    from .dialogue.processor import Assistant

    assistant = Assistant.load(project)
    channel = ConsoleOutputChannel(debug=debug)
    async with assistant:
        sender = f"shell-{uuid.uuid4().hex[:8]}"
        print("Talk to your assistant. /restart starts a new conversation; Ctrl-D quits.",
              flush=True)
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        threading.Thread(target=_reader, args=(asyncio.get_running_loop(), queue),
                         daemon=True).start()
        while (line := await queue.get()) is not None:
            text = line.strip()
            if not text:
                continue
            if text == "/restart":
                sender = f"shell-{uuid.uuid4().hex[:8]}"
                print("(a new conversation started)", flush=True)
                continue
            await assistant.handle_message(sender, text, None, channel)


def run_shell(project: Path | ProjectPaths, *, debug: bool = False) -> int:
    try:
        asyncio.run(_shell(project, debug))
    except KeyboardInterrupt:
        pass
    print("\nbye", flush=True)
    sys.stdout.flush()
    return 0
