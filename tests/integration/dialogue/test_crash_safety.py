"""A process killed mid-turn loses nothing committed and leaves no half-written turn."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from subagents.stores.sql import SQLTrackerStore

from tests.dialogue_harness import write_project

REPO = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from subagents.dialogue.processor import Assistant

    async def main(project, texts):
        async with Assistant.load(project) as assistant:
            for text in texts:
                await assistant.handle_message("crash-user", text)
                print("turn done", text, flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2:]))
""")


def run(project: Path, *texts: str, die: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUBAGENTS_TEST_DIE_IN_ACTION": "1" if die else "0"}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(project), *texts], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


async def test_a_turn_killed_in_the_middle_is_not_saved(tmp_path):
    project = write_project(tmp_path / "assistant", "http://127.0.0.1:9/mcp", extra={
        "endpoints.yml": """
            tracker_store:
              type: sql
              url: sqlite+aiosqlite:///.subagents/tracker.db
            """,
        "sub_agents/weather/config.yml": None, "sub_agents/booking/config.yml": None,
        "sub_agents/flaky/config.yml": None, "sub_agents/flaky/agent.py": None,
        "sub_agents/flaky/__init__.py": None, "config.yml": None,
        "sub_agents/quitter/config.yml": None,
        "data/flows.yml": """
            flows:
              ask_name:
                description: asks a name
                steps:
                  - collect: name
                  - action: utter_greet
              custom_action_flow:
                description: runs a custom action
                steps:
                  - action: action_lookup
                  - action: utter_looked_up
            """})
    first = run(project, "/ask_name", "/SetSlots(name=Ada)", die=False)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("turn done") == 2
    store = SQLTrackerStore(f"sqlite+aiosqlite:///{project / '.subagents/tracker.db'}")
    before = (await store.load("crash-user")).events

    killed = run(project, "/custom_action_flow", die=True)
    assert killed.returncode == 7  # the custom action killed the process mid-turn
    assert "turn done" not in killed.stdout

    after = await store.load("crash-user")
    await store.close()
    assert after.events == before
    assert [e["text"] for e in after.events if e["event"] == "bot"] == [
        "What is your name?", "Hello Ada!", "Is there anything else I can help you with?"]
    assert after.stack == []
