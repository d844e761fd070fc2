"""Long conversations: a turn's server CPU and the server's memory as the history grows.

``subagents serve`` (a subprocess, as in production) runs a small assistant on a SQL tracker
store: SQLite, and PostgreSQL when ``SUBAGENTS_BENCH_POSTGRES_URL`` (or
``SUBAGENTS_TEST_POSTGRES_URL``) is set. For each history size, a fresh server serves
conversations seeded with that many events (copied from real turns of the same assistant):

* **one-model-call turns**: "/help_flow" starts a flow whose sub agent answers and completes in
  one model call (the fake model runs in a process of its own and answers at once);
* **custom-action turns**: "/lookup_flow" runs a custom action on an action server (an aiohttp
  endpoint in this process), which receives the tracker rasa-sdk expects, every event included.

Reported per size: the server's CPU per one-model-call turn (the sum over its threads, from
``/proc/<pid>/task/*/schedstat``, nanoseconds, read around each turn; the median, and the
mean) and its ratio to the 5-event conversations'. One server serves every size, the turns
of the sizes interleaved, so a change in the machine's load touches them alike. Then, per
size, a fresh server serves as many turns in conversations of that size alone: its resident
memory after them (and its peak), then the CPU of a custom-action turn and the memory after
those. The rows a run writes carry its own sender ids and are deleted at the end
(on PostgreSQL the tables are shared with other users of the database).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from _common import machine
from aiohttp import web
from bench_serve import ChildFake, free_port, rss_mb, wait_healthy
from subagents.channels import CollectingOutputChannel
from subagents.dialogue.processor import Assistant
from subagents.logs import configure_logging
from subagents.stores import InMemoryTrackerStore
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer

SIZES = (5, 5000, 50000)
CONVERSATIONS = 10
TURNS = 10
"""One-model-call turns each conversation takes (after one warm-up turn)."""
ACTION_TURNS = 2
FLOWS = """
flows:
  help_flow:
    description: help
    steps:
      - call: helper
  lookup_flow:
    description: look something up
    steps:
      - action: action_lookup
"""
DOMAIN = """
actions: [action_lookup]
responses:
  utter_unused: [{text: "Not used."}]
