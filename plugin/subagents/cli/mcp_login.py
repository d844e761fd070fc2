"""``subagents mcp login <server>``: sign in to an MCP server once (OAuth authorization code
with PKCE), with a local callback server, and store the login for the server process."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import structlog

from subagents.config.endpoints import McpServerConfig
from subagents.exceptions import MCPConnectionError
from subagents.mcp.connection import MCPServerConnection
from subagents.mcp.oauth.login import LoginHandlers, _CallbackServer, token_file

log = structlog.get_logger("subagents.mcp")


async def _open_in_browser(url: str) -> None:
    import webbrowser

    print(f"Open this address to sign in:\n  {url}", file=sys.stderr)
    await asyncio.to_thread(webbrowser.open, url)


@contextlib.asynccontextmanager
async def interactive_connection(config: McpServerConfig, root: Path,
                                 open_url: Callable[[str], Awaitable[None]] | None = None
                                 ) -> AsyncIterator[MCPServerConnection]:
    """A connection that may send a person to sign in whenever the server asks (the first
    login, or a step-up to more scopes); its login is stored like ``login``'s."""
    if config.oauth is None or config.oauth.grant != "authorization_code":
        raise MCPConnectionError(f"MCP server {config.name!r} has no oauth with "
                                 "grant: authorization_code", code="mcp.login_not_configured")
    callback = _CallbackServer(config.oauth.redirect_port)
    redirect_uri = await callback.start()
    handlers = LoginHandlers(open_url=open_url or _open_in_browser, redirect_uri=redirect_uri,
                             wait_for_callback=callback.wait)
    conn = MCPServerConnection(config, root=root, login=handlers)
    try:
        await conn.start(attempts=1)
        yield conn
    finally:
        await conn.close()
        await callback.close()


async def login(config: McpServerConfig, root: Path,
                open_url: Callable[[str], Awaitable[None]] | None = None) -> list[str]:
    """Run the sign-in for ``config`` and store the result; return the server's tool names."""
    async with interactive_connection(config, root, open_url) as conn:
        names = [tool.name for tool in await conn.tools()]
    log.info("mcp.login.done", server=config.name, tools=len(names))
    return names


def cmd_login(project_dir: Path, server: str) -> int:
    """``subagents mcp login <server>``: exit status 0 when signed in."""
    from subagents.config.project import load_project

    project = load_project(project_dir)
    config = project.endpoints.mcp_server(server)
    if config is None:
        print(f"MCP server {server!r} is not defined in endpoints.yml", file=sys.stderr)
        return 2
    try:
        names = asyncio.run(login(config, project.root))
    except MCPConnectionError as exc:
        print(f"login failed [{exc.code}]: {exc}", file=sys.stderr)
        return 1
    print(f"Signed in to {server!r}; {len(names)} tool(s) available. Stored in "
          f"{token_file(project.root, server)}")
    return 0
