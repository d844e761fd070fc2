"""Ctrl-C ends every command within a second or two, with exit status 130 and nothing else.

The command's own work is stopped politely first: an async command's main task is cancelled, so
its ``async with`` blocks close the MCP servers and the stores; a synchronous step gets
``KeyboardInterrupt``. Some shutdown steps are not ours to bound (a library's task that is being
cancelled while it spawns a process, a thread that waits on a socket), so a backstop ends the
process :data:`GRACE` seconds after Ctrl-C if it is still running, and a second Ctrl-C ends it
at once. Once interrupted, shutdown chatter (asyncio's "Task was destroyed but it is pending!",
warnings logged while connections close) is not printed: the user asked to stop.

``subagents serve`` stops through uvicorn's own signal handling, which passes Ctrl-C on to the
handler installed here (:func:`serving`), so the backstop covers it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

GRACE = 1.5
"""Seconds the command gets to stop after Ctrl-C before the process ends regardless."""
EXIT_INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT), as shells report it."""


class _State:
    def __init__(self) -> None:
        self.received = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Future[Any] | None = None
        self.passive = False
        """True while someone else (uvicorn) stops the work: the handler only arms the backstop."""


_state = _State()


def interrupted() -> bool:
    """Whether Ctrl-C was pressed during this command."""
    return _state.received


def _exit_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


def _quiet() -> None:
    """Nothing but the command's own last words after Ctrl-C."""
    logging.getLogger("asyncio").disabled = True
    logging.disable(logging.ERROR)
    sys.unraisablehook = lambda _: None


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _state.received:
        _exit_now()  # a second Ctrl-C: at once
    _state.received = True
    _quiet()
    timer = threading.Timer(GRACE, _exit_now)
    timer.daemon = True
    timer.start()
    if _state.passive:
        return
    loop, task = _state.loop, _state.task
    if loop is not None and task is not None and not task.done():
        loop.call_soon_threadsafe(task.cancel)
        return
    raise KeyboardInterrupt


def install() -> None:
    """Handle Ctrl-C as described above, from now on (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, where Ctrl-C cancels ``main`` and then raises KeyboardInterrupt.

    Raises:
        KeyboardInterrupt: Ctrl-C was pressed while ``main`` ran.
    """
    with asyncio.Runner() as runner:
        loop = runner.get_loop()
        task = loop.create_task(main)
        _state.loop, _state.task = loop, task
        try:
            result = loop.run_until_complete(task)
        except asyncio.CancelledError:
            if _state.received:
                raise KeyboardInterrupt from None
            raise
        finally:
            _state.loop = _state.task = None
        if _state.received:  # the command swallowed the cancellation and ended anyway
            raise KeyboardInterrupt
        return result


@contextlib.contextmanager
def serving() -> Iterator[None]:
    """While a server stops itself on Ctrl-C: the handler only arms the backstop."""
    _state.passive = True
    try:
        yield
    finally:
        _state.passive = False
