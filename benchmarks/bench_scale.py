"""Scale-out: 2 `subagents serve` workers on PostgreSQL + Redis against 1 worker on SQLite.

The same load as bench_serve (N clients, each sending turns one after the other, one model call
per turn, fake model 200 ms); with 2 workers a client's turns alternate between them. Server CPU
is the sum over the workers. PostgreSQL and Redis come from SUBAGENTS_TEST_POSTGRES_URL and
SUBAGENTS_TEST_REDIS_URL (``eval "$(bash .ci/services.sh)"`` starts both).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from _common import machine
from bench_serve import (
    MODEL_MS,
    ChildFake,
    Client,
    FakeModel,
    client_session,
    cpu_seconds,
    free_port,
    level,
    raise_fd_limit,
    wait_healthy,
    write_project,
)


async def run(root: Path, fake: FakeModel, workers: int, n: int, turns: int,
              label: str, spread: bool = False) -> str:
    procs, bases = [], []
    for index in range(workers):
        port = free_port()
        log = (root / f"server-{label}-{index}.log").open("wb")
        procs.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root),
            "--port", str(port), stdout=asyncio.subprocess.DEVNULL, stderr=log,
            env={**os.environ}))
        bases.append(f"http://127.0.0.1:{port}")
    try:
        for base in bases:
            await wait_healthy(base)
        clients = [Client(client_session(n), base) for base in bases]
        try:
            tag = uuid.uuid4().hex[:8]
            await level(clients, fake, 20, f"warmup-{tag}")
            before = sum(cpu_seconds(p.pid) for p in procs)
            wall, lat = await level(clients, fake, n, f"run-{tag}", turns, spread)
            cpu = sum(cpu_seconds(p.pid) for p in procs) - before
        finally:
            for client in clients:
                await client.session.close()
    finally:
        for proc in procs:
            proc.terminate()
            await proc.wait()
    lat.sort()
    total = n * turns
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return (f"{label:28s} N={n}: {total / wall:6.1f} turns/s  latency minus model p50 "
            f"{statistics.median(lat):7.1f} ms p99 {p99:7.1f} ms  server CPU "
            f"{cpu / total * 1000:.2f} ms/turn")


async def main(n: int, turns: int, postgres: str, redis: str, spread: bool = False) -> None:
    raise_fd_limit()
    print(f"== scale-out (fake model {MODEL_MS} ms, {n} clients x {turns} turns, "
          f"{'spread' if spread else 'burst'} arrivals) ==")
    print(f"machine: {machine()}; load average before: {os.getloadavg()[0]:.2f}")
    async with ChildFake() as fake:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_project(root, fake)
            print(await run(root, fake, 1, n, turns, "1 worker, SQLite", spread), flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_project(root, fake)
            with (root / "endpoints.yml").open("a") as endpoints:
                endpoints.write(f'tracker_store: {{type: sql, url: "{postgres}"}}\n'
                                f'lock_store: {{type: redis, url: "{redis}"}}\n')
            print(await run(root, fake, 1, n, turns, "1 worker, PostgreSQL+Redis", spread),
                  flush=True)
            print(await run(root, fake, 2, n, turns, "2 workers, PostgreSQL+Redis", spread),
                  flush=True)
        await fake.assert_done()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--arrivals", choices=("burst", "spread"), default="burst",
                        help="burst: all clients start at once; spread: client i starts i/N "
                             "of one model latency later")
    parser.add_argument("--postgres", default=os.environ.get("SUBAGENTS_TEST_POSTGRES_URL"))
    parser.add_argument("--redis", default=os.environ.get("SUBAGENTS_TEST_REDIS_URL"))
    args = parser.parse_args()
    if not args.postgres or not args.redis:
        parser.error("needs PostgreSQL and Redis: eval \"$(bash .ci/services.sh)\" first")
    asyncio.run(main(args.clients, args.turns, args.postgres, args.redis,
                     args.arrivals == "spread"))
