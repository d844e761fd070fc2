"""ReAct loop overhead: a 5-step run, model at zero latency, trivial in-process tool.

The floor is a raw client on the same HTTP library as the agent's model (aiohttp): the same
request bodies posted as plain JSON over one keep-alive session, replies decoded with
``json.loads``, no SDK and no agent. Logging is set up as ``subagents serve`` sets it
(WARNING), so filtered-out log calls cost what they cost there.

Two figures per step: wall time minus the fake model's handler time (fake model in this
process), and this process's CPU time with the fake model in a child process, so that only
the client side is counted. CPU time is the figure that holds on a loaded machine. The CPU
figure is split once more: the same bodies sent through the agent's model client alone
(``Model.complete``, built as the assistant builds it: recording, usage and instrumentation
wrappers around the OpenAI-compatible model) show what the model adds to the raw post, and the
rest of a step is
the loop's own work (prompt, plan, tool call, events) and what it costs the call around it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import tracemalloc
from typing import Any, NamedTuple

from subagents import events as ev
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import AgentInput, AgentToolContext, AgentToolResult
from subagents.channels import CollectingOutputChannel
from subagents.config.sub_agent import AgentConfiguration
from subagents.llm import ModelSettings, build_model
from subagents.logs import configure_logging
from subagents.testing import FakeModelServer

RUNS = 40
CPU_RUNS = 200
"""Runs whose CPU time is measured (more than RUNS: CPU time of a few runs is noisy)."""
ROUNDS = 10
"""The CPU figures alternate in this many rounds (agent, model alone, raw client)."""
STEPS = 5


class Bench(MCPOpenAgent):
    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        def noop(arguments: dict[str, Any], context: AgentToolContext) -> AgentToolResult:
            return AgentToolResult(tool_name="noop", result="ok")

        return [{"type": "function", "function": {"name": "noop", "description": "Do nothing.",
                                                  "parameters": {"type": "object",
                                                                 "properties": {}}},
                 "tool_executor": noop, "read_only": True}]


def script() -> list[Any]:
    steps: list[Any] = [{"text": "Working.", "tool_calls": [{"noop": {}}]}
                        for _ in range(STEPS - 1)]
    return [*steps, {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]


async def _runs(agent: Bench, fake: FakeModelServer, count: int) -> list[float]:
    history = [ev.user_uttered(f"message {i}") for i in range(10)]
    per_step = []
    for _ in range(count):
        fake.add("bench", script())
        before = len(fake.requests)
        inp = AgentInput(id="bench", user_message="go", events=list(history),
                         recipient_id="u", metadata={"sender_id": "u"})
        start = time.perf_counter()
        output = await agent.run(inp, CollectingOutputChannel())
        wall = (time.perf_counter() - start) * 1000
        assert output.status.value == "completed", output
        server = sum(r.handled_ms for r in fake.requests[before:])
        per_step.append((wall - server) / STEPS)
    return per_step


async def _raw_floor(fake: FakeModelServer, bodies: list[dict[str, Any]], count: int
                     ) -> list[float]:
    """Per call: wall minus fake-server time of posting ``bodies`` with a bare JSON client."""
    import aiohttp

    url = fake.base_url("bench") + "/chat/completions"
    headers = {"Authorization": "Bearer x", "Content-Type": "application/json"}
    per_call = []
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            fake.add("bench", script())
            before = len(fake.requests)
            start = time.perf_counter()
            for body in bodies:
                async with session.post(url, data=json.dumps(body).encode(),
                                        headers=headers) as response:
                    reply = json.loads(await response.read())
                assert reply["choices"][0]["message"]["tool_calls"]
            wall = (time.perf_counter() - start) * 1000
            server = sum(r.handled_ms for r in fake.requests[before:])
            per_call.append((wall - server) / len(bodies))
    return per_call


_CHILD = """
import asyncio, json, sys
from subagents.testing import FakeModelServer

