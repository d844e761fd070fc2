"""MCP call overhead: a trivial tool call through our layer vs the bare `mcp` client."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from _common import summary
from mcp import Client, StdioServerParameters
from subagents.config.endpoints import McpServerConfig
from subagents.mcp import MCPServerConnection
from subagents.testing.mcp_http import serve_mcp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.servers.tools_server import server  # noqa: E402

CALLS = 300


@contextlib.asynccontextmanager
async def endpoint(transport: str) -> AsyncIterator[McpServerConfig]:
    if transport == "stdio":
        yield McpServerConfig(name="t", type="stdio", command="python",
                              args=["-m", "tests.servers.tools_server"], cwd=str(ROOT))
        return
    async with serve_mcp(server, "http" if transport == "http" else "sse") as url:
        yield McpServerConfig(name="t", type=transport, url=url)


def bare_target(config: McpServerConfig) -> object:
    if config.type == "stdio":
        return StdioServerParameters(command=sys.executable, args=list(config.args),
                                     cwd=config.cwd)
    if config.type == "sse":
        from mcp.client.sse import sse_client

        return sse_client(str(config.url))
    return str(config.url)


async def timed(call: object, n: int) -> list[float]:
    samples = []
    for i in range(n + 20):
        start = time.perf_counter()
        await call()  # type: ignore[operator]
        if i >= 20:  # warm-up
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def bench(transport: str) -> None:
    async with endpoint(transport) as config:
        conn = MCPServerConnection(config, root=ROOT)
        await conn.start(1)
        ours = await timed(lambda: conn.call_tool("echo", {"text": "hi"}, timeout=10), CALLS)
        await conn.close()
        async with Client(bare_target(config), mode="legacy") as client:  # type: ignore[arg-type]
            bare = await timed(lambda: client.call_tool("echo", {"text": "hi"}), CALLS)
    print(f"{transport:6s} subagents {summary(ours)}")
    print(f"{transport:6s} bare mcp  {summary(bare)}")


async def main() -> None:
    print("== MCP call overhead (echo tool) ==")
    for transport in ("stdio", "sse", "http"):
        await bench(transport)


if __name__ == "__main__":
    asyncio.run(main())
