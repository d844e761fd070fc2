"""Build stores from ``endpoints.yml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from subagents.config._base import resolve_env
from subagents.exceptions import ConfigError, ConfigIssue
from subagents.stores.base import TrackerStore
from subagents.stores.locks import InProcessLockStore, LockStore
from subagents.stores.memory import InMemoryTrackerStore

DEFAULT_DB = ".subagents/tracker.db"


def tracker_store_from_config(config: Any, root: Any) -> TrackerStore:
    """Build the tracker store an endpoints.yml ``tracker_store`` section describes."""
    root = Path(root)
    data = config.model_dump() if config is not None else {"type": "sql"}
    kind = str(data.get("type") or "sql").lower()
    if kind in ("memory", "in_memory", "inmemory"):
        return InMemoryTrackerStore()
    if kind != "sql":
        raise ConfigError(ConfigIssue("endpoints.tracker_store.unsupported",
                                      f"tracker_store type {kind!r} is not supported",
                                      file="endpoints.yml", key="tracker_store.type",
                                      hint="use sql (SQLite or PostgreSQL) or memory"))
    from subagents.stores.sql import SQLTrackerStore

    url = resolve_env(data["url"], what="tracker_store.url") if data.get("url") else None
    if not url:
        dialect = str(data.get("dialect") or "sqlite")
        if dialect.startswith("postgres"):
            user, pw = data.get("username", ""), data.get("password", "")
            host, port = data.get("host", "localhost"), data.get("port", 5432)
            db = data.get("db", "subagents")
            url = f"postgresql+asyncpg://{user}:{pw}@{host}:{port}/{db}"
        else:
            url = f"sqlite+aiosqlite:///{root / (data.get('db') or DEFAULT_DB)}"
    elif url.startswith("sqlite+aiosqlite:///") and not url.startswith("sqlite+aiosqlite:////"):
        rel = url.split(":///", 1)[1]
        url = f"sqlite+aiosqlite:///{root / rel}"
    if data.get("busy_timeout") is not None:
        return SQLTrackerStore(url, busy_timeout=_seconds(data, "busy_timeout", "tracker_store"))
    return SQLTrackerStore(url)


def lock_store_from_config(config: Any) -> LockStore:
    """Build the lock store an endpoints.yml ``lock_store`` section describes."""
    data = config.model_dump() if config is not None else {}
    kind = str(data.get("type") or "in_memory").lower()
    if kind == "redis":
        from subagents.stores.redis_lock import RedisLockStore

        url = resolve_env(data["url"], what="lock_store.url") if data.get("url") else None
        store = RedisLockStore(url=url, host=data.get("host", "localhost"),
                               port=int(data.get("port", 6379)), db=int(data.get("db", 0)))
        if data.get("lock_timeout") is not None:
            store.lock_timeout = _seconds(data, "lock_timeout", "lock_store")
        if data.get("wait_timeout") is not None:
            store.wait_timeout = _seconds(data, "wait_timeout", "lock_store")
        return store
    if data.get("wait_timeout") is not None:
        return InProcessLockStore(wait_timeout=_seconds(data, "wait_timeout", "lock_store"))
    return InProcessLockStore()


def _seconds(data: dict[str, Any], key: str, section: str) -> float:
    """A positive number of seconds from a store's settings, else a clear ConfigError."""
    value = data.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e6:
        return float(value)
    raise ConfigError(ConfigIssue("endpoints.store.invalid_seconds",
                                  f"{section}.{key} must be a positive number of seconds, "
                                  f"not {value!r}", file="endpoints.yml",
                                  key=f"{section}.{key}"))
