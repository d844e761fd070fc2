"""A tiny OAuth authorization server and a bearer-token gate in front of a real MCP HTTP app.

The authorization server publishes RFC 8414 metadata (the token-endpoint authentication methods
it lists, and a registration endpoint, are settings) and issues ``client_credentials`` tokens, and
``authorization_code`` / ``refresh_token`` tokens to registered public clients or to its one
confidential client (HTTP Basic or form-post client authentication, or a signed assertion); it
grants what scope a client asks for. The gate answers 401 with a ``resource_metadata`` pointer
(RFC 9728) unless the request carries a token it issued and has not revoked, serves the
protected-resource metadata itself, and answers a tool call whose token lacks the scope the
tool needs with 403 ``insufficient_scope`` (RFC 6750).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from subagents.testing.mcp_http import serve_app

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclass
class IdentityProvider:
    """An enterprise identity provider that exchanges a user's ID token for an identity
    assertion (RFC 8693 token exchange, as cross-app access uses it)."""

    id_tokens: dict[str, str]
    """ID token -> the user it names."""
    exchanges: list[dict[str, str]] = field(default_factory=list)
    assertions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Identity assertion -> (user, audience, resource)."""
    base: str = ""

    def app(self) -> Starlette:
        async def token(request: Request) -> JSONResponse:
            form = {k: str(v) for k, v in (await request.form()).items()}
            self.exchanges.append(form)
            user = self.id_tokens.get(form.get("subject_token", ""))
            if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" \
                    or user is None or not form.get("audience") or not form.get("resource"):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            assertion = f"jag-{len(self.assertions) + 1}"
            self.assertions[assertion] = (user, form["audience"], form["resource"])
            return JSONResponse({"access_token": assertion, "token_type": "N_A",
                                 "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"})

        return Starlette(routes=[Route("/token", token, methods=["POST"])])


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
    registered: dict[str, list[str]] = field(default_factory=dict)
    """Dynamically registered public clients: client id -> redirect URIs."""
    codes: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    """Authorization code -> (client id, redirect URI, PKCE challenge, scope)."""
    refresh_tokens: set[str] = field(default_factory=set)
    auth_methods: list[str] | None = field(
        default_factory=lambda: ["client_secret_basic", "client_secret_post"])
    """``token_endpoint_auth_methods_supported`` of the metadata (None: not listed)."""
    registration: bool = True
    """Whether dynamic client registration is offered (else ``POST /register`` is a 404)."""
    scopes: dict[str, str] = field(default_factory=dict)
    """Access token -> the scope it was granted."""
    identity_provider: IdentityProvider | None = None
    """Whose identity assertions the jwt-bearer grant accepts (cross-app access)."""

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

    def _user_token(self, form: dict[str, str], client: str) -> JSONResponse:
        """authorization_code (with PKCE) and refresh_token grants."""
        scope = form.get("scope", "")
        if form["grant_type"] == "authorization_code":
            client_id, redirect, challenge, scope = self.codes.pop(
                form.get("code", ""), ("", "", "", ""))
            verified = pkce_verified(form.get("code_verifier", ""), challenge)
            if not verified or (client, form.get("redirect_uri")) != (client_id, redirect):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
        elif form.get("refresh_token") not in self.refresh_tokens:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        else:
            scope = scope or self.scopes.get(form["refresh_token"], "")
        issued, refresh = f"token-{len(self.grants)}", f"refresh-{len(self.grants)}"
        self.valid.add(issued)
        self.scopes[issued] = self.scopes[refresh] = scope
        self.refresh_tokens.add(refresh)
        return JSONResponse({"access_token": issued, "token_type": "Bearer", "scope": scope,
                             "expires_in": 3600, "refresh_token": refresh})

    def _assertion_token(self, form: dict[str, str]) -> JSONResponse:
        """The jwt-bearer grant: an identity assertion made out to this server and resource."""
        idp = self.identity_provider
        user, audience, resource = idp.assertions.pop(form.get("assertion", ""), ("", "", "")) \
            if idp else ("", "", "")
        if not user or audience != self.base or resource != form.get("resource"):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        issued = f"token-{len(self.grants)}"
        self.valid.add(issued)
        self.scopes[issued] = form.get("scope", "")
        return JSONResponse({"access_token": issued, "token_type": "Bearer", "expires_in": 3600})

    def _client(self, request: Request, form: dict[str, str]) -> tuple[str, str, str]:
        """(authentication method, client id, secret) of a token request."""
        header = request.headers.get("authorization", "")
        if "client_assertion" in form:
            return "private_key_jwt", self._verify(form), self.client_secret
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            return "basic", unquote(user), unquote(password)
        if "client_secret" in form:
            return "post", form.get("client_id", ""), form["client_secret"]
        return "none", form.get("client_id", ""), ""

    def app(self) -> Starlette:
        async def metadata(request: Request) -> JSONResponse:
            body = metadata_body(
                self.base, ["client_credentials", "authorization_code", "refresh_token"],
                self.auth_methods or [])
            if self.auth_methods is None:
                del body["token_endpoint_auth_methods_supported"]
            if not self.registration:
                del body["registration_endpoint"]
            return JSONResponse(body)

        async def register(request: Request) -> JSONResponse:
            if not self.registration:
                return JSONResponse({"error": "not_found"}, status_code=404)
            body = await request.json()
            client_id = f"dyn-{len(self.registered) + 1}"
            self.registered[client_id] = list(body["redirect_uris"])
            return JSONResponse({**body, "client_id": client_id,
                                 "token_endpoint_auth_method": "none"}, status_code=201)

        async def authorize(request: Request) -> Response:
            query = request.query_params
            redirect = query["redirect_uri"]
            if redirect not in self.registered.get(query["client_id"], []) or \
                    query.get("code_challenge_method") != "S256":
                return JSONResponse({"error": "invalid_request"}, status_code=400)
            code = f"code-{len(self.codes) + 1}"
            self.codes[code] = (query["client_id"], redirect, query["code_challenge"],
                                query.get("scope", ""))
            return RedirectResponse(f"{redirect}?code={code}&state={query['state']}",
                                    status_code=302)

        async def token(request: Request) -> JSONResponse:
            form = {k: str(v) for k, v in (await request.form()).items()}
            method, client_id, secret = self._client(request, form)
            self.grants.append({**form, "auth_method": method})
            listed = {"basic": "client_secret_basic", "post": "client_secret_post"}.get(method)
            if (method != "none" and (client_id, secret) != (self.client_id, self.client_secret)) \
                    or (listed and self.auth_methods and listed not in self.auth_methods):
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            if form.get("grant_type") in ("authorization_code", "refresh_token"):
                return self._user_token(form, client_id)
            if form.get("grant_type") == JWT_BEARER:
                return self._assertion_token(form)
            if method == "none":
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            issued = f"token-{len(self.grants)}"
            self.valid.add(issued)
            self.scopes[issued] = form.get("scope", "")
            return JSONResponse({"access_token": issued, "token_type": "Bearer",
                                 "expires_in": 3600})

        return auth_app(metadata, register, authorize, token)


