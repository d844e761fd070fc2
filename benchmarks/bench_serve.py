"""Load: N concurrent conversations against `subagents serve` (a subprocess on 127.0.0.1).

Each conversation sends one turn ("/help_flow") whose open agent answers in one model call;
the fake model answers after a fixed 200 ms. Reported: turns/s, p50/p99 turn latency minus the
model latency, and the server's RSS. The tracker store is the default SQLite file.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx2
from subagents.testing import FakeModelServer

MODEL_MS = 200
LEVELS = (100, 500)


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


async def level(client: httpx2.AsyncClient, fake: FakeModelServer, n: int, tag: str
                ) -> tuple[float, list[float]]:
    fake.add("helper", [{"text": "How can I help?", "delay_ms": MODEL_MS}] * n)

    async def one(i: int) -> float:
        start = time.perf_counter()
        response = await client.post("/webhooks/rest/webhook",
                                     json={"sender": f"{tag}-{i}", "message": "/help_flow"})
        response.raise_for_status()
        assert response.json()[0]["text"] == "How can I help?"
        return (time.perf_counter() - start) * 1000 - MODEL_MS

    start = time.perf_counter()
    latencies = await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - start, list(latencies)


async def main() -> None:
    print(f"== serve under load (fake model {MODEL_MS} ms per call, SQLite tracker) ==")
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeModelServer() as fake:
            root = Path(tmp)
            write_project(root, fake)
            port = free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "subagents.cli", "serve", "--project", str(root),
                "--port", str(port), stdout=asyncio.subprocess.DEVNULL,
                stderr=open(root / "server.log", "wb"), env={**os.environ})
            base = f"http://127.0.0.1:{port}"
            try:
                await wait_healthy(base)
                limits = httpx2.Limits(max_connections=1200, max_keepalive_connections=1200)
                async with httpx2.AsyncClient(base_url=base, timeout=120,
                                              limits=limits) as client:
                    await level(client, fake, 20, "warmup")
                    for n in LEVELS:
                        server_cpu, own_cpu = cpu_seconds(proc.pid), time.process_time()
                        wall, lat = await level(client, fake, n, f"n{n}")
                        server_cpu = cpu_seconds(proc.pid) - server_cpu
                        own_cpu = time.process_time() - own_cpu
                        lat.sort()
                        rss, hwm = rss_mb(proc.pid)
                        print(f"N={n:5d}: {n / wall:7.1f} turns/s   latency minus model: "
                              f"p50 {statistics.median(lat):7.1f} ms  "
                              f"p99 {lat[min(len(lat) - 1, int(len(lat) * 0.99))]:7.1f} ms   "
                              f"server RSS {rss:6.1f} MB (peak {hwm:6.1f} MB)   CPU ms/turn: "
                              f"server {server_cpu / n * 1000:.1f}, client+fake model "
                              f"{own_cpu / n * 1000:.1f}")
                fake.assert_done()
            finally:
                proc.terminate()
                await proc.wait()
                log = (root / "server.log").read_text(errors="replace")
                if "Traceback" in log:
                    print(log[-3000:])


if __name__ == "__main__":
    asyncio.run(main())
