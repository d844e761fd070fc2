"""Pieces of Rasa's REST channel contract used by the HTTP server.

* the secret may come as ``Authorization: Bearer <token>`` or as the ``?token=`` query
  parameter (how Rasa's server takes its auth token);
* ``POST /webhooks/rest/webhook?stream=true`` streams the answer as server-sent events, the
  same frames as ``/webhooks/stream/webhook``;
* ``GET /webhooks/rest/`` answers ``{"status": "ok"}`` (the channel's health route).
"""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

_TRUE = {"true", "1", "yes"}


def token_matches(request: Request, token: str) -> bool:
    """Whether the request carries ``token`` in the bearer header or the ``token`` parameter."""
    header = request.headers.get("authorization", "")
    if hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        return True
    given = request.query_params.get("token")
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def wants_stream(request: Request) -> bool:
    """``?stream=true`` (also ``1`` or ``yes``, any case)."""
    return request.query_params.get("stream", "").strip().lower() in _TRUE


async def rest_channel_health(request: Request) -> Response:
    """``GET /webhooks/rest/``: the REST channel is up."""
    return JSONResponse({"status": "ok"})
