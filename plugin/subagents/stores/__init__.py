"""Tracker stores (memory, SQL) and lock stores (in-process, Redis)."""

from subagents.stores.base import ConversationRecord, TrackerStore
from subagents.stores.locks import InProcessLockStore, LockStore
from subagents.stores.memory import InMemoryTrackerStore

__all__ = ["ConversationRecord", "InMemoryTrackerStore", "InProcessLockStore", "LockStore",
           "TrackerStore", "create_lock_store", "create_tracker_store"]


def create_tracker_store(config: object | None, root: object) -> TrackerStore:
    """The tracker store ``config`` (endpoints.yml ``tracker_store``) describes."""
    from subagents.stores.factory import tracker_store_from_config

    return tracker_store_from_config(config, root)


def create_lock_store(config: object | None) -> LockStore:
    """The lock store ``config`` (endpoints.yml ``lock_store``) describes."""
    from subagents.stores.factory import lock_store_from_config

    return lock_store_from_config(config)
