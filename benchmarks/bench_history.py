"""Long conversations: what a turn costs as a conversation's history grows.

Every turn loads the conversation and hands all its events to the sub agent it calls (as the
reference does), so part of a turn grows with the history. A small assistant (one flow that
calls a general-purpose agent, which answers and completes) runs on the SQLite tracker store;
conversations are seeded with 500 to 5,000 events copied from real turns, then each takes 20
more turns. The figure is this process's CPU per turn; the fake model runs in this process
too, so about the same fixed share of every figure is the model's. The growth is what to read.
The last lines time the copy of the agent's input events that every agent attempt makes.

The garbage collector is set up as ``subagents serve`` sets it (the start-up heap frozen, the
youngest generation collected every 50,000 allocations); ``--python-gc`` keeps Python's own
thresholds, as a program that runs the assistant itself without them would have.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

from _common import machine
from subagents.agents._copying import fast_copy, json_copy
from subagents.channels import CollectingOutputChannel
from subagents.dialogue.processor import Assistant
from subagents.logs import configure_logging
from subagents.server.app import settle_heap
from subagents.stores.sql import SQLTrackerStore
from subagents.testing import FakeModelServer

SIZES = (500, 2000, 5000)
TURNS = 20
FILES = {
    "config.yml": """
        assistant_id: history
        pipeline:
          - name: CompactLLMCommandGenerator
            llm: {model_group: llm}
        """,
    "endpoints.yml": """
        model_groups:
          - id: llm
            models: [{provider: openai, model: gpt-test}]
        """,
    "data/flows.yml": """
        flows:
          help_flow:
            description: help
            steps:
              - call: helper
              - action: utter_helped
        """,
    "data/domain.yml": """
        responses:
          utter_helped: [{text: "Glad to help."}]
        """,
    "sub_agents/helper/config.yml": """
        agent: {name: helper, description: Helps.}
        configuration: {include_date_time: false}
        """,
}
SEED_TURNS = 10


def _project(root: Path) -> Path:
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


async def _say(assistant: Assistant, sender: str) -> None:
    channel = CollectingOutputChannel()
    await assistant.handle_message(sender, "help", None, channel)
    assert "Glad to help." in channel.texts, channel.texts


async def main(python_gc: bool = False) -> None:
    configure_logging("WARNING")
    print("== Long conversations: CPU per turn as the history grows (SQLite store, "
          f"{'Python' if python_gc else 'serve'}'s collector thresholds) ==")
    turns = SEED_TURNS + len(SIZES) * TURNS
    script = {"command_generator": ["start flow help_flow"] * turns,
              "helper": [{"text": "Here you are.", "tool_calls": [{"task_completed": {}}]}]
              * turns}
    with tempfile.TemporaryDirectory() as tmp:
        root = _project(Path(tmp) / "assistant")
        store = SQLTrackerStore(f"sqlite+aiosqlite:///{root}/history.db")
        async with FakeModelServer(script) as fake:
            assistant = Assistant.load(root, llm_factory=fake.llm_factory(),
                                       tracker_store=store)
            async with assistant:
                thresholds = gc.get_threshold()
                if not python_gc:
                    settle_heap()
                for _ in range(SEED_TURNS):
                    await _say(assistant, "seed")
                seed = (await store.load("seed")).events
                for size in SIZES:
                    sender = f"history-{size}"
                    history = [json_copy(seed[i % len(seed)]) for i in range(size)]
                    await store.save_turn(sender, history, [], 0)
                    start = time.process_time()
                    for _ in range(TURNS):
                        await _say(assistant, sender)
                    per_turn = (time.process_time() - start) * 1000 / TURNS
                    print(f"{size:>5} events of history: {per_turn:6.2f} ms CPU per turn "
                          f"(n={TURNS} turns)")
            events = (await store.load("history-5000")).events[:5000]
    copies: dict[str, list[float]] = {"the agent's copy": [], "copied by type": []}
    for _ in range(10):  # alternated, the median of each: a collection lands on either
        for name, copy in (("the agent's copy", fast_copy), ("copied by type", json_copy)):
            start = time.process_time()
            for _ in range(5):
                copy(events)
            copies[name].append((time.process_time() - start) * 1000 / 5)
    for name, figures in copies.items():
        print(f"copy of an agent's 5,000 input events (each agent attempt makes one), {name}: "
              f"median {statistics.median(figures):.2f} ms CPU")
    if not python_gc:  # as it was (run.py runs other benchmarks in this process)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--python-gc", action="store_true",
                        help="keep Python's collector thresholds (default: serve's)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    asyncio.run(main(args.python_gc))
