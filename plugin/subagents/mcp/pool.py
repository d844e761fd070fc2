"""One shared connection per MCP server per process (agents share it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..config.endpoints import EndpointsConfig
from ..exceptions import MCPConnectionError
from .connection import MCPServerConnection


class MCPPool:
    """One shared connection per MCP server defined in endpoints.yml."""

    def __init__(self, endpoints: EndpointsConfig, *, root: Path | None = None) -> None:
        self.endpoints = endpoints
        self.root = root
        self._connections: dict[str, MCPServerConnection] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}

    def connection(self, name: str) -> MCPServerConnection:
        """The connection to server ``name``, created (not yet opened) on first use.

        Raises:
            MCPConnectionError: ``mcp.unknown_server`` when endpoints.yml does not define it.
        """
        conn = self._connections.get(name)
        if conn is None:
            config = self.endpoints.mcp_server(name)
            if config is None:
                raise MCPConnectionError(f"MCP server {name!r} is not defined in endpoints.yml",
                                         code="mcp.unknown_server")
            conn = MCPServerConnection(config, root=self.root, endpoints=self.endpoints)
            self._connections[name] = conn
        return conn

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

    async def close(self) -> None:
        """Close every connection."""
        await asyncio.gather(*(c.close() for c in self._connections.values()),
                             return_exceptions=True)
        self._connections.clear()