class BearerGate:
    """ASGI middleware: protected-resource metadata, 401 without a valid bearer token, and 403
    ``insufficient_scope`` for a call of a tool in ``tool_scopes`` whose token lacks its scope."""

    def __init__(self, app: ASGIApp, auth: AuthServer, *, advertise: bool = True,
                 tool_scopes: dict[str, str] | None = None, path: str = "mcp") -> None:
        self.app, self.auth, self.advertise = app, auth, advertise
        self.tool_scopes = tool_scopes or {}
        self.path = path
        """The MCP endpoint (``mcp``, or ``sse`` for the SSE transport): the resource."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        origin = f"http://{headers[b'host'].decode()}"
        if scope["path"].startswith("/.well-known/oauth-protected-resource") and self.advertise:
            body = {"resource": f"{origin}/{self.path}",
                    "authorization_servers": [self.auth.base]}
            await send_response(send, 200, json.dumps(body).encode(), b"application/json")
            return
        token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
        if token not in self.auth.valid:
            challenge = (f'Bearer resource_metadata="{origin}/.well-known/oauth-protected-resource'
                         f'/{self.path}"' if self.advertise else "Bearer")
            await send_response(send, 401, b"unauthorized", b"text/plain",
                        [(b"www-authenticate", challenge.encode())])
            return
        if self.tool_scopes:
            receive, tool = await called_tool(receive)
            held = self.auth.scopes.get(token, "").split()
            needed = self.tool_scopes.get(tool or "")
            if needed and needed not in held:
                await refuse_scope(send, " ".join([*held, needed]),
                                   f"{origin}/.well-known/oauth-protected-resource/{self.path}")
                return
        await self.app(scope, receive, send)


async def called_tool(receive: Receive) -> tuple[Receive, str | None]:
    """Read a request's whole body: the tool a ``tools/call`` names (else None), and a
    ``receive`` that hands the app the body again."""
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    tool = parsed["params"].get("name") if isinstance(parsed, dict) \
        and parsed.get("method") == "tools/call" else None
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay, tool


async def refuse_scope(send: Send, scope: str, resource_metadata: str) -> None:
    """A 403 ``insufficient_scope`` (RFC 6750 §3.1) naming the scope the request needs."""
    challenge = (f'Bearer error="insufficient_scope", scope="{scope}", '
                 f'resource_metadata="{resource_metadata}"')
    await send_response(send, 403, json.dumps({"error": "insufficient_scope"}).encode(),
                        b"application/json", [(b"www-authenticate", challenge.encode())])


def pkce_verified(verifier: str, challenge: str) -> bool:
    """Whether ``verifier`` hashes (S256) to ``challenge``."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == challenge


