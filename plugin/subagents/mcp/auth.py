"""Request headers for an MCP server: api_key / token / headers / OAuth client credentials.

Secrets are ``${ENV}`` references resolved when the headers are built, never logged.
"""

from __future__ import annotations

import importlib
import inspect
import time
from typing import Any

from ..config._base import resolve_env
from ..config.endpoints import McpServerConfig
from ..exceptions import MCPConnectionError


class HeaderBuilder:
    """Builds the auth headers of one server (caches an OAuth token until it expires)."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._oauth_token: str | None = None
        self._oauth_expires = 0.0
        self._custom: Any = None

    def _env(self, value: str, what: str) -> str:
        return resolve_env(value, what=f"{what} of MCP server {self.config.name!r}")

    async def headers(self) -> dict[str, str]:
        cfg = self.config
        out = {name: self._env(value, f"header {name}") for name, value in cfg.headers.items()}
        if cfg.api_key:
            key = self._env(cfg.api_key, "api_key")
            out[cfg.header_name] = cfg.header_format.format(key=key)
        elif cfg.token:
            out["Authorization"] = f"Bearer {self._env(cfg.token, 'token')}"
        elif cfg.oauth is not None:
            out["Authorization"] = f"Bearer {await self._oauth()}"
        elif cfg.module:
            out.update(await self._module_headers())
        return out

    async def _oauth(self) -> str:
        if self._oauth_token and time.monotonic() < self._oauth_expires - 30:
            return self._oauth_token
        import httpx2

        oauth = self.config.oauth
        assert oauth is not None
        form = {"grant_type": "client_credentials", "client_id": oauth.client_id,
                "client_secret": self._env(oauth.client_secret, "oauth.client_secret")}
        if oauth.scope:
            form["scope"] = oauth.scope
        if oauth.audience:
            form["audience"] = oauth.audience
        async with httpx2.AsyncClient(timeout=oauth.timeout or 10) as client:
            response = await client.post(oauth.token_url, data=form)
        if response.status_code != 200:
            raise MCPConnectionError(
                f"OAuth token request for MCP server {self.config.name!r} failed with HTTP "
                f"{response.status_code}", code="mcp.auth_failed")
        payload = response.json()
        self._oauth_token = str(payload["access_token"])
        self._oauth_expires = time.monotonic() + float(payload.get("expires_in", 3600))
        return self._oauth_token

    async def _module_headers(self) -> dict[str, str]:
        if self._custom is None:
            mod_name, _, cls_name = str(self.config.module).rpartition(".")
            self._custom = getattr(importlib.import_module(mod_name), cls_name)()
        result = self._custom.get_headers()
        if inspect.isawaitable(result):
            result = await result
        return {str(k): str(v) for k, v in dict(result).items()}
