"""``GET /oauth/callback``: where a user's browser comes back after signing in to an MCP server.

The user's browser reaches this route, not the assistant's API client, so it takes no API token:
the OAuth ``state`` in the address authenticates it. A state is random, made for one
conversation, tool call, user and server, known only to this process and usable once; anything
else gets a plain "expired" page. The page never shows the code or a token, and asks the browser
not to cache it or pass the address on.

Once the authorized call has run, ``subagents serve`` resumes the conversation by itself when
its channel can reach the user without a request of theirs (a socket, a messaging platform);
over the REST webhook the page asks the user to send any message, which collects the result.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from .callbacks import ELICITATIONS
from .consent import CALLBACK_PATH, CONSENTS

CALL_WAIT = 60.0
"""Seconds the page waits for the authorized call to finish, so that the conversation finds
its result when the user returns."""

Resumer = Callable[[str], bool]
"""Resumes the conversation of a call (its owner key) in the background; False when the
conversation's channel cannot reach the user until their next message."""

_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": "default-src 'none'", "X-Frame-Options": "DENY"}


def _page(title: str, text: str, status: int = 200) -> HTMLResponse:
    body = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title></head><body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
            "</body></html>")
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


async def oauth_callback(request: Request, resume: Resumer | None = None) -> HTMLResponse:
    """Hand the authorization code (or the refusal) to the call waiting for it, then let the
    conversation continue (by itself when ``resume`` can reach it)."""
    query = request.query_params
    error = query.get("error")
    consent = CONSENTS.finish(query.get("state", ""), code=query.get("code"),
                              iss=query.get("iss"), error=error)
    if consent is None:
        return _page("This link has expired",
                     "This sign-in link was already used or is no longer valid. Go back to the "
                     "conversation and ask again.", 400)
    if error or not query.get("code"):
        return _page("Access not granted",
                     f"{consent.server} was not authorized. You can go back to the "
                     "conversation.")
    held = ELICITATIONS.held_call(consent.owner_key)
    if held is not None:
        await asyncio.wait({held}, timeout=CALL_WAIT)
    if resume is not None and resume(consent.owner_key):
        return _page("You are signed in",
                     f"{consent.server} is authorized. Go back to the conversation: the answer "
                     "is on its way there.")
    return _page("You are signed in",
                 f"{consent.server} is authorized. Go back to the conversation and send any "
                 "message to continue.")


def consent_routes(resume: Resumer | None = None) -> list[Route]:
    """The routes ``subagents serve`` mounts for user consent (no API token: see above).

    Args:
        resume: Continues the conversation once the authorized call has run (see
            :data:`Resumer`); without it the user's next message does.
    """
    async def callback(request: Request) -> HTMLResponse:
        return await oauth_callback(request, resume)

    return [Route(CALLBACK_PATH, callback, methods=["GET"])]
