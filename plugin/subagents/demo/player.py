"""``subagents demo``: play a recorded conversation against the real assistant.

Everything is real except the model: the project's stdio MCP servers, its SQLite tracker store,
the flow executor and the agents; the model is the fake server playing the script's
``llm_script`` replies. The remote side of each A2A agent the script's ``a2a_script`` names is a
local stand-in answering from the script (on a free 127.0.0.1 port), so nothing else has to
run. The conversation is printed as a user would see it, with each A2A call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from subagents.channels.console import ConsoleOutputChannel
from subagents.config.project import ProjectPaths
from subagents.testing.fake_server import FakeModelServer, scripted_search_index
from subagents.testing.fixtures import TestCase, load_file


def _show_call(agent: str, text: str, reply: dict[str, Any] | None) -> None:
    answer = "no scripted reply left" if reply is None else (
        "message" if "message" in reply else str(reply.get("state")))
    print(f"      ⇄ A2A {agent} ← {json.dumps(text, ensure_ascii=False)[:100]} → {answer}",
          flush=True)


@contextlib.asynccontextmanager
async def remote_agents(project: Any, case: TestCase,
                         problems: list[str]) -> AsyncIterator[list[str]]:
    """Serve the case's ``a2a_script`` stand-ins and point the agents at them; what did not go
    as scripted is added to ``problems`` at the end."""
    if not case.a2a_script:
        yield []
        return
    from subagents.testing.a2a_replay import A2AStandins

    names = [n for n in case.a2a_script if n in project.agents]
    standins = A2AStandins(names)
    async with standins.serving() as cards:
        for name in names:
            project.agents[name].config.configuration.agent_card = cards[name]
            project.agents[name].config.configuration.auth = None
            standins.agents[name].listener = _show_call
        agents = standins.load({n: case.a2a_script[n] for n in names})
        yield [f"{name} at {cards[name]}" for name in names]
    problems += [f"a2a script: {line}" for agent in agents.values()
                 for line in [*agent.problems, *agent.unused()]]


async def _play(project: ProjectPaths, script: Path) -> int:
    from subagents.config.project import load_project
    from subagents.dialogue.processor import Assistant

    loaded = load_file(script)
    if loaded.issues or not loaded.cases:
        for issue in loaded.issues:
            print(issue.format(), file=sys.stderr)
        print(f"{script}: no playable conversation", file=sys.stderr)
        return 1
    case = loaded.cases[0]
    started = time.perf_counter()
    async with FakeModelServer(case.llm_script or {}) as fake:
        channel = ConsoleOutputChannel(debug=True)
        sender = f"demo-{uuid.uuid4().hex[:8]}"
        print(f"Starting the assistant in {project.root} (stdio MCP servers, SQLite, scripted "
              "model)...", flush=True)
        loaded_project = load_project(project)
        remote_problems: list[str] = []
        async with remote_agents(loaded_project, case, remote_problems) as remotes, \
                scripted_search_index() as index_root, \
                Assistant(loaded_project, llm_factory=fake.llm_factory(max_retries=2),
                          search_index_root=index_root) as assistant:
            for remote in remotes:
                print(f"(A2A agent {remote}: a local stand-in answering from the script)",
                      flush=True)
            for step in case.steps:
                if "user" not in step:
                    continue
                print(f"\nyou> {step['user']}", flush=True)
                await assistant.handle_message(sender, str(step["user"]), None, channel)
        problems = [*fake.problems(), *remote_problems]
    print(f"\nDemo finished in {time.perf_counter() - started:.1f}s; the conversation is "
          f"saved as {sender!r} in the project's tracker store.")
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    return 1 if problems else 0


def play(project: Path | ProjectPaths, script: Path | None = None, *,
         runner: Callable[[Coroutine[Any, Any, int]], int] = asyncio.run) -> int:
    """Play the first conversation of a demo script against the project.

    The model is the scripted fake server; the bot's messages and tool calls are printed.
    ``runner`` runs the coroutine (the CLI's stops it on Ctrl-C).

    Returns:
        The process exit code: 0, or 1 when the script is missing or unplayable or the
        model or A2A script was not followed.
    """
    if not isinstance(project, ProjectPaths):
        project = ProjectPaths.resolve(project.resolve())
    script = script or project.root / "demo.yml"
    if not script.exists():
        print(f"no demo script at {script}; pass --script FILE", file=sys.stderr)
        return 1
    return runner(_play(project, script))
