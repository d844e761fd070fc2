"""MCP sessions of the process.

A ``shared`` server (the default) has one session per process, which every agent and
conversation uses. A server declared ``session: per_conversation`` or ``session: {per_user:
...}`` gets one session per conversation (or user) on top of that: the shared one only lists the
server's tools (without the templated headers), and every tool call goes through the caller's
own session, opened with the caller's credentials. These sessions are pooled: one that was not
used for ``session_idle_timeout`` seconds is closed (checked whenever a session is requested),
and at ``max_sessions`` open sessions the least recently used idle one is closed to make room.
When the credentials of a conversation change, its session is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.exceptions import MCPConnectionError
from subagents.mcp.callbacks import ElicitationRegistry
from subagents.mcp.connection import MCPServerConnection
from subagents.mcp.oauth.consent import ConsentRegistry
from subagents.mcp.oauth.token_store import TokenStore, token_store

log = structlog.get_logger("subagents.mcp")


@dataclass
class _Keyed:
    """One per-conversation / per-user session."""

    conn: MCPServerConnection
    fingerprint: str
    last_used: float
    busy: int = 0
    retired: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class MCPPool:
    """The process's MCP sessions: shared ones by server name, keyed ones by (server, key)."""

    def __init__(self, endpoints: EndpointsConfig, *, root: Path | None = None,
                 tokens_url: str | None = None) -> None:
        """Args:
            endpoints: The MCP servers (and their session modes).
            root: The project folder (roots, stdio working directories, logins).
            tokens_url: The tracker store's database, where users' OAuth tokens are kept
                (``oauth.per_user``); None keeps them in memory.
        """
        self.endpoints = endpoints
        self.root = root
        self.tokens_url = tokens_url
        self._tokens: TokenStore | None = None
        self._connections: dict[str, MCPServerConnection] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._keyed: dict[tuple[str, str], _Keyed] = {}
        self._keyed_lock = asyncio.Lock()
        self.elicitations = ElicitationRegistry()
        """The calls of this pool's sessions that wait for a user's answer."""
        self.consents = ConsentRegistry()
        """The users' sign-in links of this pool's sessions that wait for the browser."""

    def _config(self, name: str) -> McpServerConfig:
        config = self.endpoints.mcp_server(name)
        if config is None:
            raise MCPConnectionError(f"MCP server {name!r} is not defined in endpoints.yml",
                                     code="mcp.unknown_server")
        return config

    def connection(self, name: str) -> MCPServerConnection:
        """The shared session of ``name`` (created, not yet connected, on first use).

        Raises:
            MCPConnectionError: ``mcp.unknown_server`` when endpoints.yml does not define it.
        """
        conn = self._connections.get(name)
        if conn is None:
            conn = self._new_connection(self._config(name), None)
            self._connections[name] = conn
        return conn

    def _new_connection(self, config: McpServerConfig, values: Mapping[str, str] | None,
                        key: str | None = None) -> MCPServerConnection:
        user = None
        if key is not None and config.oauth is not None and config.oauth.per_user:
            user = key.removeprefix("user:")
            if self._tokens is None:
                self._tokens = token_store(self.tokens_url)
        return MCPServerConnection(config, root=self.root, endpoints=self.endpoints,
                                   elicitations=self.elicitations, consents=self.consents,
                                   template_values=values, oauth_user=user, tokens=self._tokens)

    async def start(self, name: str, *, attempts: int = 5, agent: str | None = None) -> None:
        """Connect ``name`` once; concurrent callers wait for the same attempt."""
        conn = self.connection(name)
        if conn.connected:
            return
        task = self._starting.get(name)
        if task is None or task.done():
            task = asyncio.ensure_future(conn.start(attempts, agent=agent))
            self._starting[name] = task
        await asyncio.shield(task)

    # ------------------------------------------------------------------ keyed sessions
    def keyed_sessions(self, name: str) -> int:
        """How many per-conversation / per-user sessions of ``name`` are open."""
        return sum(1 for (server, _), entry in self._keyed.items()
                   if server == name and not entry.retired)

    @contextlib.asynccontextmanager
    async def session(self, name: str, key: str,
                      values: Mapping[str, str]) -> AsyncIterator[MCPServerConnection]:
        """The session of ``name`` for ``key`` (a conversation or a user), opened with the
        template ``values`` (the caller's credentials) and held for the duration."""
        config = self._config(name)
        fingerprint = _fingerprint(values)
        async with self._keyed_lock:
            closing = self._reap(config, time.monotonic())
            entry = self._keyed.get((name, key))
            if entry is not None and entry.fingerprint != fingerprint:
                # new credentials for the same conversation: never reuse the old session
                entry.retired = True
                del self._keyed[(name, key)]
                if entry.busy == 0:
                    closing.append(entry.conn)
                entry = None
            if entry is None:
                closing += self._make_room(config)
                entry = _Keyed(self._new_connection(config, dict(values), key), fingerprint,
                               time.monotonic())
                self._keyed[(name, key)] = entry
            entry.busy += 1
        await _close_all(closing)
        try:
            async with entry.lock:
                if not entry.conn.connected:
                    await entry.conn.start(attempts=2, base_delay=0.1)
            yield entry.conn
        finally:
            entry.busy -= 1
            entry.last_used = time.monotonic()
            if entry.retired and entry.busy == 0:
                await entry.conn.close()

    def _reap(self, config: McpServerConfig, now: float) -> list[MCPServerConnection]:
        """Take idle sessions of ``config``'s server out of the pool (closed by the caller)."""
        out = []
        for slot, entry in list(self._keyed.items()):
            if slot[0] == config.name and entry.busy == 0 \
                    and now - entry.last_used >= config.session_idle_timeout:
                del self._keyed[slot]
                out.append(entry.conn)
        if out:
            log.info("mcp.sessions.idle_closed", server=config.name, count=len(out))
        return out

    def _make_room(self, config: McpServerConfig) -> list[MCPServerConnection]:
        """Free a place for one more session of the server (least recently used idle first)."""
        mine = sorted(((slot, entry) for slot, entry in self._keyed.items()
                       if slot[0] == config.name), key=lambda item: item[1].last_used)
        out = []
        excess = len(mine) - config.max_sessions + 1
        for slot, entry in mine:
            if excess <= 0:
                break
            if entry.busy == 0:
                del self._keyed[slot]
                out.append(entry.conn)
                excess -= 1
        if excess > 0:
            raise MCPConnectionError(
                f"MCP server {config.name!r} has {config.max_sessions} sessions in use "
                "(max_sessions); try again shortly", code="mcp.sessions_exhausted")
        return out

    async def close(self) -> None:
        """Close every session."""
        keyed = [entry.conn for entry in self._keyed.values()]
        self._keyed.clear()
        await _close_all([*self._connections.values(), *keyed])
        self._connections.clear()
        tokens, self._tokens = self._tokens, None
        if tokens is not None:
            await tokens.close()


def _fingerprint(values: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(values):
        digest.update(name.encode() + b"\0" + values[name].encode() + b"\0")
    return digest.hexdigest()


async def _close_all(conns: list[MCPServerConnection]) -> None:
    await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
