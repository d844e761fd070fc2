"""Authentication for an MCP server: api_key / token / headers / a custom module, or OAuth client
credentials through the MCP SDK's provider.

The OAuth provider runs the spec's flow on a 401: protected-resource and authorization-server
metadata discovery (unless ``token_url`` is configured), a ``client_credentials`` grant with HTTP
Basic or form-post client authentication and the RFC 8707 ``resource`` parameter, and a fresh token
whenever the server answers 401 again (an expired or revoked token). Tokens live in memory.
Secrets are ``${ENV}`` references resolved when needed, never logged.

Cross-app access (``grant: identity_assertion``) exchanges the user's ID token at the identity
provider for an identity assertion and presents it to the configured authorization server.

Without a configured ``auth_method`` a client secret goes in HTTP Basic, the method every
authorization server must support (RFC 6749 §2.3.1), unless the server's metadata lists only
form-post (RFC 8414 ``token_endpoint_auth_methods_supported``): see :func:`token_auth_method`.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subagents.config._base import resolve_env
from subagents.config.endpoints import McpServerConfig, OAuthConfig
from subagents.config.mcp_sessions import is_template, render_template
from subagents.exceptions import MCPConnectionError
from subagents.mcp.oauth.policy import StepUpWatch, token_auth_method

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


def oauth_provider(config: McpServerConfig, root: Path | None = None,
                   login: LoginHandlers | None = None,
                   template_values: Mapping[str, str] | None = None) -> Any:
    """An ``httpx2.Auth`` running the configured OAuth grant for ``config`` (None without oauth).

    For the ``authorization_code`` grant, ``login`` supplies the browser and callback handlers
    (``subagents mcp login``); without them a missing or unusable login fails the connection
    with the command to run. For cross-app access with an ID token from the conversation,
    ``template_values`` are the conversation's values (None: the session that only lists the
    tools, which then goes without authorization).
    """
    oauth = config.oauth
    if oauth is None or not config.url:
        return None
    if oauth.grant == "authorization_code":
        from subagents.mcp.oauth.login import authorization_code_provider

        return authorization_code_provider(config, root or Path.cwd(), login)
    if oauth.grant == "identity_assertion":
        id_token = str(oauth.id_token)
        if is_template(id_token):
            if template_values is None:
                return None
            id_token = render_template(id_token, template_values)
        else:
            id_token = resolve_env(id_token, what=f"oauth.id_token of MCP server {config.name!r}")
        return _identity_assertion_provider(config, oauth, id_token)
    return _client_credentials_provider(config, oauth)


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
MAX_EXCHANGE_BODY = 65536
"""Bytes of the identity provider's answer read at most."""


def _identity_assertion_provider(config: McpServerConfig, oauth: OAuthConfig,
                                 id_token: str) -> Any:
    """Cross-app access (SEP-990): the identity provider exchanges the user's ID token for an
    identity assertion (RFC 8693), and the SDK's provider presents it to the configured
    authorization server for an access token (RFC 7523 jwt-bearer grant)."""
    import httpx2
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    where = f"of MCP server {config.name!r}"
    idp_secret = resolve_env(oauth.idp_client_secret, what=f"oauth.idp_client_secret {where}") \
        if oauth.idp_client_secret else None

    async def exchange(audience: str, resource: str) -> str:
        data = {"grant_type": TOKEN_EXCHANGE, "subject_token": id_token,
                "subject_token_type": ID_TOKEN_TYPE, "requested_token_type": ID_JAG_TYPE,
                "audience": audience, "resource": resource}
        if oauth.scope:
            data["scope"] = oauth.scope
        auth = None
        if oauth.idp_client_id and idp_secret:
            auth = httpx2.BasicAuth(oauth.idp_client_id, idp_secret)
        elif oauth.idp_client_id:
            data["client_id"] = oauth.idp_client_id
        async with httpx2.AsyncClient(timeout=oauth.timeout or 30) as http, \
                http.stream("POST", str(oauth.idp_token_url), data=data, auth=auth) as response:
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_EXCHANGE_BODY:
                    break
        return _identity_assertion(config.name, response.status_code, body)

    return IdentityAssertionOAuthProvider(
        server_url=str(config.url), storage=_MemoryTokenStorage(),
        client_id=str(oauth.client_id),
        client_secret=resolve_env(str(oauth.client_secret), what=f"oauth.client_secret {where}"),
        issuer=str(oauth.issuer), assertion_provider=exchange, scope=oauth.scope,
        token_endpoint_auth_method=token_auth_method(oauth.auth_method, None))  # type: ignore[arg-type]


def _identity_assertion(server: str, status: int, body: bytes) -> str:
    """The identity assertion in the identity provider's answer; MCPConnectionError if none."""
    import json

    try:
        answer = json.loads(body) if len(body) <= MAX_EXCHANGE_BODY else None
    except ValueError:
        answer = None
    if status != 200 or not isinstance(answer, dict) \
            or answer.get("issued_token_type") != ID_JAG_TYPE \
            or not isinstance(answer.get("access_token"), str):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise MCPConnectionError(
            f"the identity provider of MCP server {server!r} did not exchange the ID token for "
            f"an identity assertion (HTTP {status}{f', {error}' if error else ''})",
            code="mcp.identity_assertion_failed")
    return str(answer["access_token"])


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
