"""The MCP pool owns the registries of what waits for a user (questions, sign-in links) and
hands them down; two assistants in one process share neither."""

from __future__ import annotations

import anyio
from subagents.config.endpoints import EndpointsConfig
from subagents.mcp.oauth import consent as consent_module
from subagents.mcp.pool import MCPPool
from subagents.server.oauth_callback import complete_callback

ENDPOINTS = EndpointsConfig.model_validate(
    {"mcp_servers": [{"name": "calendar", "type": "http", "url": "http://127.0.0.1:9/mcp"}]})


async def test_each_pool_hands_its_own_registries_to_its_sessions():
    first, second = MCPPool(ENDPOINTS), MCPPool(ENDPOINTS)
    try:
        conn = first.connection("calendar")
        assert conn.consents is first.consents
        assert conn.elicitations is first.elicitations
        assert first.consents is not second.consents
        assert not hasattr(consent_module, "CONSENTS")  # no process-wide registry
    finally:
        await first.close()
        await second.close()


async def test_a_sign_in_callback_finishes_only_in_the_pool_that_sent_the_link():
    mine, other = MCPPool(ENDPOINTS), MCPPool(ENDPOINTS)
    try:
        pending = mine.consents.open("state-1", "calendar", "chat:call-1")
        assert other.consents.pending("state-1") is None
        assert await complete_callback(other.consents, {"state": "state-1", "code": "c"}) \
            is None
        with anyio.fail_after(5):
            outcome = await complete_callback(mine.consents, {"state": "state-1", "code": "c"})
            granted = await pending.result
        assert outcome is not None
        assert outcome.granted
        assert outcome.server == "calendar"
        assert granted.code == "c"
        assert mine.consents.pending("state-1") is None  # used once
    finally:
        await mine.close()
        await other.close()
