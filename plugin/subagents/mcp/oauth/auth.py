"""Authentication for an MCP server: api_key / token / headers / a custom module, or OAuth client
credentials through the MCP SDK's provider.

The OAuth provider runs the spec's flow on a 401: protected-resource and authorization-server
metadata discovery (unless ``token_url`` is configured), a ``client_credentials`` grant with HTTP
Basic or form-post client authentication and the RFC 8707 ``resource`` parameter, and a fresh token
whenever the server answers 401 again (an expired or revoked token). Tokens live in memory.
Secrets are ``${ENV}`` references resolved when needed, never logged.

Without a configured ``auth_method`` a client secret goes in HTTP Basic, the method every
authorization server must support (RFC 6749 §2.3.1), unless the server's metadata lists only
form-post (RFC 8414 ``token_endpoint_auth_methods_supported``): see :func:`token_auth_method`.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subagents.config._base import resolve_env
from subagents.config.endpoints import McpServerConfig, OAuthConfig

if TYPE_CHECKING:
    from subagents.mcp.oauth.login import LoginHandlers


class HeaderBuilder:
    """Builds the static auth headers of one server (OAuth is an ``httpx2.Auth``, see below)."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._custom: Any = None

    def _env(self, value: str, what: str) -> str:
        return resolve_env(value, what=f"{what} of MCP server {self.config.name!r}")

    async def headers(self) -> dict[str, str]:
        """The HTTP headers for the server.

        The configured headers, plus an API key, a bearer token or a custom module's headers.
        Environment variable references in the values are resolved.
        """
        cfg = self.config
        out = {name: self._env(value, f"header {name}") for name, value in cfg.headers.items()}
        if cfg.api_key:
            key = self._env(cfg.api_key, "api_key")
            out[cfg.header_name] = cfg.header_format.format(key=key)
        elif cfg.token:
            out["Authorization"] = f"Bearer {self._env(cfg.token, 'token')}"
        elif cfg.module:
            out.update(await self._module_headers())
        return out

    async def _module_headers(self) -> dict[str, str]:
        if self._custom is None:
            mod_name, _, cls_name = str(self.config.module).rpartition(".")
            self._custom = getattr(importlib.import_module(mod_name), cls_name)()
        result = self._custom.get_headers()
        if inspect.isawaitable(result):
            result = await result
        return {str(k): str(v) for k, v in dict(result).items()}


class _MemoryTokenStorage:
    """Tokens and client information for one server, kept for the life of the process."""

    def __init__(self) -> None:
        self._tokens: Any = None
        self._client_info: Any = None

    async def get_tokens(self) -> Any:
        return self._tokens

    async def set_tokens(self, tokens: Any) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> Any:
        return self._client_info

    async def set_client_info(self, client_info: Any) -> None:
        self._client_info = client_info


def token_auth_method(configured: str | None, metadata: Any) -> str:
    """How a token request authenticates a client that has a secret.

    A configured ``auth_method`` always wins. Otherwise HTTP Basic (``client_secret_basic``),
    unless the authorization server's metadata lists ``client_secret_post`` and not Basic; a
    server whose metadata lists no methods (or that has none) gets Basic, the RFC default.
    """
    if configured:
        return configured
    listed = getattr(metadata, "token_endpoint_auth_methods_supported", None) or []
    if "client_secret_post" in listed and "client_secret_basic" not in listed:
        return "client_secret_post"
    return "client_secret_basic"


def scope_refused(response: Any) -> str | None:
    """The scope a ``403`` with ``error="insufficient_scope"`` asks for (RFC 6750 §3.1; ``""``
    when it names none); None for any other response."""
    from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth

    if response.status_code != 403 \
            or extract_field_from_www_auth(response, "error") != "insufficient_scope":
        return None
    return extract_scope_from_www_auth(response) or ""


