"""An agent whose dependency did not answer at start is connected again in the background,
after 1, 2, 5, then every 10 seconds, until it answers (``dialogue/dependencies.py``)."""

from __future__ import annotations

import asyncio

import anyio
from structlog.testing import capture_logs
from subagents.config.endpoints import EndpointsConfig
from subagents.dialogue.dependencies import RECONNECT_DELAYS, Dependencies, reconnect_policy
from subagents.exceptions import SubagentsError
from subagents.mcp.pool import MCPPool


class LateAgent:
    """An A2A agent whose remote end answers from the ``answers_at``-th connect on; one
    failure on the way is not one of ours (a bug, say): reconnecting goes on regardless."""

    protocol_type = "a2a"
    server_refs = None

    def __init__(self, answers_at: int) -> None:
        self.name = "insurer"
        self.answers_at = answers_at
        self.connects = 0
        self.third = asyncio.Event()

    async def connect(self) -> None:
        self.connects += 1
        if self.connects == 3:
            self.third.set()
        if self.connects == 2:
            raise RuntimeError("not ours")
        if self.connects < self.answers_at:
            raise SubagentsError("no answer", code="agent.a2a.card_unreachable")


async def test_an_unavailable_agent_is_connected_again_until_it_answers():
    pool = MCPPool(EndpointsConfig())
    dependencies = Dependencies(pool, delays=(0.001, 0.002, 0.005))
    agent = LateAgent(answers_at=6)
    with capture_logs() as logs, anyio.fail_after(20):
        dependencies.mark_down(agent, SubagentsError("no answer",
                                                     code="agent.a2a.card_unreachable"))
        assert dependencies.reason("insurer") is not None
        assert dependencies.report() == {"a2a_agents": ["insurer"], "mcp_servers": []}
        task = dependencies._down[id(agent)].task
        assert task is not None
        await task
    assert agent.connects == 6
    assert dependencies.reason("insurer") is None
    assert dependencies.report() is None
    events = [(e["event"], e.get("attempt", e.get("attempts"))) for e in logs
              if e["event"].startswith("dependency.")]
    assert events == [("dependency.unavailable", None), ("dependency.still_unavailable", 1),
                      ("dependency.reconnect_failed", 2), ("dependency.still_unavailable", 3),
                      ("dependency.still_unavailable", 4), ("dependency.still_unavailable", 5),
                      ("dependency.available", 6)]
    assert [e.get("error_code") for e in logs if e["event"] == "dependency.still_unavailable"] \
        == ["agent.a2a.card_unreachable"] * 4
    await dependencies.close()
    await pool.close()


def test_the_pauses_between_attempts_are_1_2_5_then_every_10_seconds():
    policy = reconnect_policy()
    error = SubagentsError("no answer")
    assert RECONNECT_DELAYS[0] == 1.0  # before the first attempt
    assert [policy.delay(n, error) for n in range(1, 7)] == [2.0, 5.0, 10.0, 10.0, 10.0, 10.0]
    assert policy.attempts is None
    assert policy.retry_on(RuntimeError("any failure"))


async def test_closing_stops_the_reconnection():
    pool = MCPPool(EndpointsConfig())
    dependencies = Dependencies(pool, delays=(0.001,))
    agent = LateAgent(answers_at=10**9)
    dependencies.mark_down(agent, SubagentsError("no answer",
                                                 code="agent.a2a.card_unreachable"))
    task = dependencies._down[id(agent)].task
    assert task is not None
    with anyio.fail_after(10):
        await agent.third.wait()
        await dependencies.close()
    assert task.cancelled()
    assert dependencies.report() is None
    await pool.close()
