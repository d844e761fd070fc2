"""A tiny OAuth authorization server and a bearer-token gate in front of a real MCP HTTP app.

The authorization server publishes RFC 8414 metadata and issues ``client_credentials`` tokens
(HTTP Basic or form-post client authentication); the gate answers 401 with a
``resource_metadata`` pointer (RFC 9728) unless the request carries a token it issued and has not
revoked, and serves the protected-resource metadata itself.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from subagents.testing.mcp_http import serve_app


@dataclass
class AuthServer:
    client_id: str
    client_secret: str
    base: str = ""
    grants: list[dict[str, Any]] = field(default_factory=list)
    """Each token request: its form fields plus ``auth_method`` (basic / post)."""
    valid: set[str] = field(default_factory=set)
    public_key: str | None = None
    """PEM public key: accept ``private_key_jwt`` assertions signed with its private key."""

    def revoke_all(self) -> None:
        self.valid.clear()

    def _verify(self, form: dict[str, str]) -> str:
        """The client id a valid assertion names ('' when it is not valid)."""
        import jwt

        try:
            claims = jwt.decode(form["client_assertion"], self.public_key or "",
                                algorithms=["ES256", "RS256"], audience=self.base)
        except jwt.PyJWTError:
            return ""
        return str(claims["sub"]) if claims.get("iss") == claims.get("sub") else ""

    def app(self) -> Starlette:
        async def metadata(request: Request) -> JSONResponse:
            return JSONResponse({
                "issuer": self.base, "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token",
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic",
                                                          "client_secret_post"]})

        async def token(request: Request) -> JSONResponse:
            form = {k: str(v) for k, v in (await request.form()).items()}
            header = request.headers.get("authorization", "")
            if "client_assertion" in form:
                method, client_id = "private_key_jwt", self._verify(form)
                secret = self.client_secret
            elif header.startswith("Basic "):
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                method, client_id, secret = "basic", unquote(user), unquote(password)
            else:
                method = "post"
                client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
            self.grants.append({**form, "auth_method": method})
            if (client_id, secret) != (self.client_id, self.client_secret):
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            issued = f"token-{len(self.grants)}"
            self.valid.add(issued)
            return JSONResponse({"access_token": issued, "token_type": "Bearer",
                                 "expires_in": 3600})

        return Starlette(routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/token", token, methods=["POST"])])


class BearerGate:
    """ASGI middleware: protected-resource metadata, and 401 without a valid bearer token."""

    def __init__(self, app: ASGIApp, auth: AuthServer, *, advertise: bool = True) -> None:
        self.app, self.auth, self.advertise = app, auth, advertise

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        origin = f"http://{headers[b'host'].decode()}"
        if scope["path"].startswith("/.well-known/oauth-protected-resource") and self.advertise:
            body = {"resource": f"{origin}/mcp", "authorization_servers": [self.auth.base]}
            await _send(send, 200, json.dumps(body).encode(), b"application/json")
            return
        token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
        if token not in self.auth.valid:
            challenge = (f'Bearer resource_metadata="{origin}/.well-known/oauth-protected-resource'
                         f'/mcp"' if self.advertise else "Bearer")
            await _send(send, 401, b"unauthorized", b"text/plain",
                        [(b"www-authenticate", challenge.encode())])
            return
        await self.app(scope, receive, send)


async def _send(send: Send, status: int, body: bytes, content_type: bytes,
                extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def protected_mcp(server: Any, auth: AuthServer, *, advertise: bool = True
                        ) -> AsyncIterator[str]:
    """Serve the authorization server and the gated MCP server; yield the MCP URL."""
    async with serve_app(auth.app()) as auth_base:
        auth.base = auth_base
        gated = BearerGate(server.streamable_http_app(), auth, advertise=advertise)
        async with serve_app(gated) as base:
            yield f"{base}/mcp"
