"""``subagents test export``: a recorded conversation becomes a conversation test.

The test has the conversation's user messages as steps, its bot messages as expectations, an
``llm_script`` per caller made of the recorded model replies, and a ``tool_script`` with the
recorded results of MCP tools and an ``a2a_script`` with the recorded answers of the A2A agents
it called, so it runs with neither the model nor the MCP servers. The project's A2A agents that
the conversation never called get a stand-in that expects no call (``a2a_script: {agent: []}``),
so the test needs none of the remote agents either.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from subagents.exceptions import ConfigError
from subagents.recording.export import ExportError, a2a_agent_names, build_fixture, dump_fixture


async def load_events(project_dir: Path, sender_id: str) -> list[dict[str, Any]]:
    """The conversation's events from the project's tracker store."""
    from subagents.config.project import load_project
    from subagents.stores import create_tracker_store

    project = load_project(project_dir)
    store = create_tracker_store(project.endpoints.tracker_store, project.root)
    try:
        return await store.load_events(sender_id)
    finally:
        await store.close()


__all__ = ["ExportError", "build_fixture", "cmd_export", "dump_fixture", "export",
           "load_events"]


def export(project_dir: Path, sender_id: str, out: Path | None) -> str:
    """Export one conversation; write it to ``out`` (when given) and return the YAML text.

    Raises:
        ExportError: see :func:`build_fixture`.
    """
    from subagents.config.project import load_project

    events = asyncio.run(load_events(project_dir, sender_id))
    document = build_fixture(sender_id, events, a2a_agent_names(load_project(project_dir)))
    text = dump_fixture(document, sender_id)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return text


def cmd_export(project_dir: Path, senders: list[str], out: Path | None) -> int:
    """``subagents test export SENDER_ID [--out FILE]``: print or write the test; exit status."""
    import sys

    if len(senders) != 1:
        print("usage: subagents test export SENDER_ID [--out FILE] [--project DIR]",
              file=sys.stderr)
        return 2
    try:
        text = export(project_dir, senders[0], out)
    except ConfigError as exc:
        print(f"subagents test export: {exc}", file=sys.stderr)
        return 1
    if out is None:
        sys.stdout.write(text)
    else:
        print(f"wrote {out}", file=sys.stderr)
    return 0
