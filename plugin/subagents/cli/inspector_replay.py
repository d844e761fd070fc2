"""``subagents inspect --replay FILE::CASE``: serve the inspector over an assistant whose models
answer from a conversation test's ``llm_script`` (and whose MCP servers answer from its
``tool_script``, when it has one), so the case can be stepped through message by message in the
page.

The page reads the case from ``GET /inspect/replay`` and sends each user message through the
stream route, like any message typed in it: the same code path as a live conversation.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from subagents.exceptions import SubagentsError

REPLAY_PREFIX = "replay-"
"""The replayed conversation's sender id is this prefix and the case's name (so a replay saved
as a test is named after its case)."""


class ReplayError(SubagentsError):
    """The ``--replay`` argument does not name a loadable test case."""

    code = "inspect.replay_invalid"


def load_case(spec: str, project: Path) -> Any:
    """The test case ``FILE::CASE`` names (the only case of FILE when ``::CASE`` is left out).

    Raises:
        ReplayError: The file does not exist or does not load, or has no such case.
    """
    from subagents.testing.fixtures import load_files

    file, _, name = spec.partition("::")
    path = Path(file)
    if not path.is_absolute():
        path = Path.cwd() / path
    if not path.is_file():
        raise ReplayError(f"{file}: no such test file")
    loaded = load_files([path], project)
    if loaded.issues:
        raise ReplayError("; ".join(issue.format() for issue in loaded.issues))
    cases = [case for case in loaded.cases if not name or case.name == name]
    if not cases:
        known = ", ".join(case.name for case in loaded.cases) or "none"
        raise ReplayError(f"{file}: no test case {name!r} (cases: {known})")
    if len(cases) > 1:
        known = ", ".join(case.name for case in cases)
        raise ReplayError(f"{file} has several test cases: name one as {file}::<case> "
                          f"({known})")
    case = cases[0]
    if case.llm_script is None:
        raise ReplayError(f"{file}::{case.name} has no llm_script to replay")
    return case


def replay_sender(case: Any) -> str:
    """The sender id of the replayed conversation of ``case``."""
    return (REPLAY_PREFIX + str(case.name))[:255]


def replay_plan(case: Any) -> dict[str, Any]:
    """What the page shows and sends: the case's user messages (with their metadata) and the
    bot messages the test expects after each."""
    steps: list[dict[str, Any]] = []
    for step in case.steps:
        if "user" in step and str(step["user"]).strip():
            metadata = dict(case.metadata)
            if step.get("metadata"):
                metadata.update(case.metadata_presets.get(step["metadata"], {}))
            steps.append({"user": str(step["user"]), "metadata": metadata, "expect": []})
        elif "bot" in step and steps:
            steps[-1]["expect"].append(str(step["bot"]))
        elif "utter" in step and steps:
            steps[-1]["expect"].append(f"({step['utter']})")
    return {"case": case.name, "file": case.file, "sender": replay_sender(case),
            "steps": steps}


@contextlib.asynccontextmanager
async def _replay_project(case: Any, project: Path) -> AsyncIterator[Any]:
    """The loaded project; with a ``tool_script``, its MCP servers are replay stand-ins that
    answer with the recorded results (the real servers are not started)."""
    from subagents.config.project import load_project
    from subagents.testing.tool_replay import replay_servers

    loaded = load_project(project)
    if case.tool_script is None:
        yield loaded
        return
    names = [server.name for server in loaded.endpoints.mcp_servers or []]
    async with replay_servers(case.tool_script, names) as (_, configs):
        loaded.endpoints.mcp_servers = configs
        yield loaded


@contextlib.asynccontextmanager
async def replay_app(case: Any, project: Path, *, token: str | None = None,
                     allowed_hosts: list[str] | None = None) -> AsyncIterator[Any]:
    """The API app (with the inspector) over an assistant whose models answer from the case's
    ``llm_script`` and whose MCP servers answer from its ``tool_script`` (when it has one); the
    stand-ins run while the context is open. The replayed conversation is recorded, so the page
    can save what happened as a new test."""
    from subagents import events as ev
    from subagents.dialogue.processor import Assistant
    from subagents.recording import turn as recording
    from subagents.server.app import create_app
    from subagents.stores import InMemoryTrackerStore
    from subagents.testing import FakeModelServer, scripted_search_index

    async with FakeModelServer(case.llm_script) as fake, \
            _replay_project(case, project) as loaded, scripted_search_index() as index_root:
        assistant = Assistant(loaded, tracker_store=InMemoryTrackerStore(),
                              llm_factory=fake.llm_factory(), retry_delays=(0.0,),
                              search_index_root=index_root)
        assistant.actions.stubs = dict(case.stubs) if case.stubs else None
        presets = [ev.slot_set(k, v) for k, v in (case.slot_presets or {}).items()]
        await assistant.tracker_store.save_turn(
            replay_sender(case), [*presets, recording.switch_event(True)], [], 0)
        yield create_app(assistant, token=token, replay=replay_plan(case),
                         allowed_hosts=allowed_hosts)


async def serve_replay(case: Any, project: Path, *, host: str, port: int,
                       token: str | None) -> None:
    """Serve the API and the inspector with the case's scripted models until stopped."""
    import uvicorn

    from subagents.server.app import uvicorn_config
    from subagents.server.security import LOOPBACK_HOSTS, is_loopback, warn_if_exposed

    warn_if_exposed(host, token)
    hosts = list(LOOPBACK_HOSTS) if is_loopback(host) else None
    outer_sigint = signal.getsignal(signal.SIGINT)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if sig == signal.SIGINT:  # Ctrl-C: a short drain; the CLI's handler ends the replay
                self.config.timeout_graceful_shutdown = 1
                if callable(outer_sigint):
                    outer_sigint(sig, frame)

    async with replay_app(case, project, token=token, allowed_hosts=hosts) as app:
        await _Server(uvicorn_config(app, host=host, port=port)).serve()


def run_replay(spec: str, project: Path, *, host: str, port: int, token: str | None) -> int:
    """``subagents inspect --replay``: load the case, then serve until stopped."""
    case = load_case(spec, project)
    print(f"subagents inspect: replaying {case.file}::{case.name} at "
          f"http://{host}:{port}/inspect", flush=True)
    from subagents.cli import interrupt

    # uvicorn re-raises the signal that stopped it once it has drained: SIGTERM ends with exit
    # status 0; Ctrl-C cancels the replay (its stand-ins close) and ends with 130
    signal.signal(signal.SIGTERM, lambda *_: None)
    interrupt.run(serve_replay(case, project, host=host, port=port, token=token))
    return 0
