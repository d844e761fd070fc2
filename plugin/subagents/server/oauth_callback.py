"""``GET /oauth/callback``: where a user's browser comes back after signing in to an MCP server.

The user's browser reaches this route, not the assistant's API client, so it takes no API token:
the OAuth ``state`` in the address authenticates it. A state is random, made for one
conversation, tool call, user and server, known only to the worker that sent the link and
usable once (another worker sharing its Redis hands the callback over to it:
:mod:`subagents.mcp.oauth.relay`); anything else gets a plain "expired" page. The page never
shows the code or a token, and asks the browser not to cache it or pass the address on.

Once the authorized call has run, ``subagents serve`` resumes the conversation by itself when
its channel can reach the user without a request of theirs (a socket, a messaging platform);
over the REST webhook the page asks the user to send any message, which collects the result.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from subagents.mcp.oauth.consent import CALLBACK_PATH, ConsentRegistry
from subagents.mcp.oauth.relay import PARAMS, CallbackOutcome, ConsentRelay

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


async def complete_callback(consents: ConsentRegistry, params: dict[str, str],
                            resume: Resumer | None = None) -> CallbackOutcome | None:
    """Hand the authorization code (or the refusal) to the call waiting for it in
    ``consents`` (the MCP pool's), wait for the call, then let the conversation continue (by
    itself when ``resume`` can reach it). None when no consent there has the ``state``."""
    error, code = params.get("error"), params.get("code")
    consent = consents.finish(params.get("state", ""), code=code, iss=params.get("iss"),
                              error=error)
    if consent is None:
        return None
    if error or not code:
        return CallbackOutcome(consent.server, granted=False)
    held = consent.elicitations.held_call(consent.owner_key) \
        if consent.elicitations is not None else None
    if held is not None:
        await asyncio.wait({held}, timeout=CALL_WAIT)
    resumed = resume is not None and resume(consent.owner_key)
    return CallbackOutcome(consent.server, granted=True, resumed=resumed)


def _outcome_page(outcome: CallbackOutcome | None) -> HTMLResponse:
    if outcome is None:
        return _page("This link has expired",
                     "This sign-in link was already used or is no longer valid. Go back to the "
                     "conversation and ask again.", 400)
    if not outcome.granted:
        return _page("Access not granted",
                     f"{outcome.server} was not authorized. You can go back to the "
                     "conversation.")
    if outcome.resumed:
        return _page("You are signed in",
                     f"{outcome.server} is authorized. Go back to the conversation: the answer "
                     "is on its way there.")
    return _page("You are signed in",
                 f"{outcome.server} is authorized. Go back to the conversation and send any "
                 "message to continue.")


async def oauth_callback(request: Request, consents: ConsentRegistry,
                         resume: Resumer | None = None,
                         relay: ConsentRelay | None = None) -> HTMLResponse:
    """Finish the sign-in the browser comes back from: here when this process sent the link
    (it waits in ``consents``), else through ``relay`` by the worker that did."""
    params = {key: value for key in PARAMS
              if (value := request.query_params.get(key)) is not None}
    outcome = await complete_callback(consents, params, resume)
    if outcome is None and relay is not None and params.get("state"):
        outcome = await relay.forward(params)
    return _outcome_page(outcome)


def consent_routes(consents: ConsentRegistry, resume: Resumer | None = None,
                   relay: ConsentRelay | None = None) -> list[Route]:
    """The routes ``subagents serve`` mounts for user consent (no API token: see above).

    Args:
        consents: The sign-in links waiting for a browser (the assistant's MCP pool's).
        resume: Continues the conversation once the authorized call has run (see
            :data:`Resumer`); without it the user's next message does.
        relay: Hands callbacks for another worker's sign-in links to that worker.
    """
    async def callback(request: Request) -> HTMLResponse:
        return await oauth_callback(request, consents, resume, relay)

    return [Route(CALLBACK_PATH, callback, methods=["GET"])]


def consent_relay(redis: Any, consents: ConsentRegistry,
                  resume: Resumer | None = None) -> ConsentRelay:
    """The relay of a worker whose lock store is Redis (``redis``: its client) for the sign-in
    links waiting in ``consents``."""
    async def complete(params: dict[str, str]) -> CallbackOutcome | None:
        return await complete_callback(consents, params, resume)

    return ConsentRelay(redis, complete, consents)
