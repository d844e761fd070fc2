"""An MCP server whose tool needs the user to connect an account on the server's own page first.

``list_files`` answers with the URL-elicitation-required error (-32042) until the page
``/connect?id=<elicitation id>`` was opened; the page then tells the waiting client that the
step is complete (``notifications/elicitation/complete``), unless ``?quiet=1``.
"""

from __future__ import annotations

from typing import Any

from mcp import UrlElicitationRequiredError
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ElicitRequestURLParams
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

server = MCPServer("files")
PAGE = {"base": ""}
"""Where the connect page is served (set by the test)."""
CONNECTED: set[str] = set()
_SESSIONS: dict[str, Any] = {}


def reset(page_base: str) -> None:
    PAGE["base"] = page_base
    CONNECTED.clear()
    _SESSIONS.clear()


@server.tool()
def list_files(ctx: Context) -> str:
    """The files of the user's connected drive."""
    elicitation_id = "drive-1"
    if elicitation_id not in CONNECTED:
        _SESSIONS[elicitation_id] = ctx.session
        raise UrlElicitationRequiredError([ElicitRequestURLParams(
            message="Connect your drive first.", elicitation_id=elicitation_id,
            url=f"{PAGE['base']}/connect?id={elicitation_id}")])
    return "files: notes.txt"


async def connect(request: Request) -> PlainTextResponse:
    elicitation_id = request.query_params["id"]
    CONNECTED.add(elicitation_id)
    session = _SESSIONS.get(elicitation_id)
    if session is not None and request.query_params.get("quiet") != "1":
        await session.send_elicit_complete(elicitation_id)
    return PlainTextResponse("connected")


page = Starlette(routes=[Route("/connect", connect)])
