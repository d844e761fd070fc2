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

The fake model runs in a child process of its own by default (``--fake-model child``), as a
model endpoint is another machine in production: it then neither shares the load generator's
event loop nor its CPU figure. ``--fake-model in-client`` runs it inside the load generator,
as rounds 1-3 did. The load generator posts with one aiohttp keep-alive session.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from _common import machine
from subagents.testing import FakeModelServer

MODEL_MS = 200
LEVELS = (100, 300, 1000)


class FakeModel(Protocol):
    """The scripted model endpoint, wherever it runs."""

    pid: int

    def base_url(self, caller: str) -> str: ...

    async def add(self, caller: str, replies: list[Any]) -> None: ...

    async def assert_done(self) -> None: ...


class InClientFake:
    """The package's FakeModelServer on the load generator's own event loop."""

    def __init__(self, fake: FakeModelServer) -> None:
        self.fake = fake
        self.pid = os.getpid()

    def base_url(self, caller: str) -> str:
        return self.fake.base_url(caller)

    async def add(self, caller: str, replies: list[Any]) -> None:
        self.fake.add(caller, replies)

    async def assert_done(self) -> None:
        self.fake.assert_done()


_CHILD = """
import asyncio, json, sys
from subagents.testing import FakeModelServer

async def main():
    async with FakeModelServer() as fake:
        print(fake.port, flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            if "add" in command:
                fake.add(command["add"], command["replies"])
                fake.requests.clear()  # a long run would keep every request body
            print(json.dumps(fake.problems()), flush=True)

asyncio.run(main())
"""


class ChildFake:
    """The package's FakeModelServer in a child process, scripted over its stdin."""

    def __init__(self) -> None:
        self.pid = 0
        self.port = 0
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> ChildFake:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CHILD, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env={**os.environ})
        self.pid = self._proc.pid
        self.port = int(await self._line())
        return self

    async def __aexit__(self, *exc: object) -> None:
        stdin, _ = self._pipes()
        stdin.close()
        assert self._proc is not None
        await self._proc.wait()

    def _pipes(self) -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
        if self._proc is None or self._proc.stdin is None or self._proc.stdout is None:
            raise RuntimeError("the fake model process is not running")
        return self._proc.stdin, self._proc.stdout

    async def _line(self) -> str:
        line = await self._pipes()[1].readline()
        if not line:
            raise RuntimeError("the fake model process ended")
        return line.decode().strip()

    async def _command(self, command: dict[str, Any]) -> list[str]:
        stdin, _ = self._pipes()
        stdin.write(json.dumps(command).encode() + b"\n")
        await stdin.drain()
        problems: list[str] = json.loads(await self._line())
        return problems

    def base_url(self, caller: str) -> str:
        return f"http://127.0.0.1:{self.port}/{caller}/v1"

    async def add(self, caller: str, replies: list[Any]) -> None:
        await self._command({"add": caller, "replies": replies})

    async def assert_done(self) -> None:
        problems = await self._command({})
        if problems:
            raise AssertionError("fake model server: " + "; ".join(problems))


@dataclass
class Client:
    """One keep-alive HTTP session to one server."""

    session: aiohttp.ClientSession
    base: str


def client_session(n: int) -> aiohttp.ClientSession:
    """A keep-alive session with a connection for each of ``n`` concurrent conversations."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=n + 100, keepalive_timeout=60),
        timeout=aiohttp.ClientTimeout(total=300))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_project(root: Path, fake: FakeModel) -> None:
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
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            try:
                async with session.get(f"{base}/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the server did not start")


async def level(clients: Sequence[Client], fake: FakeModel, n: int, tag: str,
                turns: int = 1, spread: bool = False) -> tuple[float, list[float]]:
    """n clients, each sending ``turns`` turns in sequence; wall seconds and latencies.

    Turn t of client i goes through ``clients[(i + t) % len(clients)]`` (one HTTP client per
    worker spreads the turns over the workers). With ``spread`` client i starts i/n of one
    model latency after the first.
    """
    await fake.add("helper", [{"text": "How can I help?", "delay_ms": MODEL_MS}] * (n * turns))

    async def one(i: int) -> list[float]:
        if spread:
            await asyncio.sleep(MODEL_MS / 1000 * i / n)
        latencies = []
        for turn in range(turns):
            client = clients[(i + turn) % len(clients)]
            start = time.perf_counter()
            async with client.session.post(f"{client.base}/webhooks/rest/webhook", json={
                    "sender": f"{tag}-{i}-{turn}", "message": "/help_flow"}) as response:
                response.raise_for_status()
                reply = await response.json()
            assert reply[0]["text"] == "How can I help?", reply
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


async def run_level(root: Path, fake: FakeModel, n: int, turns: int = 1,
                    spread: bool = False) -> str:
    """Start a fresh server, warm it up, run n concurrent conversations, stop it."""
    port = free_port()
    log_file = (root / f"server-{n}.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root),
        "--port", str(port), stdout=asyncio.subprocess.DEVNULL, stderr=log_file,
        env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(base)
        async with client_session(n) as session:
            client = Client(session, base)
            await level([client], fake, 20, f"warmup{n}")
            pids = (proc.pid, os.getpid(), fake.pid)
            before = [cpu_seconds(pid) for pid in pids]
            wall, lat = await level([client], fake, n, f"n{n}", turns, spread)
            server, own, model = (cpu_seconds(pid) - cpu
                                  for pid, cpu in zip(pids, before, strict=True))
        lat.sort()
        rss, hwm = rss_mb(proc.pid)
        total = n * turns
        load = "client+fake model" if fake.pid == os.getpid() else "client"
        figures = f"server {server / total * 1000:.2f}, {load} {own / total * 1000:.2f}"
        if fake.pid != os.getpid():
            figures += f", fake model {model / total * 1000:.2f}"
        return (f"N={n:5d}: {total / wall:7.1f} turns/s   latency minus model: "
                f"p50 {statistics.median(lat):8.1f} ms  "
                f"p99 {lat[min(len(lat) - 1, int(len(lat) * 0.99))]:8.1f} ms   "
                f"server RSS {rss:6.1f} MB (peak {hwm:6.1f})   CPU ms/turn: {figures}")
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
    parser.add_argument("--fake-model", choices=("child", "in-client"), default="child",
                        help="child: the fake model in a process of its own; in-client: on "
                             "the load generator's event loop (default: %(default)s)")
    return parser.parse_args(argv)


async def _levels(fake: FakeModel, levels: tuple[int, ...], turns: int, spread: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root, fake)
        for n in levels:
            print(await run_level(root, fake, n, turns, spread), flush=True)
        await fake.assert_done()


async def main(levels: tuple[int, ...] = LEVELS, turns: int = 5,
               arrivals: str = "burst", fake_model: str = "child") -> None:
    raise_fd_limit()
    where = ("in a process of its own" if fake_model == "child"
             else "on the load generator's event loop")
    print(f"== serve under load (fake model {MODEL_MS} ms per call, {where}; SQLite tracker; "
          f"{arrivals} arrivals; the load generator and the fake model share the machine's "
          "cores with the server) ==")
    print(f"machine: {machine()}; load average before: {os.getloadavg()[0]:.2f}")
    if fake_model == "child":
        async with ChildFake() as child:
            await _levels(child, levels, turns, arrivals == "spread")
    else:
        async with FakeModelServer() as fake:
            await _levels(InClientFake(fake), levels, turns, arrivals == "spread")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    args = parse_args()
    asyncio.run(main(args.levels, args.turns, args.arrivals, args.fake_model))
