"""Remote dependencies that did not answer when the assistant started.

``subagents serve`` starts even when a remote A2A agent or an MCP server does not answer (unless
``--strict-start``): one outage plus a restart must not take the whole assistant down. The
agents that need such a dependency are marked unavailable, which the log says
(``dependency.unavailable``) and ``/health`` reports; a flow that calls one of them gets the
internal-error pattern, as for any failed agent. Each is connected again in the background,
after 1, 2, 5, then every 10 seconds, until it answers (``dependency.available``).

Only "does not answer" is forgiven; a configuration the dependency refuses (a wrong card, bad
credentials, a missing sign-in) still stops the start with its error.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog

from subagents.exceptions import SubagentsError
from subagents.retry import RetryPolicy, retry_call

if TYPE_CHECKING:
    from subagents.agents.protocol import SubAgent
    from subagents.mcp.pool import MCPPool

log = structlog.get_logger("subagents.dialogue")

UNREACHABLE = frozenset({"mcp.connection_failed", "agent.mcp_connection_failed",
                         "agent.a2a.card_unreachable", "agent.a2a.unreachable"})
"""Error codes of a dependency that did not answer (the others are configuration errors)."""
RECONNECT_DELAYS = (1.0, 2.0, 5.0, 10.0)
"""Seconds between attempts to connect an unavailable agent again (the last one repeats)."""


def reconnect_policy(delays: tuple[float, ...] = RECONNECT_DELAYS) -> RetryPolicy:
    """Attempts to connect again until one succeeds, ``delays`` apart (after attempt ``n`` the
    pause is ``delays[n]``, the last one repeating; ``delays[0]`` comes before the first).
    Any failure is worth another attempt: the agent stays marked unavailable meanwhile."""
    return RetryPolicy(attempts=None, retry_on=lambda error: isinstance(error, Exception),
                       delay=lambda n, _error: delays[min(n, len(delays) - 1)])


class _Down:
    """One agent waiting for its dependencies, and the task connecting it again."""

    def __init__(self, agent: SubAgent, code: str, servers: list[str]) -> None:
        self.agent = agent
        self.code = code
        self.servers = servers
        self.task: asyncio.Task[None] | None = None


class Dependencies:
    """The agents whose remote dependencies did not answer, and their reconnection."""

    def __init__(self, pool: MCPPool, *, delays: tuple[float, ...] = RECONNECT_DELAYS) -> None:
        """Args:
            pool: The MCP pool whose shared sessions say which servers did not answer.
            delays: Seconds before each attempt to connect again (the last one repeats).
        """
        self.pool = pool
        self.delays = delays
        self._down: dict[int, _Down] = {}

    @staticmethod
    def unreachable(error: BaseException) -> bool:
        """Whether ``error`` (from an agent's ``connect``) means a dependency did not answer."""
        return isinstance(error, SubagentsError) and error.code in UNREACHABLE

    def mark_down(self, agent: SubAgent, error: SubagentsError) -> None:
        """Record that ``agent`` cannot run until its dependency answers, and start
        connecting it again in the background."""
        servers = [ref.name for ref in getattr(agent, "server_refs", None) or []
                   if not self.pool.connection(ref.name).connected]
        down = _Down(agent, error.code, servers)
        self._down[id(agent)] = down
        log.warning("dependency.unavailable", agent=agent.name, error_code=error.code,
                    a2a_agent=agent.name if agent.protocol_type == "a2a" else None,
                    mcp_servers=servers or None)
        down.task = asyncio.ensure_future(self._reconnect(down))

    async def _reconnect(self, down: _Down) -> None:
        """Connect ``down``'s agent again until it answers (:func:`reconnect_policy`)."""
        tried = 0

        async def attempt() -> None:
            nonlocal tried
            tried += 1
            try:
                await down.agent.connect()
            except SubagentsError as exc:
                log.info("dependency.still_unavailable", agent=down.agent.name,
                         error_code=exc.code, attempt=tried)
                raise
            except Exception as exc:
                log.warning("dependency.reconnect_failed", agent=down.agent.name,
                            error_type=type(exc).__name__, attempt=tried)
                raise

        await asyncio.sleep(self.delays[0])
        await retry_call(attempt, reconnect_policy(self.delays))
        self._down.pop(id(down.agent), None)
        log.warning("dependency.available", agent=down.agent.name, attempts=tried)

    def reason(self, agent_name: str) -> str | None:
        """Why the agent ``agent_name`` cannot run now; None when it can."""
        for down in self._down.values():
            if down.agent.name == agent_name:
                what = f"MCP server(s) {', '.join(down.servers)}" if down.servers \
                    else "its remote agent"
                return f"agent {agent_name!r} is unavailable: {what} did not answer " \
                       f"({down.code}); reconnecting in the background"
        return None

    def report(self) -> dict[str, list[str]] | None:
        """What ``/health`` reports: the unavailable A2A agents and MCP servers, by name;
        None when everything answers."""
        if not self._down:
            return None
        agents = sorted({d.agent.name for d in self._down.values()
                         if d.agent.protocol_type == "a2a"})
        servers = sorted({s for d in self._down.values() for s in d.servers})
        return {"a2a_agents": agents, "mcp_servers": servers}

    async def close(self) -> None:
        """Stop reconnecting."""
        tasks = [d.task for d in self._down.values() if d.task is not None]
        self._down.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
