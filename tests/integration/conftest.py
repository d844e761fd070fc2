from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from subagents.testing.mcp_http import serve_mcp

from tests.servers.tools_server import server as tools_server


@pytest.fixture
async def tools_url() -> AsyncIterator[str]:
    """The test MCP server over real streamable HTTP on 127.0.0.1."""
    async with serve_mcp(tools_server, "http") as url:
        yield url