"""
AGENT = """
agent: {name: helper, description: Helps.}
configuration: {llm: {model_group: agents}, include_date_time: false}
"""
HELPED = {"text": "Here you are.", "tool_calls": [{"task_completed": {}}]}
LOOKED_UP = "Looked up."


def write_project(root: Path, model_url: str, tracker_url: str, action_url: str) -> Path:
    files = {
        "endpoints.yml": f"""
            model_groups:
              - id: agents
                models: [{{model: fake, api_base: "{model_url}", timeout: 60}}]
            tracker_store: {{type: sql, url: "{tracker_url}"}}
            action_endpoint: {{url: "{action_url}"}}
            """,
        "data/flows.yml": FLOWS,
        "data/domain.yml": DOMAIN,
        "sub_agents/helper/config.yml": AGENT,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in nanoseconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that just ended
            pass
    return total


@asynccontextmanager
async def action_server() -> AsyncIterator[tuple[str, list[int]]]:
    """A rasa-sdk style action server answering every call with one message; yields its URL
    and the sizes (events) of the trackers it received."""
    received: list[int] = []

    async def webhook(request: web.Request) -> web.Response:
        call = await request.json(loads=json.loads)
        received.append(len(call["tracker"]["events"]))
        return web.json_response({"events": [], "responses": [{"text": LOOKED_UP}]})

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/webhook", webhook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/webhook", received
    finally:
        await runner.cleanup()


async def seed_events(root: Path) -> list[dict[str, Any]]:
    """The events of a few real turns of the assistant (in process, on a memory store)."""
    script = {"helper": [HELPED] * 4}
    async with FakeModelServer(script) as fake, action_server() as (url, _):
        write_project(root, fake.base_url("helper"), "sqlite+aiosqlite:///unused.db", url)
        store = InMemoryTrackerStore()
        async with Assistant.load(root, llm_factory=fake.llm_factory(),
                                  tracker_store=store) as assistant:
            for text in ("/help_flow", "/lookup_flow", "/help_flow", "/help_flow",
                         "/lookup_flow", "/help_flow"):
                await assistant.handle_message("seed", text, None, CollectingOutputChannel())
            return await assistant.tracker("seed")


async def seed(url: str, senders: list[str], size: int, events: list[dict[str, Any]]) -> None:
    """Store ``size`` events for each sender, as the version under test stores a conversation
    (with its dialogue-state snapshot when the version keeps one)."""
    history = [json.loads(json.dumps(events[i % len(events)])) for i in range(size)]
    store = SQLTrackerStore(url)
    try:
        snapshot = _snapshot_writer()
        for sender in senders:
            if snapshot is None:
                await store.save_turn(sender, history, [], 0)
            else:
                await snapshot(store, sender, history)
    finally:
        await store.close()


def _snapshot_writer() -> Any:
    try:
        from subagents.dialogue.history import seed_conversation
    except ImportError:  # a version that stores no snapshot
        return None
    return seed_conversation


async def delete_rows(url: str, prefix: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for table in ("subagents_events", "subagents_conversations"):
                await conn.execute(text(f"DELETE FROM {table} WHERE sender_id LIKE :p"),
                                   {"p": f"{prefix}%"})
    finally:
        await engine.dispose()


async def post(session: aiohttp.ClientSession, base: str, sender: str, text: str) -> list[Any]:
    async with session.post(f"{base}/webhooks/rest/webhook",
                            json={"sender": sender, "message": text}) as response:
        response.raise_for_status()
        return list(await response.json())


@asynccontextmanager
async def server(root: Path) -> AsyncIterator[tuple[str, int]]:
    """``subagents serve`` on the project in ``root``: its base URL and pid."""
    port = free_port()
    log_file = (root / "server.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root),
        "--port", str(port), stdout=asyncio.subprocess.DEVNULL, stderr=log_file,
        env={**os.environ})
    try:
        await wait_healthy(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        await proc.wait()
        log_file.close()
        log = (root / "server.log").read_text(errors="replace")
        if "Traceback" in log:
            print(log[-3000:])


async def help_turn(session: aiohttp.ClientSession, base: str, sender: str) -> None:
    reply = await post(session, base, sender, "/help_flow")
    assert reply, reply
    assert reply[0]["text"] == HELPED["text"], reply


async def turn_cpu(root: Path, fake: ChildFake, senders: dict[int, list[str]],
                   turns: int) -> dict[int, list[float]]:
    """One server; every conversation's turns in rounds, the sizes interleaved (a change in
    the machine's load touches every size alike); each turn's server CPU, by size."""
    every = [sender for group in senders.values() for sender in group]
    cpu: dict[int, list[float]] = {size: [] for size in senders}
    async with server(root) as (base, pid), aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=600)) as session:
        await fake.add("helper", [HELPED] * (len(every) * (turns + 1)))
        for sender in every:  # warm-up: one turn each
            await help_turn(session, base, sender)
        for _ in range(turns):
            for size, group in senders.items():
                for sender in group:
                    before = cpu_ns(pid)
                    await help_turn(session, base, sender)
                    cpu[size].append((cpu_ns(pid) - before) / 1e6)
        await fake.assert_done()
    return cpu


async def memory_and_actions(root: Path, fake: ChildFake, senders: list[str],
                             turns: int) -> dict[str, float]:
    """A fresh server for conversations of one size: its RSS after their turns, then the
    server CPU of a custom-action turn and the RSS after those."""
    async with server(root) as (base, pid), aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=600)) as session:
        await fake.add("helper", [HELPED] * (len(senders) * turns))
        for _ in range(turns):
            for sender in senders:
                await help_turn(session, base, sender)
        rss, peak = rss_mb(pid)
        start = cpu_ns(pid)
        for _ in range(ACTION_TURNS):
            for sender in senders:
                reply = await post(session, base, sender, "/lookup_flow")
                assert reply, reply
                assert reply[0]["text"] == LOOKED_UP, reply
        action = (cpu_ns(pid) - start) / (ACTION_TURNS * len(senders)) / 1e6
        action_rss, action_peak = rss_mb(pid)
        await fake.assert_done()
    return {"rss": rss, "peak": peak, "action": action, "action_rss": action_rss,
            "action_peak": action_peak}


def stores() -> list[tuple[str, str | None]]:
    postgres = (os.environ.get("SUBAGENTS_BENCH_POSTGRES_URL")
                or os.environ.get("SUBAGENTS_TEST_POSTGRES_URL"))
    return [("SQLite", None), ("PostgreSQL", postgres)]


async def run_store(name: str, url: str | None, tmp: Path, fake: ChildFake, action_url: str,
                    received: list[int], events: list[dict[str, Any]], sizes: tuple[int, ...],
                    conversations: int, turns: int) -> None:
    run = uuid.uuid4().hex[:8]
    tracker_url = url or f"sqlite+aiosqlite:///{tmp / name}/tracker.db"
    root = write_project(tmp / name, fake.base_url("helper"), tracker_url, action_url)
    senders = {size: [f"bench-{run}-{size}-{i}" for i in range(conversations)]
               for size in sizes}
    fresh = {size: [f"bench-{run}-{size}-fresh-{i}" for i in range(conversations)]
             for size in sizes}
    try:
        for size in sizes:
            await seed(tracker_url, senders[size] + fresh[size], size, events)
        cpu = await turn_cpu(root, fake, senders, turns)
        base = statistics.median(cpu[sizes[0]])
        for size in sizes:
            received.clear()
            figures = await memory_and_actions(root, fake, fresh[size], turns)
            median = statistics.median(cpu[size])
            print(f"{name:10} {size:>6} events: turn {median:5.2f} ms CPU "
                  f"({median / base:4.2f}x; mean {statistics.fmean(cpu[size]):5.2f}), "
                  f"server RSS {figures['rss']:5.1f} MB (peak {figures['peak']:5.1f})   "
                  f"custom-action turn {figures['action']:6.2f} ms CPU (trackers of "
                  f"{statistics.median(received):,.0f} events), RSS after "
                  f"{figures['action_rss']:5.1f} MB (peak {figures['action_peak']:5.1f})",
                  flush=True)
    finally:
        if url is not None:
            await delete_rows(url, f"bench-{run}-")


async def main(sizes: tuple[int, ...] = SIZES, conversations: int = CONVERSATIONS,
               turns: int = TURNS, only: str | None = None) -> None:
    configure_logging("WARNING")
    print("== Long conversations: server CPU per turn and memory as the history grows "
          f"({conversations} conversations per size, {turns} one-model-call turns each, the "
          f"sizes interleaved; then per size a fresh server: its memory after the same turns, "
          f"and {ACTION_TURNS} custom-action turns per conversation) ==")
    print(f"machine: {machine()}; load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        events = await seed_events(Path(tmp) / "seed")
        async with ChildFake() as fake, action_server() as (action_url, received):
            for name, url in stores():
                if only and name.lower() != only.lower():
                    continue
                if url is None and name != "SQLite":
                    print(f"{name}: skipped (set SUBAGENTS_BENCH_POSTGRES_URL)")
                    continue
                await run_store(name, url, Path(tmp), fake, action_url, received, events,
                                sizes, conversations, turns)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", type=lambda text: tuple(int(n) for n in text.split(",")),
                        default=SIZES, metavar="N,N,...",
                        help="events of history per conversation (default: %(default)s)")
    parser.add_argument("--conversations", type=int, default=CONVERSATIONS)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default=None,
                        help="only this store (default: both)")
    args = parser.parse_args()
    asyncio.run(main(args.sizes, args.conversations, args.turns, args.store))
