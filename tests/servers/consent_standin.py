"""An OAuth authorization server that knows its users, and an MCP server behind a bearer gate.

The authorization server registers public clients (RFC 7591), shows no sign-in page: a GET to
``/authorize`` signs in the account named by the ``account`` query parameter (what a person would
type) and redirects to the client's ``redirect_uri`` with a code, or with
``error=access_denied`` when that parameter is ``deny=1``. Codes need PKCE. Tokens are opaque and
map to the account and the scope asked for at sign-in. The gate answers 401 (with a
``resource_metadata`` pointer) to every request without a valid token, 403 ``insufficient_scope``
to a call of ``add_event`` whose token lacks ``calendar.write``, and tells the MCP app which
account the token belongs to in an ``x-account`` header (any such header from the client is
dropped).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.servers.oauth_standin import (
    auth_app,
    called_tool,
    metadata_body,
    pkce_verified,
    refuse_scope,
    send_response,
    serve_gated,
)

calendar = MCPServer("calendar")
CALLS: list[str] = []
"""The account of each call of ``my_events`` (cleared by :func:`consent_standin`)."""


@calendar.tool()
def my_events(ctx: Context) -> str:
    """The signed-in user's events."""
    account = (ctx.headers or {}).get("x-account", "nobody")
    CALLS.append(account)
    return f"events of {account}: dentist on Monday"


@calendar.tool()
def add_event(title: str, ctx: Context) -> str:
    """Add an event to the signed-in user's calendar (needs the scope calendar.write)."""
    account = (ctx.headers or {}).get("x-account", "nobody")
    CALLS.append(account)
    return f"added {title!r} for {account}"


WRITE_SCOPE = "calendar.write"


@dataclass
class UserAuthServer:
    base: str = ""
    clients: dict[str, list[str]] = field(default_factory=dict)
    codes: dict[str, tuple[str, str, str, str, str]] = field(default_factory=dict)
    """Code -> (client id, redirect URI, PKCE challenge, account, scope)."""
    scopes: dict[str, str] = field(default_factory=dict)
    """Access or refresh token -> the scope granted with it."""
    access: dict[str, str] = field(default_factory=dict)
    """Valid access token -> account."""
    refresh: dict[str, str] = field(default_factory=dict)
    """Valid refresh token -> account."""
    grants: list[str] = field(default_factory=list)
    """Each token request's grant type, in order."""
    authorizations: list[dict[str, str]] = field(default_factory=list)
    """The query of each sign-in (what the browser brought)."""

    def revoke_access(self) -> None:
        self.access.clear()

    def revoke_refresh(self) -> None:
        self.refresh.clear()

    def _issue(self, account: str, scope: str) -> JSONResponse:
        token, refresh = f"at-{secrets.token_hex(8)}", f"rt-{secrets.token_hex(8)}"
        self.access[token] = account
        self.refresh[refresh] = account
        self.scopes[token] = self.scopes[refresh] = scope
        return JSONResponse({"access_token": token, "token_type": "Bearer", "scope": scope,
                             "expires_in": 3600, "refresh_token": refresh})

    def app(self) -> Starlette:
        async def metadata(request: Request) -> JSONResponse:
            return JSONResponse(metadata_body(
                self.base, ["authorization_code", "refresh_token"], ["none"]))

        async def register(request: Request) -> JSONResponse:
            body = await request.json()
            client_id = f"client-{len(self.clients) + 1}"
            self.clients[client_id] = list(body["redirect_uris"])
            return JSONResponse({**body, "client_id": client_id,
                                 "token_endpoint_auth_method": "none"}, status_code=201)

        async def authorize(request: Request) -> Response:
            query = dict(request.query_params)
            self.authorizations.append(query)
            redirect = query["redirect_uri"]
            if redirect not in self.clients.get(query["client_id"], []) or \
                    query.get("code_challenge_method") != "S256":
                return JSONResponse({"error": "invalid_request"}, status_code=400)
            if query.get("deny") == "1":
                params = {"error": "access_denied", "state": query["state"]}
            else:
                code = f"code-{secrets.token_hex(8)}"
                self.codes[code] = (query["client_id"], redirect, query["code_challenge"],
                                    query.get("account", "anonymous"), query.get("scope", ""))
                params = {"code": code, "state": query["state"]}
            return RedirectResponse(f"{redirect}?{urlencode(params)}", status_code=302)

        async def token(request: Request) -> JSONResponse:
            form = {k: str(v) for k, v in (await request.form()).items()}
            self.grants.append(form.get("grant_type", ""))
            if form.get("grant_type") == "authorization_code":
                client, redirect, challenge, account, scope = self.codes.pop(
                    form.get("code", ""), ("", "", "", "", ""))
                verified = pkce_verified(form.get("code_verifier", ""), challenge)
                if not verified or (form.get("client_id"), form.get("redirect_uri")) != \
                        (client, redirect):
                    return JSONResponse({"error": "invalid_grant"}, status_code=400)
                return self._issue(account, scope)
            if form.get("grant_type") == "refresh_token":
                account = self.refresh.pop(form.get("refresh_token", ""), "")
                if not account:
                    return JSONResponse({"error": "invalid_grant"}, status_code=400)
                return self._issue(account, self.scopes.get(form["refresh_token"], ""))
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

        return auth_app(metadata, register, authorize, token)


class AccountGate:
    """ASGI middleware: 401 without a valid token; the token's account as ``x-account``."""

    def __init__(self, app: ASGIApp, auth: UserAuthServer) -> None:
        self.app, self.auth = app, auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k != b"x-account"]
        host = dict(headers)[b"host"].decode()
        if scope["path"].startswith("/.well-known/oauth-protected-resource"):
            body = {"resource": f"http://{host}/mcp", "authorization_servers": [self.auth.base]}
            await send_response(send, 200, json.dumps(body).encode(), b"application/json")
            return
        token = dict(headers).get(b"authorization", b"").decode().removeprefix("Bearer ")
        account = self.auth.access.get(token)
        if account is None:
            challenge = (f'Bearer resource_metadata="http://{host}/.well-known/'
                         'oauth-protected-resource/mcp"')
            await send_response(send, 401, b"unauthorized", b"text/plain",
                        [(b"www-authenticate", challenge.encode())])
            return
        receive, tool = await called_tool(receive)
        held = self.auth.scopes.get(token, "").split()
        if tool == "add_event" and WRITE_SCOPE not in held:
            await refuse_scope(send, " ".join([*held, WRITE_SCOPE]),
                               f"http://{host}/.well-known/oauth-protected-resource/mcp")
            return
        scope = {**scope, "headers": [*headers, (b"x-account", account.encode())]}
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def consent_standin() -> AsyncIterator[tuple[UserAuthServer, AccountGate, str]]:
    """Serve the authorization server and the gated calendar; yield both and the MCP URL."""
    auth = UserAuthServer()
    CALLS.clear()
    gate = AccountGate(calendar.streamable_http_app(), auth)
    async with serve_gated(auth, lambda: gate) as url:
        yield auth, gate, url


def with_account(url: str, account: str, **extra: Any) -> str:
    """The sign-in address as the person's browser submits it (signed in as ``account``)."""
    return f"{url}&{urlencode({'account': account, **extra})}"
