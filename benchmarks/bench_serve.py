"""Load: N concurrent conversations against `subagents serve` (a subprocess on 127.0.0.1).

Each of N concurrent clients sends ``--turns`` turns one after the other, each turn "/help_flow"
in a new conversation whose open agent answers in one model call; the fake model answers after
a fixed 200 ms. Reported: sustained turns/s, p50/p99 turn latency minus the model
latency, the server's CPU per turn (from /proc) and its RSS. The tracker store is the default
SQLite file.

By default (``--arrivals burst``) all N clients start at the same instant; with a fixed model
latency they then stay in lock-step, so every turn of a wave queues behind the N-1 others
(p99 is at least N times the CPU of a turn). ``--arrivals spread`` starts client i at
i/N of one model latency, as independent users arrive: the same N conversations in flight,
the same turns, without the artificial waves.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import httpx2
from subagents.testing import FakeModelServer

MODEL_MS = 200
LEVELS = (100, 300, 1000)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_project(root: Path, fake: FakeModelServer) -> None:
    files = {
        "endpoints.yml": f"""
            model_groups:
              - id: agents
                models: [{{model: fake, api_base: "{fake.base_url('helper')}", timeout: 60}}]
            """,
        "data/flows.yml": """
            flows:
              help_flow:
                description: help
                steps:
                  - call: helper
            """,
        "sub_agents/helper/config.yml": """
            agent: {name: helper, description: Helps.}
            configuration: {llm: {model_group: agents}, include_date_time: false}
            """,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            name, value = line.split(":")
            fields[name] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


async def wait_healthy(base: str) -> None:
    async with httpx2.AsyncClient() as client:
        for _ in range(600):
            try:
                if (await client.get(f"{base}/health")).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the server did not start")


async def level(clients: Sequence[httpx2.AsyncClient], fake: FakeModelServer, n: int, tag: str,
                turns: int = 1, spread: bool = False) -> tuple[float, list[float]]:
    """n clients, each sending ``turns`` turns in sequence; wall seconds and latencies.

    Turn t of client i goes through ``clients[(i + t) % len(clients)]`` (one HTTP client per
    worker spreads the turns over the workers). With ``spread`` client i starts i/n of one
    model latency after the first.
    """
    fake.add("helper", [{"text": "How can I help?", "delay_ms": MODEL_MS}] * (n * turns))

    async def one(i: int) -> list[float]:
        if spread:
            await asyncio.sleep(MODEL_MS / 1000 * i / n)
        latencies = []
        for turn in range(turns):
            client = clients[(i + turn) % len(clients)]
            start = time.perf_counter()
            response = await client.post("/webhooks/rest/webhook", json={
                "sender": f"{tag}-{i}-{turn}", "message": "/help_flow"})
            response.raise_for_status()
            assert response.json()[0]["text"] == "How can I help?", response.json()
            latencies.append((time.perf_counter() - start) * 1000 - MODEL_MS)
        return latencies

    start = time.perf_counter()
    per_conversation = await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - start, [ms for lat in per_conversation for ms in lat]


def raise_fd_limit() -> int:
    """1000 conversations need ~3000 sockets here (client, fake model); the server inherits."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(target, 65536)), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def run_level(root: Path, fake: FakeModelServer, n: int, turns: int = 1,
                    spread: bool = False) -> str:
    """Start a fresh server, warm it up, run n concurrent conversations, stop it."""
    port = free_port()
    log_file = (root / f"server-{n}.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli", "serve", "--project", str(root),
        "--port", str(port), stdout=asyncio.subprocess.DEVNULL, stderr=log_file,
        env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(base)
        limits = httpx2.Limits(max_connections=n + 100, max_keepalive_connections=n + 100)
        async with httpx2.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
            await level([client], fake, 20, f"warmup{n}")
            server_cpu, own_cpu = cpu_seconds(proc.pid), time.process_time()
            wall, lat = await level([client], fake, n, f"n{n}", turns, spread)
            server_cpu = cpu_seconds(proc.pid) - server_cpu
            own_cpu = time.process_time() - own_cpu
        lat.sort()
        rss, hwm = rss_mb(proc.pid)
        total = n * turns
        return (f"N={n:5d}: {total / wall:7.1f} turns/s   latency minus model: "
                f"p50 {statistics.median(lat):8.1f} ms  "
                f"p99 {lat[min(len(lat) - 1, int(len(lat) * 0.99))]:8.1f} ms   "
                f"server RSS {rss:6.1f} MB (peak {hwm:6.1f})   CPU ms/turn: server "
                f"{server_cpu / total * 1000:.2f}, client+fake model "
                f"{own_cpu / total * 1000:.2f}")
    finally:
        proc.terminate()
        await proc.wait()
        log_file.close()
        log = (root / f"server-{n}.log").read_text(errors="replace")
        if "Traceback" in log:
            print(log[-3000:])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench_serve.py", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--levels", type=lambda text: tuple(int(n) for n in text.split(",")),
                        default=LEVELS, metavar="N,N,...",
                        help="concurrent conversations per level (default: %(default)s)")
    parser.add_argument("--turns", type=int, default=5,
                        help="turns each conversation sends in sequence (default: %(default)s)")
    parser.add_argument("--arrivals", choices=("burst", "spread"), default="burst",
                        help="burst: all clients start at once; spread: client i starts i/N "
                             "of one model latency later (default: %(default)s)")
    return parser.parse_args(argv)


async def main(levels: tuple[int, ...] = LEVELS, turns: int = 5,
               arrivals: str = "burst") -> None:
    raise_fd_limit()
    print(f"== serve under load (fake model {MODEL_MS} ms per call, SQLite tracker, "
          f"{arrivals} arrivals; the client and the fake model share the machine's 2 cores "
          "with the server) ==")
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeModelServer() as fake:
            root = Path(tmp)
            write_project(root, fake)
            for n in levels:
                print(await run_level(root, fake, n, turns, arrivals == "spread"),
                      flush=True)
            fake.assert_done()


if __name__ == "__main__":
    args = parse_args()
    asyncio.run(main(args.levels, args.turns, args.arrivals))
