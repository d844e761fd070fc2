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


async def test_every_step_of_a_run_sends_the_system_prompt_of_its_start():
    # the clock is read once per invocation: a prompt that changed with the seconds at every
    # step would make a model server's prompt cache miss from the system prompt on
    from subagents.agents.prompt import conversation
    from subagents.agents.run import Run

    async with FakeModelServer({}) as fake:
        agent = await build_agent(fake, None, configuration={"include_date_time": True})
        try:
            inp = agent_input(metadata={"mocked_datetime": "2030-01-07T10:00:00"})
            run = Run(inp, None)
            first = await conversation(agent, run)
            inp.metadata["mocked_datetime"] = "2030-01-07T10:00:09"  # the clock moved on
            later_step = await conversation(agent, run)
            next_run = await conversation(agent, Run(inp, None))
        finally:
            await close(agent)
    assert "10:00:00" in first[0]["content"]
    assert later_step[0]["content"] == first[0]["content"]
    assert "10:00:09" in next_run[0]["content"]
