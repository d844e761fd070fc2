"""``subagents shell``: an interactive conversation in the terminal.

With ``--script FILE`` the model is the scripted fake server playing the ``llm_script`` of the
file's first test case (``FILE::CASE`` picks another), and its ``a2a_script`` answers for the A2A
agents, as in ``subagents demo``; only the user's messages are typed. What the script cannot
answer (its replies for a caller are used up, an ``expect`` check failed) is printed as a script
problem after the turn, and the turn's apology reads as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from subagents.channels.console import ConsoleOutputChannel
from subagents.config.project import ProjectPaths
from subagents.exceptions import SubagentsError

log = structlog.get_logger("subagents.cli.shell")

SCRIPT_APOLOGY = ("(the script has no model reply for this: see the script problem below)")
"""What the bot says in ``--script`` mode instead of "I can't reach my language model"."""


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


@dataclass
class _Script:
    """The scripted model of ``--script``, and what it has reported so far."""

    fake: Any
    name: str
    shown: int = 0
    replies: dict[str, int] = field(default_factory=dict)
    """Caller -> how many replies the script has for it."""

    @property
    def callers(self) -> list[str]:
        """The callers the script has replies for."""
        return list(self.replies)

    def new_problems(self) -> list[str]:
        """Problems since the last call (replies not yet used are no problem mid-conversation),
        each saying how many replies the script has for the caller."""
        problems = [p for p in self.fake.problems() if not p.endswith("never requested")]
        fresh, self.shown = problems[self.shown:], len(problems)
        return [self._explained(problem) for problem in fresh]

    def _explained(self, problem: str) -> str:
        prefix = "unexpected model call by "
        if not problem.startswith(prefix):
            return problem
        caller = problem[len(prefix):].partition(",")[0]
        count = self.replies.get(caller, 0)
        return (f"{problem}: the script {self.name} has {count} repl"
                f"{'y' if count == 1 else 'ies'} for {caller}, all played")

    def used_up(self, text: str) -> str | None:
        """Why the message ``text`` cannot be answered: the command generator's replies are all
        played (a ``/intent`` payload needs none); None when it can."""
        if text.startswith("/") or "command_generator" not in self.callers:
            return None
        if self.fake.unconsumed().get("command_generator"):
            return None
        played = len(self.fake.requests_of("command_generator"))
        return (f"(the script {self.name} has no command generator reply left: it played all "
                f"{played}. Add replies to its llm_script, or quit with Ctrl-D)")


def _load_case(spec: str) -> Any:
    from subagents.testing.fixtures import load_file

    file, _, name = spec.partition("::")
    path = Path(file)
    if not path.is_file():
        raise SubagentsError(f"{file}: no such script file", code="shell.script_not_found")
    loaded = load_file(path)
    if loaded.issues:
        raise SubagentsError("; ".join(i.format() for i in loaded.issues),
                             code="shell.script_invalid")
    cases = [c for c in loaded.cases if not name or c.name == name]
    if not cases:
        known = ", ".join(c.name for c in loaded.cases) or "none"
        raise SubagentsError(f"{file}: no test case {name or ''!r} (cases: {known})",
                             code="shell.script_invalid")
    return cases[0]


@contextlib.asynccontextmanager
async def _assistant(project: Path | ProjectPaths, script: str | None
                     ) -> AsyncIterator[tuple[Any, _Script | None]]:
    """The assistant, with the scripted model and A2A stand-ins when ``script`` is given."""
    from subagents.config.domain import ResponseVariation
    from subagents.config.project import load_project
    from subagents.dialogue.processor import Assistant

    loaded = load_project(project)
    if script is None:
        async with Assistant(loaded) as assistant:
            yield assistant, None
        return
    from subagents.demo.player import remote_agents
    from subagents.testing.fake_server import FakeModelServer, scripted_search_index

    case = _load_case(script)
    loaded.domain.responses["utter_model_unavailable"] = [ResponseVariation(
        text=SCRIPT_APOLOGY)]
    problems: list[str] = []
    async with FakeModelServer(case.llm_script or {}) as fake, \
            remote_agents(loaded, case, problems) as remotes, \
            scripted_search_index() as index_root, \
            Assistant(loaded, llm_factory=fake.llm_factory(), retry_delays=(0.0,),
                      search_index_root=index_root) as assistant:
        for remote in remotes:
            print(f"(A2A agent {remote}: a local stand-in answering from the script)")
        yield assistant, _Script(fake, f"{case.file}::{case.name}", replies={
            caller: len(replies) for caller, replies in (case.llm_script or {}).items()})


async def _shell(project: Path | ProjectPaths, debug: bool, show_tools: bool,
                 script: str | None) -> None:
    channel = ConsoleOutputChannel(debug=debug, show_tools=show_tools)
    print("Starting the assistant (connecting its MCP servers)...", flush=True)
    async with _assistant(project, script) as (assistant, scripted):
        sender = f"shell-{uuid.uuid4().hex[:8]}"
        if scripted is not None:
            print(f"The model answers from the script {scripted.name}: type the user's "
                  "messages.", flush=True)
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
                await _turn(assistant, sender, text, channel, scripted)
            sys.stdout.flush()
            ready.set()


async def _turn(assistant: Any, sender: str, text: str, channel: ConsoleOutputChannel,
                scripted: _Script | None) -> None:
    from subagents.dialogue.client_input import TurnFailedError

    used_up = scripted.used_up(text) if scripted is not None else None
    if used_up is not None:
        print(used_up, flush=True)
        return
    try:
        await assistant.handle_message(sender, text, None, channel)
    except TurnFailedError as exc:  # the reply is shown; the details are in the log
        print(f"(the turn failed; error id {exc.error_id})", flush=True)
    except SubagentsError as exc:
        log.warning("shell.turn.failed", code=exc.code)
        print(f"(the assistant could not answer: [{exc.code}] {exc})", flush=True)
    for problem in scripted.new_problems() if scripted is not None else []:
        print(f"script problem: {problem}", flush=True)


def run_shell(project: Path | ProjectPaths, *, debug: bool = False, show_tools: bool = True,
              script: str | None = None) -> int:
    """Run the shell until Ctrl-D (exit status 0) or Ctrl-C (130).

    Tool calls are shown as ``⚙ tool(args) → result`` unless ``show_tools`` is false, slot
    changes with ``debug``; ``script`` (``FILE`` or ``FILE::CASE``) plays a test case's scripted
    model instead of the project's models.
    """
    from subagents.cli import interrupt

    try:
        interrupt.run(_shell(project, debug, show_tools, script))
    except KeyboardInterrupt:
        print("\nbye", flush=True)
        return interrupt.EXIT_INTERRUPTED
    print("\nbye", flush=True)
    return 0
