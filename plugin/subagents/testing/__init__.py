"""Test support shipped for users: the fake model server, e2e fixtures, the pytest plugin."""

from subagents.testing.fake_server import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    normalize_reply,
    scripted_search_index,
)

__all__ = ["FakeModelServer", "RecordedRequest", "Reply", "normalize_reply",
           "scripted_search_index"]
