"""What reaching a provider through LiteLLM costs against the direct way (needs the
``providers`` extra; not part of ``make bench``): ``python benchmarks/bench_providers.py``.

* the import: ``subagents.llm`` alone, then LiteLLM (CPU, peak RSS, modules), each in a fresh
  process;
* one call: the same Mistral stand-in on 127.0.0.1 (``tests/servers/providers``) called the
  direct way (our OpenAI-compatible client) and through LiteLLM, plain and streamed: median
  wall time and CPU per call in this process (the stand-in runs in it too, the same for both).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from subagents.llm import ModelSettings  # noqa: E402
from subagents.llm.litellm_model import LiteLLMModel, load_litellm  # noqa: E402
from subagents.llm.openai_compat import OpenAICompatibleModel  # noqa: E402

from tests.servers.providers import MistralServer  # noqa: E402

IMPORT = ("import resource, sys, time; t = time.process_time(); {stmt}; "
          "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
          "print((time.process_time() - t) * 1000, int(hwm.split()[1]) / 1024, len(sys.modules))")
CALLS = 40
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def measure_import(stmt: str, runs: int = 3) -> tuple[float, float, int]:
    cpu, rss, modules = [], [], 0
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", IMPORT.format(stmt=stmt)], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
        cpu.append(float(out[0]))
        rss.append(float(out[1]))
        modules = int(out[2])
    return statistics.median(cpu), max(rss), modules


async def per_call(model: Any, stream: bool) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(CALLS):
        wall, cpu = time.perf_counter(), time.process_time()
        await model.complete(MESSAGES, None, stream=stream)
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls[2:]), statistics.median(cpus[2:])  # warm calls only


async def calls() -> None:
    await load_litellm()
    for stream in (False, True):
        async with MistralServer(["It is sunny in Paris today."] * (CALLS * 2)) as server:
            settings = ModelSettings.from_mapping({
                "provider": "mistral", "model": "mistral-small-latest",
                "api_base": f"{server.base_url}/v1", "api_key": "bench", "max_retries": 0})
            for label, model in (("direct", OpenAICompatibleModel(settings)),
                                 ("LiteLLM", LiteLLMModel(settings))):
                wall, cpu = await per_call(model, stream)
                await model.close()
                kind = "streamed" if stream else "plain"
                print(f"{kind:8s} call, {label:8s} median {wall:7.1f} ms wall, "
                      f"{cpu:6.1f} ms CPU")


def main() -> None:
    logging.disable(logging.INFO)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print("== providers: import ==")
    for label, stmt in (("import subagents.llm", "import subagents.llm"),
                        ("+ import litellm (offline)",
                         "import asyncio, subagents.llm.litellm_model as m; "
                         "asyncio.run(m.load_litellm())")):
        cpu, rss, modules = measure_import(stmt)
        print(f"{label:28s} {cpu:7.0f} ms CPU   peak RSS {rss:6.1f} MB   {modules} modules")
    print("== providers: one call to the Mistral stand-in ==")
    asyncio.run(calls())


if __name__ == "__main__":
    main()
