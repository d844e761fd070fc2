"""A stateful MCP server for the identity tests, served over HTTP on 127.0.0.1.

It keeps notes per MCP session (by the ``mcp-session-id`` header) and echoes the user named
by the ``Authorization`` header each call arrived with, so a test sees which credentials and
which session a call used. ``meet`` waits until ``expected`` sessions have called it, which proves
that calls of different conversations were in flight at the same time.
"""

from __future__ import annotations

import asyncio

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("identity")
NOTES: dict[str, list[str]] = {}
_MET: set[str] = set()
_ALL_MET = asyncio.Event()


def reset() -> None:
    """Forget every session's notes (between tests).

    The event is made anew: an asyncio event belongs to the loop that first waited on it, and
    each test runs its own loop.
    """
    global _ALL_MET
    NOTES.clear()
    _MET.clear()
    _ALL_MET = asyncio.Event()


def _who(ctx: Context) -> tuple[str, str]:
    """The session id and the user the credentials name (``Bearer token-<user>``)."""
    headers = ctx.headers or {}
    auth = headers.get("authorization", "")
    return headers.get("mcp-session-id", "?"), auth.removeprefix("Bearer token-") or "nobody"


@server.tool()
def remember(note: str, ctx: Context) -> str:
    """Store a note in this session."""
    session, auth = _who(ctx)
    NOTES.setdefault(session, []).append(f"{note} ({auth})")
    return "stored"


@server.tool()
def recall(ctx: Context) -> str:
    """The notes stored in this session, and the user this call's credentials name."""
    session, auth = _who(ctx)
    return f"auth={auth}; notes={NOTES.get(session, [])}"


@server.tool()
async def meet(expected: int, ctx: Context) -> str:
    """Wait (at most 25 s, for a loaded machine) until ``expected`` sessions have called this."""
    session, _ = _who(ctx)
    _MET.add(session)
    if len(_MET) >= expected:
        _ALL_MET.set()
    await asyncio.wait_for(_ALL_MET.wait(), 25)
    return f"met {len(_MET)}"
