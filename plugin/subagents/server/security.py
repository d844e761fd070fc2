"""What the HTTP server does before a request reaches a route, and how it listens.

* Browsers: a request carrying an ``Origin`` header from anywhere but the configured CORS
  origins is refused (403) before anything runs, so a web page cannot make a visitor's browser
  talk to the assistant; configured origins get CORS headers (preflight included).
* A browser's ``POST`` (one with an ``Origin`` header) must declare its body JSON
  (``application/json`` or ``...+json``), else 415: the content types a cross-site form can
  send without a preflight are never accepted from a page. A request without an ``Origin``
  (``curl -d '{...}'``, a server) is read as JSON whatever its content type, as Rasa does.
* ``Host``: with an allow-list of host names (the default when listening on a loopback
  address), any other ``Host`` header is refused (400), which defeats DNS rebinding.
* Connections: one that has not sent a complete request line and headers within
  ``header_timeout`` seconds, or sits idle after a response, is closed.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Sequence
from typing import Any

import structlog
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

log = structlog.get_logger("subagents.server.app")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
HEADER_TIMEOUT = 15.0
"""Seconds a connection may take to send a request's line and headers."""
CORS_ENV = "SUBAGENTS_CORS_ORIGINS"


def cors_origins_from_env() -> list[str]:
    """``SUBAGENTS_CORS_ORIGINS``: comma-separated origins, or ``*`` for any."""
    raw = os.environ.get(CORS_ENV, "")
    return [origin.strip().rstrip("/") for origin in raw.split(",") if origin.strip()]


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only listens on this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str, token: str | None) -> None:
    """Say loudly that a public address without a token lets anyone drive the assistant."""
    if token or is_loopback(host):
        return
    message = (f"subagents: WARNING: listening on {host} without a token: anyone who can "
               f"reach this address can talk to the assistant and read every conversation. "
               f"Set --token or SUBAGENTS_TOKEN.")
    log.warning("server.exposed_without_token", host=host)
    print(message, file=sys.stderr, flush=True)


def security_middleware(cors_origins: Sequence[str] = (),
                        allowed_hosts: Sequence[str] | None = None,
                        channel_prefixes: Sequence[str] = (),
                        channels: Sequence[Middleware] = ()) -> list[Middleware]:
    """The middleware stack, outermost first.

    Paths under ``channel_prefixes`` belong to input channels (platform webhooks): they verify
    their own callers (signatures, tokens) and take the platform's body formats, so the browser
    guard leaves them alone. ``channels`` (the channels' ASGI wrappers, Socket.IO) sit right
    inside the ``Host`` check, and check browser origins themselves.
    """
    origins = [o.rstrip("/") for o in cors_origins]
    stack: list[Middleware] = []
    if allowed_hosts:
        stack.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    stack.extend(channels)
    if origins:
        stack.append(Middleware(CORSMiddleware, allow_origins=origins,
                                allow_methods=["GET", "POST"],
                                allow_headers=["authorization", "content-type",
                                               "idempotency-key"],
                                expose_headers=["x-subagents-error-id"]))
    stack.append(Middleware(BrowserGuard, cors_origins=origins,
                            exempt_prefixes=list(channel_prefixes)))
    return stack


class BrowserGuard:
    """Refuses foreign origins, and browsers' ``POST`` bodies not declared JSON (pure ASGI,
    streams untouched)."""

    def __init__(self, app: ASGIApp, cors_origins: Sequence[str] = (),
                 exempt_prefixes: Sequence[str] = ()) -> None:
        self.app = app
        self.exempt = tuple(p.rstrip("/") + "/" for p in exempt_prefixes)
        self.any_origin = "*" in cors_origins
        self.origins = set(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse or pass on one ASGI request."""
        if scope["type"] != "http" or scope["path"].startswith(self.exempt):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope, _GUARD_HEADERS)
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, headers.get("host", "")):
            await _refuse(send, 403, "cross-origin requests are not allowed",
                          "http.origin_forbidden")
            return
        if scope["method"] == "POST" and origin is not None \
                and not _is_json(headers.get("content-type", "")):
            await _refuse(send, 415, "send the body as application/json",
                          "http.unsupported_media_type")
            return
        await self.app(scope, receive, send)

    def _origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/")
        if self.any_origin or origin in self.origins:
            return True
        # the assistant's own pages (same scheme-less host:port) are not cross-origin
        return bool(host) and origin.split("://", 1)[-1] == host


_GUARD_HEADERS = frozenset({b"origin", b"host", b"content-type"})


def _headers(scope: Scope, names: frozenset[bytes]) -> dict[str, str]:
    """The request's headers among ``names`` (the last of each), as text."""
    found: dict[str, str] = {}
    for key, value in scope["headers"]:
        key = key.lower()
        if key in names:
            found[key.decode("latin-1")] = value.decode("latin-1")
    return found


def _is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                           and kind.endswith("+json"))


async def _refuse(send: Send, status: int, message: str, code: str) -> None:
    import json

    body = json.dumps({"error": message, "code": code}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def http_protocol(header_timeout: float = HEADER_TIMEOUT) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol, closing connections that stall before a request starts.

    uvicorn's own keep-alive timer stops as soon as any byte arrives, so a client that sends
    half a request line keeps its connection (and a file descriptor) forever. The parser is
    httptools when it is installed (a C parser: a fraction of h11's CPU per request), h11
    otherwise.
    """
    base: type[Any]
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol

    class _Protocol(base):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            self.loop.call_later(header_timeout, self._header_timer_fired, self.cycle)

        def _header_timer_fired(self, cycle: Any) -> None:
            if self.transport.is_closing() or self.cycle is not cycle:
                return  # a request started since: its own handling takes over
            if cycle is None or cycle.response_complete:
                log.info("server.connection.stalled_closed")
                self.transport.close()

    return _Protocol
