"""Resume and restart context reaches the model."""

from __future__ import annotations

import anyio
from subagents import events as ev
from subagents.testing import FakeModelServer

from tests.agent_harness import TimedChannel, agent_input, build_agent, close


async def first_request(inp, **kw):
    async with FakeModelServer({"weather_agent": ["ok"]}) as fake:
        agent = await build_agent(fake, None, **kw)
        try:
            with anyio.fail_after(30):
                await agent.run(inp, TimedChannel())
        finally:
            await close(agent)
        return fake.requests[0]


async def test_a_resumed_agent_is_told_its_pending_question():
    inp = agent_input("Continue", metadata={"resumed_after_interruption": True,
                                            "agent_response": "Which city?"})
    request = await first_request(inp)
    assert "Back after an interruption" in request.system_text
    assert 'You had asked: "Which city?"' in request.system_text


async def test_a_restarted_agent_sees_its_previous_run_marked():
    history = [
        ev.user_uttered("book a table"),
        ev.agent_event("agent_started", "weather_agent", "f"),
        ev.bot_uttered("Which city?"),
        ev.user_uttered("Berlin"),
        ev.bot_uttered("Booked in Berlin."),
        ev.agent_event("agent_completed", "weather_agent", "f", status="completed"),
        ev.bot_uttered("Anything else?"),
    ]
    request = await first_request(agent_input("restart it", history=history,
                                              metadata={"restarted": True}))
    contents = [m["content"] for m in request.messages[1:]]
    assert contents[0] == "book a table"
    assert contents[1] == "--- Previous run (completed). ---\nWhich city?"
    assert contents[3] == "Booked in Berlin.\n--- End of previous run ---"
    assert contents[4] == "Anything else?"
    assert "Starting over" in request.system_text
