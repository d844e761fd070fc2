"""A model that never sends anything usable (malformed tool arguments, empty bodies) does not
leave the user without an answer: after a few tries the agent says so in a fixed reply and
waits for the user's next message."""

from __future__ import annotations

import anyio
import pytest
from subagents.agents.engine import MAX_UNUSABLE_REPLIES, NO_ANSWER
from subagents.agents.open_agent import MCPOpenAgent
from subagents.agents.schemas import AgentStatus
from subagents.agents.task_agent import MCPTaskAgent
from subagents.testing import FakeModelServer

from tests.agent_harness import IN_MEMORY, TimedChannel, agent_input, build_agent, close, kinds

MALFORMED = {"tool_calls": [{"name": "echo", "arguments": "{\"text\": oops"}]}
EMPTY = {"text": ""}


async def run_agent(script, *, cls=MCPOpenAgent, **kw):
    channel = TimedChannel()
    async with FakeModelServer({"weather_agent": script}) as fake:
        agent = await build_agent(fake, IN_MEMORY, cls=cls, **kw)
        try:
            with anyio.fail_after(30):
                output = await agent.run(agent_input(**kw.pop("input", {})), channel)
        finally:
            await close(agent)
        fake.assert_done()
    return output, channel, fake


@pytest.mark.parametrize("reply", [MALFORMED, EMPTY], ids=["malformed", "empty"])
@pytest.mark.parametrize("cls", [MCPOpenAgent, MCPTaskAgent], ids=["open", "task"])
async def test_a_model_that_never_answers_usably_ends_with_a_defined_reply(reply, cls):
    output, channel, fake = await run_agent([reply] * MAX_UNUSABLE_REPLIES, cls=cls)
    assert len(fake.requests) == MAX_UNUSABLE_REPLIES  # not every step of the run
    assert (output.status, output.exit_reason) == (AgentStatus.INPUT_REQUIRED, "no_answer")
    assert channel.texts == [NO_ANSWER]
    assert kinds(output.events) == ["bot:input_required"]
    assert output.events[0]["text"] == NO_ANSWER


async def test_a_usable_reply_in_between_starts_the_count_again():
    script = [MALFORMED, MALFORMED, {"tool_calls": [{"echo": {"text": "x"}}]},
              MALFORMED, "Here it is."]
    output, channel, _ = await run_agent(script)
    assert output.status == AgentStatus.INPUT_REQUIRED
    assert channel.texts == ["Here it is."]


async def test_an_empty_closing_reply_at_the_step_limit_gets_the_defined_reply():
    script = [{"tool_calls": [{"echo": {"text": "1"}}]}, EMPTY]
    output, channel, _ = await run_agent(script, configuration={"max_agent_steps": 1})
    assert output.exit_reason == "max_steps"
    assert channel.texts == [NO_ANSWER]
    assert kinds(output.events) == ["tool:echo", "bot:final_response"]
