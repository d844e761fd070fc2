"""Users' OAuth tokens at rest: encrypted per (user, server) in SQLite, PostgreSQL or memory;
a key rotation keeps old rows readable; a row no key opens reads as absent.

PostgreSQL tests need SUBAGENTS_TEST_POSTGRES_URL (`.ci/run` starts PostgreSQL).
"""

from __future__ import annotations

import os
import uuid

import pytest
from subagents.exceptions import MCPConnectionError
from subagents.mcp.oauth.token_store import (
    MemoryTokenStore,
    SQLTokenStore,
    TokenCipher,
    TokenStore,
)

fernet = pytest.importorskip("cryptography.fernet")
POSTGRES = os.environ.get("SUBAGENTS_TEST_POSTGRES_URL")


def new_key() -> str:
    return str(fernet.Fernet.generate_key().decode())


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, pytest.mark.skipif(
        not POSTGRES, reason="SUBAGENTS_TEST_POSTGRES_URL is not set (.ci/run starts it)")])])
def url(request, tmp_path):
    if request.param == "memory":
        return None
    return f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}" if request.param == "sqlite" \
        else POSTGRES.replace("postgresql://", "postgresql+asyncpg://", 1)


def make(url: str | None, key: str) -> TokenStore:
    cipher = TokenCipher(key)
    return SQLTokenStore(url, cipher) if url else MemoryTokenStore(cipher)


async def test_values_are_kept_per_user_and_server_and_sealed(url):
    key, user = new_key(), f"u-{uuid.uuid4().hex[:8]}"
    store = make(url, key)
    try:
        await store.put(user, "calendar", "tokens", {"access_token": "secret-a"})
        await store.put(user, "mail", "tokens", {"access_token": "secret-b"})
        await store.put(user, "calendar", "tokens", {"access_token": "secret-c"})  # replaced
        assert await store.get(user, "calendar", "tokens") == {"access_token": "secret-c"}
        assert await store.get(user, "mail", "tokens") == {"access_token": "secret-b"}
        assert await store.get("someone-else", "calendar", "tokens") is None
        sealed = await store._read(user, "calendar", "tokens")
        assert sealed is not None
        assert "secret" not in sealed
        assert "access_token" not in sealed
        await store.delete(user, "calendar")
        assert await store.get(user, "calendar", "tokens") is None
        assert await store.get(user, "mail", "tokens") is not None
    finally:
        await store.close()


async def test_a_rotated_key_still_reads_old_values_and_a_wrong_key_reads_nothing(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'tracker.db'}"
    old, new = new_key(), new_key()
    first = make(url, old)
    await first.put("alice", "calendar", "tokens", {"access_token": "a"})
    await first.close()
    rotated = make(url, f"{new},{old}")
    assert await rotated.get("alice", "calendar", "tokens") == {"access_token": "a"}
    await rotated.close()
    wrong = make(url, new_key())
    assert await wrong.get("alice", "calendar", "tokens") is None
    await wrong.close()


def test_the_key_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("SUBAGENTS_OAUTH_TOKEN_KEY", raising=False)
    with pytest.raises(MCPConnectionError) as missing:
        TokenCipher()
    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", "not-a-key")
    with pytest.raises(MCPConnectionError) as invalid:
        TokenCipher()
    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", new_key())
    assert TokenCipher().open(TokenCipher().seal({"a": 1})) == {"a": 1}
    assert missing.value.code == "mcp.oauth.token_key_missing"
    assert invalid.value.code == "mcp.oauth.token_key_invalid"
