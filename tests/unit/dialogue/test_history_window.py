"""A turn reads the snapshot and the window; what it reads there is what the whole history says.

Random conversations are stored turn by turn as the processor stores them (the snapshot
brought forward, the window moved); then everything a turn or an agent works out from the
window and the snapshot is compared with what the whole history gives.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from subagents import events as ev
from subagents.agents.transcript import history_messages
from subagents.dialogue.history import Earlier, Snapshot, load_conversation
from subagents.dialogue.understanding import completed_agents, transcript
from subagents.llm.usage import conversation_usage
from subagents.recording import turn as recording
from subagents.stores import InMemoryTrackerStore
from subagents.types import AgentInput

AGENTS, FLOWS, SLOTS = ("helper", "booker"), ("help", "book"), ("city", "day", "name")


def random_event(rng: random.Random) -> dict[str, Any]:
    agent, flow = rng.choice(AGENTS), rng.choice(FLOWS)
    kind = rng.choices(["user", "bot", "slot", "restart", "started", "completed", "usage",
                        "switch", "tool", "filler", "flow"],
                       weights=[6, 6, 3, 0.3, 2, 2, 2, 0.3, 2, 1, 2])[0]
    if kind == "user":
        return ev.user_uttered(f"u{rng.randrange(1000)}")
    if kind == "bot":
        return ev.bot_uttered(rng.choice([None, "", f"b{rng.randrange(1000)}"]),
                              metadata={"agent_name": agent})
    if kind == "slot":
        return ev.slot_set(rng.choice(SLOTS), rng.randrange(5))
    if kind == "restart":
        return {"event": "restart"}
    if kind in ("started", "completed"):
        return ev.agent_event(f"agent_{kind}", agent, flow)
    if kind == "usage":
        return ev.action_executed("action_listen", metadata={"usage": {
            rng.choice(["m1", "m2"]): {"calls": 1, "input_tokens": rng.randrange(100),
                                       "output_tokens": rng.randrange(50)}}})
    if kind == "switch":
        return recording.switch_event(rng.random() < 0.5)
    if kind == "tool":
        return ev.mcp_tool_executed("t", {}, "ok", is_error=False, error_message=None,
                                    agent_id=agent)
    if kind == "filler":
        return ev.bot_uttered(f"one moment {rng.randrange(80)}", metadata={
            "agent_name": agent, "agent_message_type": "filler_message"})
    return ev.flow_event("flow_started", flow)


async def stored_turn_by_turn(rng: random.Random, lines: int) -> tuple[Any, list[Any]]:
    """A random conversation saved in random turns; what the next turn would load."""
    store = InMemoryTrackerStore()
    everything: list[dict[str, Any]] = []
    for _ in range(rng.randrange(1, 60)):
        loaded = await load_conversation(store, "s", lines)
        new = [random_event(rng) for _ in range(rng.randrange(1, 12))]
        events = [*loaded.events, *new]
        loaded.snapshot.apply_all(new, loaded.start + len(loaded.events))
        window_start = loaded.snapshot.advance(events, loaded.start)
        await store.save_turn("s", new, [], loaded.record.count,
                              state=loaded.snapshot.to_dict(), window_start=window_start)
        everything += new
    return await load_conversation(store, "s", lines), everything


@pytest.mark.parametrize("seed", range(150))
async def test_the_window_and_the_snapshot_tell_what_the_whole_history_tells(seed):
    rng = random.Random(seed)
    lines = rng.choice([20, 20, 24])
    loaded, everything = await stored_turn_by_turn(rng, lines)
    window, start, snapshot = loaded.events, loaded.start, loaded.snapshot
    whole = Snapshot.of_events(everything, lines)

    assert window == everything[start:]
    # the state
    for name in ("count", "slots", "filled", "agents", "started_in", "completed_in",
                 "recording", "line_positions", "user_positions"):
        assert getattr(snapshot, name) == getattr(whole, name), name
    assert snapshot.completed_agents() == completed_agents(everything)
    # the prompts: the command generator's transcript, the rephraser's, the session checks
    assert transcript(window, lines) == transcript(everything, lines)
    users = [i for i, e in enumerate(everything) if e["event"] == "user"]
    assert start <= (users[-2] if len(users) >= 2 else 0)
    # what the window leaves out adds up to the summary
    earlier = Earlier()
    for event in everything[:start]:
        earlier.fold(event)
    assert snapshot.earlier == earlier
    usage = conversation_usage(window)["models"]
    for model, counts in snapshot.earlier.usage.items():
        for key, value in counts.items():
            usage.setdefault(model, {}).setdefault(key, 0)
            usage[model][key] += value
    assert {m: {k: c[k] for k in ("calls", "input_tokens", "output_tokens")}
            for m, c in usage.items()} == conversation_usage(everything)["models"]
    tools = sum(e["event"] == "mcp_tool_executed" for e in everything)
    assert snapshot.earlier.tool_calls + sum(
        e["event"] == "mcp_tool_executed" for e in window) == tools


@pytest.mark.parametrize("seed", range(150))
async def test_an_agent_sees_the_history_the_whole_conversation_would_give_it(seed):
    rng = random.Random(1000 + seed)
    loaded, everything = await stored_turn_by_turn(rng, 20)
    earlier = loaded.snapshot.earlier.for_agent(loaded.start)
    for agent in AGENTS:
        for restarted in (False, True):
            metadata = {"restarted": True} if restarted else {}
            whole = AgentInput(id=agent, user_message="now", events=everything,
                               metadata=metadata)
            windowed = AgentInput(id=agent, user_message="now", events=loaded.events,
                                  metadata=metadata, earlier=earlier)
            assert history_messages(windowed, agent, 10) == history_messages(whole, agent, 10)


async def test_a_conversation_stored_without_a_snapshot_is_worked_out_from_all_its_events():
    store = InMemoryTrackerStore()
    old = [ev.slot_set("city", "Oslo"), ev.agent_event("agent_completed", "helper", "help"),
           recording.switch_event(True), *(ev.user_uttered(f"u{i}") for i in range(40))]
    await store.save_turn("s", old, [], 0)  # as a version without snapshots stored it
    loaded = await load_conversation(store, "s")
    assert loaded.start == 0
    assert loaded.events == old
    assert loaded.snapshot.slots == {"city": "Oslo"}
    assert loaded.snapshot.recording is True
    assert loaded.snapshot.completed_agents() == ["helper"]


async def test_events_written_after_the_snapshot_are_caught_up_from_the_window():
    store = InMemoryTrackerStore()
    events = [ev.user_uttered(f"u{i}") for i in range(60)]
    first = Snapshot.of_events(events)
    await store.save_turn("s", events, [], 0, state=first.to_dict(),
                          window_start=first.advance(events, 0))
    await store.save_turn("s", [recording.switch_event(True), ev.slot_set("day", "mon")],
                          [], 60)  # no snapshot: the stored one stays, behind by two
    loaded = await load_conversation(store, "s")
    assert loaded.start == 40
    assert loaded.snapshot.count == 62
    assert loaded.snapshot.recording is True
    assert loaded.snapshot.slots == {"day": "mon"}


@pytest.mark.parametrize("broken", [
    {"v": 999}, {"v": 1, "count": "many"}, {"v": 1},
])
async def test_a_snapshot_of_another_format_is_worked_out_again(broken):
    store = InMemoryTrackerStore()
    events = [ev.slot_set("city", "Rome"), *(ev.user_uttered(f"u{i}") for i in range(60))]
    await store.save_turn("s", events, [], 0, state=broken, window_start=50)
    loaded = await load_conversation(store, "s")
    assert loaded.start == 0
    assert len(loaded.events) == 61
    assert loaded.snapshot.slots == {"city": "Rome"}


async def test_a_larger_window_than_the_stored_one_loads_the_whole_history_once():
    store = InMemoryTrackerStore()
    events = [ev.user_uttered(f"u{i}") for i in range(100)]
    snapshot = Snapshot.of_events(events, 20)
    await store.save_turn("s", events, [], 0, state=snapshot.to_dict(),
                          window_start=snapshot.advance(events, 0))
    assert (await load_conversation(store, "s", 20)).start == 80
    wider = await load_conversation(store, "s", 30)  # e.g. max_historical_turns raised
    assert wider.start == 0
    assert wider.snapshot.next_window_start() == 70