def metadata_body(base: str, grant_types: list[str], auth_methods: list[str]) -> dict[str, Any]:
    """The RFC 8414 metadata of an authorization server at ``base``."""
    return {"issuer": base, "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token", "registration_endpoint": f"{base}/register",
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": grant_types,
            "token_endpoint_auth_methods_supported": auth_methods}


def auth_app(metadata: Any, register: Any, authorize: Any, token: Any) -> Starlette:
    """The authorization server's app from its four endpoints."""
    return Starlette(routes=[
        Route("/.well-known/oauth-authorization-server", metadata),
        Route("/register", register, methods=["POST"]),
        Route("/authorize", authorize),
        Route("/token", token, methods=["POST"])])


async def send_response(send: Send, status: int, body: bytes, content_type: bytes,
                        extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a whole HTTP response from ASGI middleware."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serve_gated(auth: Any, gate: Callable[[], ASGIApp], path: str = "mcp"
                      ) -> AsyncIterator[str]:
    """Serve ``auth``'s app (setting its ``base``) and what ``gate`` builds; yield the MCP URL
    (``<base>/<path>``)."""
    async with serve_app(auth.app()) as auth_base:
        auth.base = auth_base
        async with serve_app(gate()) as base:
            yield f"{base}/{path}"


@contextlib.asynccontextmanager
async def protected_mcp(server: Any, auth: AuthServer, *, advertise: bool = True,
                        tool_scopes: dict[str, str] | None = None, transport: str = "http"
                        ) -> AsyncIterator[str]:
    """Serve the authorization server and the gated MCP server (streamable HTTP, or SSE);
    yield the MCP URL."""
    path = "sse" if transport == "sse" else "mcp"
    app = server.sse_app() if transport == "sse" else server.streamable_http_app()
    async with serve_gated(
            auth, lambda: BearerGate(app, auth, advertise=advertise, tool_scopes=tool_scopes,
                                     path=path), path) as url:
        yield url
