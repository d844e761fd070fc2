"""Users' OAuth tokens for MCP servers, per (user, server), encrypted at rest.

The tokens live in the tracker store's database (table ``subagents_mcp_oauth``), SQLite or
PostgreSQL, or in memory beside an in-memory tracker store. Every value is sealed with Fernet
(AES-128-CBC with an HMAC) under the key(s) in ``SUBAGENTS_OAUTH_TOKEN_KEY``: the first key
encrypts, every listed key decrypts, so a key can be rotated by putting the new one first. A
value that no key opens (a wrong key, a tampered row) reads as absent: the user is asked for
consent again. Values are never logged.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

from subagents.config.mcp_oauth import TOKEN_KEY_ENV, token_key_problem
from subagents.exceptions import MCPConnectionError

log = structlog.get_logger("subagents.mcp")

SHARED = ""
"""The user key of values every user shares (the client registration of a server)."""


class TokenCipher:
    """Seals and opens stored values with the keys of ``SUBAGENTS_OAUTH_TOKEN_KEY``."""

    def __init__(self, keys: str | None = None) -> None:
        raw = keys if keys is not None else os.environ.get(TOKEN_KEY_ENV, "")
        if keys is None and (problem := token_key_problem()) is not None:
            raise MCPConnectionError(problem[1], code=problem[0])
        from cryptography.fernet import Fernet, MultiFernet

        self._fernet = MultiFernet([Fernet(k.strip().encode()) for k in raw.split(",")
                                    if k.strip()])

    def seal(self, value: dict[str, Any]) -> str:
        """``value`` as an encrypted, url-safe text."""
        return self._fernet.encrypt(json.dumps(value).encode()).decode()

    def open(self, sealed: str) -> dict[str, Any] | None:
        """The value sealed in ``sealed``; None when no key opens it."""
        from cryptography.fernet import InvalidToken

        try:
            value = json.loads(self._fernet.decrypt(sealed.encode()))
        except (InvalidToken, ValueError):
            log.warning("mcp.oauth.token_unreadable")
            return None
        return value if isinstance(value, dict) else None


class TokenStore:
    """Sealed values by (user, server, kind); kinds are ``tokens`` and ``client``."""

    def __init__(self, cipher: TokenCipher | None = None) -> None:
        self._cipher = cipher
        self._lock = asyncio.Lock()

    @property
    def cipher(self) -> TokenCipher:
        """The cipher, created (and the key checked) on first use."""
        if self._cipher is None:
            self._cipher = TokenCipher()
        return self._cipher

    async def get(self, user: str, server: str, kind: str) -> dict[str, Any] | None:
        """The value stored for ``(user, server, kind)``, or None."""
        sealed = await self._read(user, server, kind)
        return self.cipher.open(sealed) if sealed is not None else None

    async def put(self, user: str, server: str, kind: str, value: dict[str, Any]) -> None:
        """Store (or replace) a value."""
        await self._write(user, server, kind, self.cipher.seal(value))

    async def delete(self, user: str, server: str) -> None:
        """Forget everything stored for ``user`` at ``server``."""
        await self._remove(user, server)

    async def _read(self, user: str, server: str, kind: str) -> str | None:
        raise NotImplementedError

    async def _write(self, user: str, server: str, kind: str, sealed: str) -> None:
        raise NotImplementedError

    async def _remove(self, user: str, server: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        """Release the database connections."""


class MemoryTokenStore(TokenStore):
    """Kept for the life of the process (beside an in-memory tracker store)."""

    def __init__(self, cipher: TokenCipher | None = None) -> None:
        super().__init__(cipher)
        self._rows: dict[tuple[str, str, str], str] = {}

    async def _read(self, user: str, server: str, kind: str) -> str | None:
        return self._rows.get((user, server, kind))

    async def _write(self, user: str, server: str, kind: str, sealed: str) -> None:
        self._rows[(user, server, kind)] = sealed

    async def _remove(self, user: str, server: str) -> None:
        for row in [r for r in self._rows if r[:2] == (user, server)]:
            del self._rows[row]


class SQLTokenStore(TokenStore):
    """Table ``subagents_mcp_oauth`` in an SQLAlchemy database (SQLite or PostgreSQL)."""

    def __init__(self, url: str, cipher: TokenCipher | None = None) -> None:
        from sqlalchemy import Column, Float, MetaData, PrimaryKeyConstraint, String, Table, Text

        super().__init__(cipher)
        self.url = url
        self._engine: Any = None
        self._ready = False
        self._write_lock = asyncio.Lock()
        self.meta = MetaData()
        self.table = Table(
            "subagents_mcp_oauth", self.meta,
            Column("user_key", String(255), nullable=False),
            Column("server", String(255), nullable=False),
            Column("kind", String(32), nullable=False),
            Column("data", Text, nullable=False),
            Column("updated_at", Float, nullable=False),
            PrimaryKeyConstraint("user_key", "server", "kind"))

    async def _conn(self) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        if self._engine is None:
            if self.url.startswith("sqlite"):
                path = self.url.split(":///", 1)[-1]
                if path and path != ":memory:":
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                self._engine = create_async_engine(self.url, hide_parameters=True,
                                                   connect_args={"timeout": 30})
            else:
                self._engine = create_async_engine(self.url, hide_parameters=True,
                                                   pool_size=2, max_overflow=4)
        if not self._ready:
            async with self._lock:
                if not self._ready:
                    async with self._engine.begin() as conn:
                        await conn.run_sync(self.meta.create_all)
                    self._ready = True
        return self._engine

    async def _read(self, user: str, server: str, kind: str) -> str | None:
        from sqlalchemy import select

        engine = await self._conn()
        t = self.table
        async with engine.connect() as conn:
            row = (await conn.execute(select(t.c.data).where(
                t.c.user_key == user, t.c.server == server, t.c.kind == kind))).first()
        return str(row[0]) if row is not None else None

    async def _write(self, user: str, server: str, kind: str, sealed: str) -> None:
        from sqlalchemy import delete, insert

        engine = await self._conn()
        t = self.table
        async with self._write_lock, engine.begin() as conn:
            await conn.execute(delete(t).where(t.c.user_key == user, t.c.server == server,
                                               t.c.kind == kind))
            await conn.execute(insert(t).values(user_key=user, server=server, kind=kind,
                                                data=sealed, updated_at=time.time()))

    async def _remove(self, user: str, server: str) -> None:
        from sqlalchemy import delete

        engine = await self._conn()
        t = self.table
        async with engine.begin() as conn:
            await conn.execute(delete(t).where(t.c.user_key == user, t.c.server == server))

    async def close(self) -> None:
        """Dispose of the engine (it is created again on the next use)."""
        engine, self._engine = self._engine, None
        self._ready = False
        if engine is not None:
            await engine.dispose()


def token_store(database_url: str | None) -> TokenStore:
    """The store beside the tracker store: in its SQL database, or in memory without one."""
    if database_url:
        return SQLTokenStore(database_url)
    return MemoryTokenStore()
