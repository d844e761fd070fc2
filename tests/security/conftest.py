"""Attack and fault tests against a real ``subagents serve`` (tests/serve_process.py).

Every test here runs the server in a child process, the way an attacker on the same machine
would meet it. ``.ci/suites/security.sh`` runs this folder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from subagents.testing.mcp_http import serve_mcp

from tests.servers.tools_server import server as tools_server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this folder carries the ``security`` mark (``-m security``)."""
    for item in items:
        if "tests/security/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.security)


@pytest.fixture
async def tools_url() -> AsyncIterator[str]:
    """The test MCP server over real streamable HTTP on 127.0.0.1."""
    async with serve_mcp(tools_server, "http") as url:
        yield url