class StepUpWatch:
    """For a provider (the SDK's ``OAuthClientProvider``): notes the scope a ``403
    insufficient_scope`` to the request asks for (``step_up``, None after any other answer).
    The SDK then re-authorizes with the larger scope; with ``reauthorize_on_step_up`` False
    (nobody can sign in again) the 403 stands as the request's answer instead."""

    step_up: str | None = None
    reauthorize_on_step_up = True

    async def _auth_flow(self, request: Any) -> AsyncGenerator[Any, Any]:
        flow = super()._auth_flow(request)  # type: ignore[misc]
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request:
                    self.step_up = scope_refused(response)
                    if self.step_up is not None and not self.reauthorize_on_step_up:
                        return
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


def oauth_provider(config: McpServerConfig, root: Path | None = None,
                   login: LoginHandlers | None = None) -> Any:
    """An ``httpx2.Auth`` running the configured OAuth grant for ``config`` (None without oauth).

    For the ``authorization_code`` grant, ``login`` supplies the browser and callback handlers
    (``subagents mcp login``); without them a missing or unusable login fails the connection
    with the command to run.
    """
    oauth = config.oauth
    if oauth is None or not config.url:
        return None
    if oauth.grant == "authorization_code":
        from subagents.mcp.oauth.login import authorization_code_provider

        return authorization_code_provider(config, root or Path.cwd(), login)
    return _client_credentials_provider(config, oauth)


def _client_credentials_provider(config: McpServerConfig, oauth: OAuthConfig) -> Any:
    import httpx2
    from mcp.client.auth.extensions import client_credentials as cc
    from mcp.client.auth.utils import union_scopes
    from mcp.shared.exceptions import MCPDeprecationWarning

    settings = oauth
    client_id = str(oauth.client_id)
    where = f"of MCP server {config.name!r}"
    secret = resolve_env(oauth.client_secret, what=f"oauth.client_secret {where}") \
        if oauth.client_secret else ""
    assertion = None
    if oauth.auth_method == "private_key_jwt":
        key = resolve_env(str(oauth.private_key), what=f"oauth.private_key {where}")
        assertion = cc.SignedJWTParameters(
            issuer=client_id, subject=client_id, signing_key=key,
            signing_algorithm=oauth.signing_algorithm).create_assertion_provider()
    method: Any = oauth.auth_method or "client_secret_basic"  # see token_auth_method

    class _ClientCredentials(StepUpWatch, cc.ClientCredentialsOAuthProvider):
        async def _exchange_token_client_credentials(self) -> httpx2.Request:
            cc._require_metadata_for_configured_issuer(self.context, settings.issuer)
            client = self.context.client_info
            if assertion is None and client is not None:
                method = token_auth_method(settings.auth_method, self.context.oauth_metadata)
                self.context.client_info = client.model_copy(
                    update={"token_endpoint_auth_method": method})
            data, headers = self.context.prepare_token_auth(
                {"grant_type": "client_credentials"},
                {"Content-Type": "application/x-www-form-urlencoded"})
            if assertion is not None:
                # RFC 7523: the assertion's audience is the authorization server's issuer
                metadata = self.context.oauth_metadata
                audience = str(metadata.issuer) if metadata else self._get_token_endpoint()
                data["client_id"] = client_id
                data["client_assertion"] = await assertion(audience)
                data["client_assertion_type"] = (
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
            data["resource"] = settings.resource or self.context.get_resource_url()
            scope = settings.scope or self.context.client_metadata.scope
            if self.step_up:  # a step-up: the scopes held so far and the one asked for
                scope = union_scopes(scope, self.step_up)
            if scope:
                data["scope"] = scope
            if settings.audience:
                data["audience"] = settings.audience
            extensions = {"timeout": httpx2.Timeout(settings.timeout).as_dict()} \
                if settings.timeout else None
            return httpx2.Request("POST", self._get_token_endpoint(), data=data,
                                  headers=headers, extensions=extensions)

        def _get_token_endpoint(self) -> str:
            if settings.token_url and self.context.oauth_metadata is None:
                return settings.token_url
            return str(super()._get_token_endpoint())

    with warnings.catch_warnings():
        # without an issuer the SDK warns that the server picks the authorization server;
        # a configured token_url pins it instead
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return _ClientCredentials(
            server_url=str(config.url), storage=_MemoryTokenStorage(),
            client_id=client_id, client_secret=secret,
            token_endpoint_auth_method=method, scope=oauth.scope,
            issuer=oauth.issuer)