async def main():
    async with FakeModelServer({"bench": json.loads(sys.argv[1]) * int(sys.argv[2])}) as fake:
        print(fake.base_url("bench"), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


class Cpu(NamedTuple):
    """CPU ms of this process per agent step, per call of the agent's model alone and per raw
    aiohttp call, each the median of the rounds, and the per-round ratios agent / raw."""

    agent: list[float]
    client: list[float]
    raw: list[float]

    def ratios(self) -> list[float]:
        """Agent step / raw call, per round."""
        return [a / r for a, r in zip(self.agent, self.raw, strict=True)]


async def _cpu_per_step(bodies: list[dict[str, Any]]) -> Cpu:
    """CPU ms of this process per agent step, per model call of the agent's model alone and
    per raw aiohttp call, fake model in a child. The three alternate in rounds of
    ``CPU_RUNS // ROUNDS`` runs, so a change in the machine's load touches all three alike."""
    import aiohttp

    per_round = CPU_RUNS // ROUNDS
    runs = 3 + per_round * ROUNDS
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, json.dumps(script()), str(runs * 4),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env={**os.environ})
    assert proc.stdout is not None
    assert proc.stdin is not None
    base = (await proc.stdout.readline()).decode().strip()
    cpu = Cpu([], [], [])
    try:
        llm = build_model(ModelSettings(model="m", api_base=base, max_retries=0), name="bench")
        agent = Bench("bench", "benchmark", llm=llm,
                      configuration=AgentConfiguration(include_date_time=False))
        history = [ev.user_uttered(f"message {i}") for i in range(10)]
        headers = {"Authorization": "Bearer x", "Content-Type": "application/json"}

        async def agent_runs(count: int) -> None:
            for _ in range(count):
                inp = AgentInput(id="bench", user_message="go", events=list(history),
                                 recipient_id="u", metadata={"sender_id": "u"})
                output = await agent.run(inp, CollectingOutputChannel())
                assert output.status.value == "completed", output

        async def client_runs(count: int) -> None:
            for _ in range(count):
                for body in bodies:
                    reply = await llm.complete(body["messages"], body.get("tools"))
                    assert reply.tool_calls

        async with aiohttp.ClientSession() as session:
            async def raw_runs(count: int) -> None:
                for _ in range(count):
                    for body in bodies:
                        async with session.post(base + "/chat/completions",
                                                data=json.dumps(body).encode(),
                                                headers=headers) as response:
                            reply = json.loads(await response.read())
                        assert reply["choices"][0]["message"]["tool_calls"]

            measured = ((agent_runs, cpu.agent), (client_runs, cpu.client),
                        (raw_runs, cpu.raw))
            for runner, _ in measured:
                await runner(1)  # warm-up: imports, connection pools
            for _ in range(ROUNDS):
                for runner, figures in measured:
                    start = time.process_time()
                    await runner(per_round)
                    figures.append((time.process_time() - start) * 1000 / (per_round * STEPS))
        await agent.disconnect()
    finally:
        proc.stdin.close()
        await proc.wait()
    return cpu


def _spread(values: list[float], unit: str = " ms", digits: int = 3) -> str:
    return (f"median {statistics.median(values):.{digits}f}{unit} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


async def main() -> None:
    configure_logging("WARNING")
    print("== ReAct loop overhead (5 steps, zero-latency model, in-process tool) ==")
    async with FakeModelServer() as fake:
        llm = build_model(ModelSettings(model="m", api_base=fake.base_url("bench"),
                                        max_retries=0), name="bench")
        agent = Bench("bench", "benchmark", llm=llm,
                      configuration=AgentConfiguration(include_date_time=False))
        await _runs(agent, fake, 3)  # warm-up: imports, connection pool
        per_step = await _runs(agent, fake, RUNS)
        tracemalloc.start()
        await _runs(agent, fake, 5)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        await agent.disconnect()
        bodies = [r.body for r in fake.requests[-STEPS:]]
        await _raw_floor(fake, bodies, 3)
        floor = await _raw_floor(fake, bodies, RUNS)
        fake.assert_done()
    cpu = await _cpu_per_step(bodies)
    print(f"per step (wall minus fake-server time): median {statistics.median(per_step):.2f} ms"
          f", min {min(per_step):.2f} ms, max {max(per_step):.2f} ms  (n={len(per_step)} runs)")
    print(f"raw JSON client floor per call: median {statistics.median(floor):.2f} ms, "
          f"min {min(floor):.2f} ms  -> agent step / floor = "
          f"{statistics.median(per_step) / statistics.median(floor):.2f}x")
    print(f"CPU per step, fake model in a child process ({ROUNDS} alternated rounds; median, "
          f"range): agent {_spread(cpu.agent)}, raw JSON client {_spread(cpu.raw)}  -> agent "
          f"step / floor = {_spread(cpu.ratios(), 'x', 2)}")
    client, agent = statistics.median(cpu.client), statistics.median(cpu.agent)
    print(f"  of which the model call through the agent's model (Model.complete alone, same "
          f"bodies): {_spread(cpu.client)}; the loop's own work and its effect on the call: "
          f"{agent - client:.3f} ms")
    print(f"peak traced Python memory over 5 runs: {peak / 1024 / 1024:.2f} MB")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    # --help describes the benchmark instead of running it
    argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0]).parse_args()
    asyncio.run(main())
