"""Pieces of Rasa's REST channel contract used by the HTTP server.

* the secret may come as ``Authorization: Bearer <token>`` or as the ``?token=`` query
  parameter (how Rasa's server takes its auth token);
* ``POST /webhooks/rest/webhook?stream=true`` streams the answer as server-sent events, the
  same frames as ``/webhooks/stream/webhook``;
* ``GET /webhooks/rest/`` answers ``{"status": "ok"}`` (the channel's health route).

:func:`extra_routes` also adds ``GET /metrics`` (Prometheus) while metrics are enabled.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from subagents import observability

_TRUE = {"true", "1", "yes"}


def token_matches(request: Request, token: str) -> bool:
    """Whether the request carries ``token`` in the bearer header or the ``token`` parameter."""
    # headers arrive as latin-1 text; compare bytes so non-ASCII input is just a mismatch
    header = request.headers.get("authorization", "").encode("latin-1", "replace")
    if hmac.compare_digest(header, f"Bearer {token}".encode()):
        return True
    given = request.query_params.get("token")
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"),
                                                     token.encode())


def wants_stream(request: Request) -> bool:
    """``?stream=true`` (also ``1`` or ``yes``, any case)."""
    if not request.scope.get("query_string"):
        return False  # most requests: nothing to parse
    return request.query_params.get("stream", "").strip().lower() in _TRUE


async def rest_channel_health(request: Request) -> Response:
    """``GET /webhooks/rest/``: the REST channel is up."""
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """``GET /metrics``: every metric in the Prometheus text format."""
    payload, content_type = observability.metrics_payload()
    return Response(payload, media_type=content_type)


def extra_routes(guard: Callable[[Any], Any]) -> list[Route]:
    """The REST channel's health route, and ``/metrics`` (behind ``guard``) when enabled."""
    routes = [Route("/webhooks/rest/", rest_channel_health, methods=["GET"])]
    if observability.metrics_enabled():
        routes.append(Route("/metrics", guard(metrics), methods=["GET"]))
    return routes
