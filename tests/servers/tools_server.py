"""A real MCP server for the tests: run over stdio (``python -m tests.servers.tools_server``)
or served in-process over HTTP/SSE. Timestamped tools prove ordering and overlap."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

RO = ToolAnnotations(read_only_hint=True)
server = MCPServer("tools")


@server.tool(annotations=RO)
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool(annotations=RO)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=RO)
async def timed_read(label: str, ms: int = 200) -> str:
    """Read-only: sleep ms milliseconds; returns label, start and end (monotonic seconds)."""
    start = time.monotonic()
    await asyncio.sleep(ms / 1000)
    return f"{label} {start:.6f} {time.monotonic():.6f}"


@server.tool()
async def timed_write(label: str, ms: int = 200) -> str:
    """Side effect: sleep ms milliseconds; returns label, start and end (monotonic seconds)."""
    start = time.monotonic()
    await asyncio.sleep(ms / 1000)
    return f"{label} {start:.6f} {time.monotonic():.6f}"


@server.tool(annotations=RO)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "finally"


@server.tool()
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ToolError(message)


@server.tool()
def crash() -> str:
    """Raises an unexpected exception."""
    raise RuntimeError("kaboom")


@server.tool(annotations=RO)
def huge(size: int) -> str:
    """A very long result."""
    return "x" * size


@server.tool()
def die() -> str:
    """Kills the server process mid-call (stdio only)."""
    os._exit(3)


@server.tool(annotations=RO)
def die_once(marker: str) -> str:
    """Read-only: kills the server the first time (marker file absent), answers afterwards."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(3)
    return "survived"


@server.tool(annotations=RO)
def whoami(ctx: Context) -> str:
    """The request's authorization and x-tenant headers."""
    headers = ctx.headers or {}
    return f"{headers.get('authorization')}|{headers.get('x-tenant')}"


@server.tool(annotations=RO)
def env_value(name: str) -> str:
    """The value of an environment variable in the server process."""
    return os.environ.get(name, "<unset>")


@server.tool(annotations=RO)
def show_meta(ctx: Context) -> str:
    """The request's _meta (as the server saw it)."""
    meta = ctx.request_context.meta
    data = dict(meta or {})
    return ",".join(f"{k}={v}" for k, v in sorted(data.items()) if k in ("tenant", "uid"))


@server.tool(annotations=RO)
def pid() -> int:
    """The server's process id."""
    return os.getpid()


def _extra() -> str:
    """A tool registered at runtime."""
    return "extra"


@server.tool()
async def register_extra(ctx: Context) -> str:
    """Register the tool `extra` and announce the change."""
    server.add_tool(_extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "registered"


if __name__ == "__main__":
    server.run()
    sys.exit(0)
