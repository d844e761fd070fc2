"""Two conversations with different credentials, served by two ``subagents serve`` workers that
share PostgreSQL (trackers) and Redis (turn locks), never see each other's MCP state.

The MCP server is stateful (notes per MCP session) and reports the user its calls' credentials
name; each server declaration is ``session: per_conversation`` with the user's token from the
message metadata. Alice's and Bob's turns run at the same time, and each conversation alternates
between the workers, so both workers serve both users, in both orders.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx2
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_mcp

from tests.serve_process import ServeProcess, serve_process
from tests.servers import identity_server
from tests.shared_workers import MARKS, workers_project

pytestmark = MARKS

TURNS = 4
USERS = ("alice", "bob")

# Every turn gets the same replies whatever the order the two conversations' requests reach the
# model in: the command generator starts the flow; the agent stores a note, meets the other
# conversation (both calls in flight at once), reads its notes back, and finishes.
NOTE_TURN = {"text": "Noted.", "tool_calls": [
    {"remember": {"note": "n"}}, {"meet": {"expected": 2}}, {"recall": {}},
    {"task_completed": {}}]}


def _project(root: Path, models: str, mcp_url: str) -> Path:
    return workers_project(root, "two_workers", models, "notes_agent", f"""
        - name: notes
          type: http
          url: {mcp_url}
          session: per_conversation
          headers:
            Authorization: "Bearer {{{{ metadata.user_token }}}}"
        """, {
        "data/flows.yml": """
            flows:
              notes_flow:
                description: keep a note
                steps:
                  - call: notes_agent
            """,
        "data/domain.yml": """
            responses:
              utter_noted: [{text: "noted"}]
            """,
        "sub_agents/notes/config.yml": """
            agent: {name: notes_agent, description: Keeps the user's notes.}
            configuration:
              include_date_time: false
              llm: {model_group: agent_llm}
            connections:
              mcp_servers: [{name: notes}]
            """,
    })


async def _talk(client: httpx2.AsyncClient, workers: list[ServeProcess], sender: str,
                user: str, first: int, seen: list[tuple[int, str]]) -> None:
    """``TURNS`` turns of one conversation, turn ``i`` on worker ``(first + i) % 2``."""
    for turn in range(TURNS):
        worker = (first + turn) % len(workers)
        reply = await client.post(f"{workers[worker].url}/webhooks/rest/webhook", json={
            "sender": sender, "message": "note this",
            "metadata": {"user_token": f"token-{user}"}})
        assert reply.status_code == 200, reply.text
        assert "Noted." in [m.get("text") for m in reply.json()], reply.text
        seen.append((worker, sender))


def _results(events: list[dict[str, Any]], tool: str) -> list[tuple[Any, bool]]:
    return [(e.get("result"), bool(e.get("is_error"))) for e in events
            if e.get("event") == "mcp_tool_executed" and e.get("tool_name") == tool]


async def test_two_users_on_two_workers_never_see_each_others_state(tmp_path):
    run = uuid.uuid4().hex[:8]  # the database outlives the test: fresh conversations
    senders = {user: f"{user}-{run}" for user in USERS}
    calls = {"command_generator": ["start flow notes_flow"] * (TURNS * len(USERS)),
             "notes_agent": [NOTE_TURN] * (TURNS * len(USERS))}
    order: list[tuple[int, str]] = []
    identity_server.reset()
    async with FakeModelServer(calls) as fake, \
            serve_mcp(identity_server.server, "http") as mcp_url:
        models = fake.base_url("x").rsplit("/x", 1)[0]
        project = _project(tmp_path / "assistant", models, mcp_url)
        model_key = {"OPENAI_API_KEY": "unused-by-the-fake-model"}
        async with serve_process(project, env=model_key) as first, \
                serve_process(project, env=model_key) as second, \
                httpx2.AsyncClient(timeout=60) as client:
            workers = [first, second]
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    for index, user in enumerate(USERS):
                        tg.start_soon(_talk, client, workers, senders[user], user, index,
                                      order)
                trackers = {(user, w): (await client.get(
                    f"{worker.url}/conversations/{senders[user]}/tracker")).json()
                    for user in USERS for w, worker in enumerate(workers)}
            logs = first.log() + second.log()
        fake.assert_done()
    # both workers served both conversations
    assert {(w, s) for w, s in order} == {(w, s) for w in (0, 1) for s in senders.values()}
    for user in USERS:
        # the shared store: both workers answer with the same conversation
        events = trackers[(user, 0)]["events"]
        assert trackers[(user, 1)]["events"] == events
        assert _results(events, "remember") == [("stored", False)] * TURNS
        # the first turns met: both conversations had calls in flight at the same time
        assert _results(events, "meet")[0] == ("met 2", False)
        recalled = _results(events, "recall")
        assert len(recalled) == TURNS
        for turn, (text, is_error) in enumerate(recalled, start=1):
            assert not is_error
            auth, _, notes = str(text).partition("; notes=")
            assert auth == f"auth={user}", text  # the call carried this user's credential
            kept = ast.literal_eval(notes)
            # only this user's own notes, from the turns so far on this worker
            assert kept, text
            assert set(kept) == {f"n ({user})"}, text
            assert len(kept) <= turn
    # the credentials never reach the model nor the workers' logs
    for request in fake.requests:
        assert "token-" not in str(request.body)
    assert "token-alice" not in logs
    assert "token-bob" not in logs
