"""The inspector: one page, served by the package, that watches a conversation live.

``GET /inspect`` answers the page (its stylesheet and script inlined, so a token given as
``?token=`` covers everything it loads). The page talks to the same routes as any client:
``POST /webhooks/stream/webhook?inspect=true`` (the SSE stream, plus the agent step records
that :mod:`subagents.agents.trace` emits) and ``GET /conversations/{sender}/tracker``. It makes
no other request: its Content-Security-Policy allows nothing but its own origin.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

_TRUE = {"true", "1", "yes"}

CSP = ("default-src 'none'; connect-src 'self'; script-src {script}; style-src {style}; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
"""Nothing but the page's own origin: no CDN, no fonts, no beacons. The page's own script and
stylesheet are allowed by their hashes, so no other inline script (an injected tag, an event
handler attribute) would run."""


def wants_trace(request: Request) -> bool:
    """``?inspect=true`` (also ``1`` or ``yes``) on the stream route: add agent step events."""
    return request.query_params.get("inspect", "").strip().lower() in _TRUE


def _source_hash(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return f"'sha256-{digest}'"


@cache
def _page_and_policy() -> tuple[str, str]:
    static = resources.files(__package__) / "static"
    html = (static / "index.html").read_text(encoding="utf-8")
    css = (static / "inspector.css").read_text(encoding="utf-8")
    js = (static / "inspector.js").read_text(encoding="utf-8").replace("</", "<\\/")
    policy = CSP.format(script=_source_hash(js), style=_source_hash(css))
    return html.replace("/*INSPECTOR_CSS*/", css).replace("/*INSPECTOR_JS*/", js), policy


def page() -> str:
    """The page with its stylesheet and script inlined."""
    return _page_and_policy()[0]


def content_security_policy() -> str:
    """The page's Content-Security-Policy: its own origin, its own script and stylesheet."""
    return _page_and_policy()[1]


async def inspect_page(request: Request) -> Response:
    """``GET /inspect``: the inspector page."""
    return HTMLResponse(page(), headers={
        "content-security-policy": content_security_policy(), "cache-control": "no-store",
        "referrer-policy": "no-referrer", "x-content-type-options": "nosniff"})


def inspector_routes(guard: Callable[[Any], Any],
                     replay: dict[str, Any] | None = None) -> list[Route]:
    """``GET /inspect`` and ``GET /inspect/replay`` behind ``guard`` (the server's token check).

    Args:
        guard: Wraps a handler with the server's token check.
        replay: The test case being replayed (its user messages), if any.
    """
    async def replay_plan(request: Request) -> Response:
        """``GET /inspect/replay``: the replayed case, or ``{"case": null}``."""
        return JSONResponse(replay or {"case": None})

    return [Route("/inspect", guard(inspect_page), methods=["GET"]),
            Route("/inspect/replay", guard(replay_plan), methods=["GET"])]
