"""The example assistant under `subagents serve`: start-up time and server CPU per turn.

Start-up is the time from spawning ``subagents serve`` (the repository's example project,
two stdio MCP servers, one A2A agent) until ``/health`` answers. The example's A2A agent,
``insurance_checker``, reads its card from ``$CLINIC_INSURER_URL``: the benchmark starts the
demo insurer (``subagents.demo.a2a_insurer``) as a child process on a free 127.0.0.1 port first
and points the variable at it; its CPU is not counted as the server's.

A turn is "/stock_research" in a new conversation: the stock analyst calls
``get_stock_price`` on the stdio MCP server, then answers; two model calls (the fake model
answers after 200 ms) and one MCP call per turn. The clients send their turns in waves (all
first model calls of a wave arrive before any second one, which is what keeps the fake
model's scripted replies in order).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
from bench_serve import cpu_seconds, free_port, raise_fd_limit, wait_healthy
from subagents.testing import FakeModelServer

MODEL_MS = 200
REPO = Path(__file__).resolve().parent.parent
ENDPOINTS = """
model_groups:
  - id: agent_llm
    models: [{{provider: openai, model: fake, api_base: "{agent}", timeout: 60}}]
  - id: command_generator_llm
    models: [{{provider: openai, model: fake, api_base: "{commands}", timeout: 60}}]
mcp_servers:
  - {{name: stocks, type: stdio, command: python, args: ["-m", "subagents.demo.stocks"]}}
  - {{name: appointments, type: stdio, command: python,
     args: ["-m", "subagents.demo.appointments"]}}
tracker_store: {{type: sql, url: "sqlite+aiosqlite:///.subagents/tracker.db"}}
"""


def copy_example(root: Path, fake: FakeModelServer) -> None:
    for name in ("config.yml", "data", "sub_agents"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name)
        else:
            shutil.copy(source, root / name)
    (root / "endpoints.yml").write_text(ENDPOINTS.format(
        agent=fake.base_url("agent"), commands=fake.base_url("command_generator")))


@asynccontextmanager
async def insurer() -> AsyncIterator[dict[str, str]]:
    """Run the demo A2A insurer in a child process; yields the environment for ``serve``."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.demo.a2a_insurer", "--host", "127.0.0.1",
        "--port", str(port), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient() as client:
            for _ in range(600):
                if proc.returncode is not None:
                    raise RuntimeError("the demo insurer exited")
                try:
                    card = await client.get(f"{base}/.well-known/agent-card.json")
                    if card.status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError("the demo insurer did not start")
        yield {**os.environ, "CLINIC_INSURER_URL": base}
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


def wave(clients: int) -> list[object]:
    call = {"text": "Let me look up the price.", "delay_ms": MODEL_MS,
            "tool_calls": [{"get_stock_price": {"symbol": "ACME"}}]}
    answer = {"text": "Acme trades at 182.40 USD.", "delay_ms": MODEL_MS}
    return [call] * clients + [answer] * clients


async def turns(client: httpx2.AsyncClient, fake: FakeModelServer, clients: int,
                waves: int, tag: str) -> tuple[float, list[float]]:
    async def one(name: str) -> float:
        start = time.perf_counter()
        response = await client.post("/webhooks/rest/webhook", json={
            "sender": name, "message": "/stock_research"})
        response.raise_for_status()
        texts = [m.get("text") for m in response.json()]
        assert "Acme trades at 182.40 USD." in texts, texts
        return (time.perf_counter() - start) * 1000 - 2 * MODEL_MS

    start = time.perf_counter()
    latencies: list[float] = []
    for number in range(waves):
        fake.add("agent", wave(clients))
        latencies += await asyncio.gather(*(one(f"{tag}-{number}-{i}") for i in range(clients)))
    return time.perf_counter() - start, latencies


async def main(clients: int = 20, per_client: int = 10) -> None:
    raise_fd_limit()
    print(f"== example assistant (two stdio MCP servers, SQLite; one MCP call and two model "
          f"calls per turn, fake model {MODEL_MS} ms) ==")
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeModelServer() as fake, insurer() as env:
            root = Path(tmp)
            copy_example(root, fake)
            port = free_port()
            started = time.perf_counter()
            with (root / "server.log").open("wb") as log_file:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root),
                    "--port", str(port), "--no-model-check", stdout=asyncio.subprocess.DEVNULL,
                    stderr=log_file, env=env)
                base = f"http://127.0.0.1:{port}"
                try:
                    await wait_healthy(base)
                    ready = time.perf_counter() - started
                    print(f"start-up (spawn to /health answering): {ready:.2f} s wall, "
                          f"{cpu_seconds(proc.pid):.2f} s CPU in the server process")
                    limits = httpx2.Limits(max_connections=clients + 10)
                    async with httpx2.AsyncClient(base_url=base, timeout=300,
                                                  limits=limits) as client:
                        await turns(client, fake, 10, 1, "warmup")
                        cpu = cpu_seconds(proc.pid)
                        wall, lat = await turns(client, fake, clients, per_client, "bench")
                        cpu = cpu_seconds(proc.pid) - cpu
                finally:
                    proc.terminate()
                    await proc.wait()
            fake.assert_done()
    total = clients * per_client
    lat.sort()
    print(f"{clients} clients x {per_client} waves: {total / wall:.1f} turns/s, latency minus "
          f"model p50 {statistics.median(lat):.1f} ms p99 "
          f"{lat[min(len(lat) - 1, int(len(lat) * 0.99))]:.1f} ms, server CPU "
          f"{cpu / total * 1000:.2f} ms/turn")


async def _startup(env: dict[str, str], walls: list[float], cpus: list[float]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeModelServer() as fake:
            root = Path(tmp)
            copy_example(root, fake)
            port = free_port()
            started = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root),
                "--port", str(port), "--no-model-check", stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, env=env)
            try:
                await wait_healthy(f"http://127.0.0.1:{port}")
                walls.append(time.perf_counter() - started)
                cpus.append(cpu_seconds(proc.pid))
            finally:
                proc.terminate()
                await proc.wait()


async def startups(count: int) -> None:
    """Start the example assistant ``count`` times; spawn to /health, wall and server CPU."""
    print(f"== start-up of the example assistant, {count} times ==")
    walls: list[float] = []
    cpus: list[float] = []
    async with insurer() as env:
        for _ in range(count):
            await _startup(env, walls, cpus)
    print(f"wall: min {min(walls):.2f} s, median {statistics.median(walls):.2f} s, max "
          f"{max(walls):.2f} s; server CPU median {statistics.median(cpus):.2f} s "
          f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clients", type=int, default=20, help="turns per wave")
    parser.add_argument("--turns", type=int, default=10, help="waves")
    parser.add_argument("--startups", type=int, default=0, metavar="N",
                        help="only measure start-up, N times")
    args = parser.parse_args()
    if args.startups:
        asyncio.run(startups(args.startups))
    else:
        asyncio.run(main(args.clients, args.turns))
