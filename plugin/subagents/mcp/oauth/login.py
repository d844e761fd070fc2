"""OAuth authorization-code login for MCP servers that need a person to sign in.

``subagents mcp login <server>`` runs the flow once, in a terminal: discovery, dynamic client
registration (unless ``client_id`` is configured: then that client is used from the first request
and registration is never called), PKCE, the browser sign-in with a local callback on 127.0.0.1,
and the token exchange (a configured client's secret sent as ``auth_method`` says, or as the
server's metadata allows). The client registration and tokens are stored in
``<project>/.subagents/mcp-auth/<server>.json`` (readable by the owner only), where the server
process finds them; the MCP SDK's provider refreshes the access token from there. A server process
never opens a browser: without a usable login, connecting fails with the command to run.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

import structlog

from subagents.config._base import resolve_env
from subagents.config.endpoints import McpServerConfig
from subagents.exceptions import MCPConnectionError
from subagents.mcp.oauth.policy import StepUpWatch, token_auth_method

if TYPE_CHECKING:
    pass

log = structlog.get_logger("subagents.mcp")

LOGIN_TIMEOUT = 300.0
"""Seconds the login waits for the browser to come back."""


class LoginRequiredError(MCPConnectionError):
    """The server needs a login that has not been done (or no longer works)."""

    code = "mcp.login_required"


def token_file(root: Path, server: str) -> Path:
    """Where the login of ``server`` is stored."""
    return root / ".subagents" / "mcp-auth" / f"{server}.json"


class FileTokenStorage:
    """The SDK's ``TokenStorage`` on a JSON file (tokens and the client registration)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, key: str, value: Any) -> None:
        self._write_value(key, value.model_dump(mode="json", exclude_none=True))

    def _write_value(self, key: str, value: Any) -> None:
        data = self._read()
        data[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        tmp.replace(self.path)

    async def get_tokens(self) -> Any:
        """The stored OAuth tokens, or None."""
        from mcp.shared.auth import OAuthToken

        raw = self._read().get("tokens")
        return OAuthToken.model_validate(raw) if raw else None

    async def set_tokens(self, tokens: Any) -> None:
        """Store OAuth tokens and when they expire."""
        self._write("tokens", tokens)
        self._write_value("expires_at", time.time() + float(tokens.expires_in)
                          if tokens.expires_in else None)

    def save_metadata(self, oauth_metadata: Any, resource_metadata: Any) -> None:
        """Remember where the authorization server is, for refreshing after a restart."""
        for key, value in (("oauth_metadata", oauth_metadata),
                           ("resource_metadata", resource_metadata)):
            if value is not None:
                self._write(key, value)

    def load_metadata(self) -> tuple[Any, Any]:
        """The authorization-server and protected-resource metadata of the last login."""
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

        data = self._read()
        asm, prm = data.get("oauth_metadata"), data.get("resource_metadata")
        return (OAuthMetadata.model_validate(asm) if asm else None,
                ProtectedResourceMetadata.model_validate(prm) if prm else None)

    def expires_at(self) -> float | None:
        """When the stored access token expires (seconds since the epoch), if known."""
        value = self._read().get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    async def get_client_info(self) -> Any:
        """The stored OAuth client registration, or None."""
        from mcp.shared.auth import OAuthClientInformationFull

        raw = self._read().get("client_info")
        return OAuthClientInformationFull.model_validate(raw) if raw else None

    async def set_client_info(self, client_info: Any) -> None:
        """Store the OAuth client registration."""
        self._write("client_info", client_info)


def configured_client(config: McpServerConfig, redirect_uri: str) -> Any:
    """The client configured with ``oauth.client_id`` (None without one), as the SDK's client
    information: with a secret, confidential (its token-endpoint authentication is settled per
    request, see :class:`ConfiguredLogin`); without one, public."""
    from mcp.shared.auth import OAuthClientInformationFull

    oauth = config.oauth
    if oauth is None or not oauth.client_id:
        return None
    secret = resolve_env(oauth.client_secret, what=f"oauth.client_secret of MCP server "
                         f"{config.name!r}") if oauth.client_secret else None
    return OAuthClientInformationFull.model_validate({
        "client_id": oauth.client_id, "client_secret": secret, "redirect_uris": [redirect_uri],
        "token_endpoint_auth_method": (oauth.auth_method or "client_secret_basic") if secret
        else "none", "grant_types": ["authorization_code", "refresh_token"]})


class ConfiguredLogin:
    """What the configuration settles in a sign-in, for a provider (the SDK's
    ``OAuthClientProvider``): the sign-in asks for the configured ``scope`` as well as what the
    server asks for (the SDK alone would ask only for the latter), and the token requests (code
    exchange and refresh) of a configured confidential client authenticate it as ``auth_method``
    says, or, without one, as the authorization server's metadata allows (Basic by default)."""

    context: Any
    configured_auth: tuple[str, str | None] | None = None
    """(client id, configured ``auth_method``) of the configured client; None: none configured."""
    configured_scope: str | None = None

    async def _perform_authorization(self) -> Any:
        from mcp.client.auth.utils import union_scopes

        metadata = self.context.client_metadata
        metadata.scope = union_scopes(self.configured_scope, metadata.scope)
        return await super()._perform_authorization()  # type: ignore[misc]

    def _settle_auth_method(self) -> None:
        client = self.context.client_info
        if self.configured_auth is None or client is None or not client.client_secret \
                or client.client_id != self.configured_auth[0]:
            return
        method = token_auth_method(self.configured_auth[1], self.context.oauth_metadata)
        if client.token_endpoint_auth_method != method:
            self.context.client_info = client.model_copy(
                update={"token_endpoint_auth_method": method})

    async def _exchange_token_authorization_code(self, auth_code: str,
                                                 code_verifier: str) -> Any:
        self._settle_auth_method()
        return await super()._exchange_token_authorization_code(  # type: ignore[misc]
            auth_code, code_verifier)

    async def _refresh_token(self) -> Any:
        self._settle_auth_method()
        return await super()._refresh_token()  # type: ignore[misc]


@dataclass
class LoginHandlers:
    """How a login reaches the person: open the sign-in page, then wait for the redirect."""

    open_url: Callable[[str], Awaitable[None]]
    redirect_uri: str
    wait_for_callback: Callable[[], Awaitable[Any]]


def authorization_code_provider(config: McpServerConfig, root: Path,
                                login: LoginHandlers | None) -> Any:
    """The SDK's ``OAuthClientProvider`` for ``config``, storing its state next to the project."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    oauth = config.oauth
    assert oauth is not None
    storage = FileTokenStorage(token_file(root, config.name))
    redirect = login.redirect_uri if login else f"http://127.0.0.1:{oauth.redirect_port}/callback"
    client = configured_client(config, redirect)
    metadata = OAuthClientMetadata.model_validate({
        "redirect_uris": [redirect], "client_name": "subagents",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": client.token_endpoint_auth_method if client else "none",
        "scope": oauth.scope})
    server = config.name
    method, scope = oauth.auth_method, oauth.scope

    async def login_required(_url: str = "") -> None:
        raise LoginRequiredError(
            f"MCP server {server!r} needs a login: run `subagents mcp login {server}`")

    async def no_callback() -> Any:
        raise LoginRequiredError(f"MCP server {server!r} needs a login")

    class _Provider(ConfiguredLogin, StepUpWatch, OAuthClientProvider):
        configured_auth = (client.client_id, method) if client else None
        configured_scope = scope
        # a server process has nobody to sign in again: a step-up's 403 is the answer, and the
        # call fails naming the scope (MCPServerConnection); an interactive login re-authorizes
        reauthorize_on_step_up = login is not None

        async def _initialize(self) -> None:
            if login is None and await storage.get_tokens() is None:
                await login_required()  # before anything is registered or stored
            await super()._initialize()
            if client is not None:  # the configured client, never a registration
                self.context.client_info = client
            # the SDK forgets when a stored token expires; without this an expired token is
            # sent, refused, and the refresh token never tried
            self.context.token_expiry_time = storage.expires_at()
            if self.context.oauth_metadata is None:
                asm, prm = storage.load_metadata()
                self.context.oauth_metadata = asm
                self.context.protected_resource_metadata = prm
                if asm is not None:
                    self.context.auth_server_url = str(asm.issuer)

        async def _handle_token_response(self, response: Any) -> None:
            await super()._handle_token_response(response)
            storage.save_metadata(self.context.oauth_metadata,
                                  self.context.protected_resource_metadata)

    return _Provider(server_url=str(config.url), client_metadata=metadata, storage=storage,
                     client_metadata_url=oauth.client_metadata_url,
                     redirect_handler=login.open_url if login else login_required,
                     callback_handler=login.wait_for_callback if login else no_callback)


class _CallbackServer:
    """A one-shot HTTP listener on 127.0.0.1 for the authorization redirect."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._results: asyncio.Queue[Any] = asyncio.Queue()
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}/callback"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from mcp.shared.auth import AuthorizationCodeResult

        try:
            request_line = (await reader.readline()).decode("latin-1")
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            target = request_line.split(" ")[1] if " " in request_line else "/"
            query = {k: v[0] for k, v in parse_qs(urlparse(target).query).items()}
            if urlparse(target).path == "/callback":
                if "code" in query:
                    self._results.put_nowait(AuthorizationCodeResult(
                        code=query["code"], state=query.get("state"), iss=query.get("iss")))
                    body = b"Signed in. You can close this window."
                else:
                    self._results.put_nowait(MCPConnectionError(
                        f"the sign-in was refused: {query.get('error', 'no code')}",
                        code="mcp.login_failed"))
                    body = b"Sign-in failed. See the terminal."
            else:
                body = b"Not found."
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
        finally:
            writer.close()

    async def wait(self) -> Any:
        result = await asyncio.wait_for(self._results.get(), LOGIN_TIMEOUT)
        if isinstance(result, Exception):
            raise result
        return result

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
