"""Checks for MCP servers that each end user authorizes themselves (``oauth.per_user``).

Such a server needs to know who the user is (``session: {per_user: ...}``), where the user's
browser comes back to (``oauth.public_url``) and a key to encrypt the stored tokens with
(:data:`TOKEN_KEY_ENV`). ``validate`` reports what is missing with a stable code.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from subagents.config.mcp_sessions import PerUserSession
from subagents.exceptions import ConfigIssue

if TYPE_CHECKING:
    from subagents._yaml import YamlDoc
    from subagents.config.endpoints import McpServerConfig

TOKEN_KEY_ENV = "SUBAGENTS_OAUTH_TOKEN_KEY"
"""Environment variable with the Fernet key(s) that encrypt users' tokens at rest: one key, or
several separated by commas (the first encrypts, all decrypt: rotation)."""


def token_key_problem() -> tuple[str, str] | None:
    """``(code, message)`` when the token key is unusable, else None."""
    raw = os.environ.get(TOKEN_KEY_ENV, "").strip()
    if not raw:
        return ("mcp.oauth.token_key_missing",
                f"users' tokens are encrypted with a key from {TOKEN_KEY_ENV}, which is not set")
    try:
        from cryptography.fernet import Fernet
    except ImportError:
        return ("mcp.oauth.extra_missing",
                "encrypting users' tokens needs the 'cryptography' package")
    for part in raw.split(","):
        try:
            Fernet(part.strip().encode())
        except ValueError:
            return ("mcp.oauth.token_key_invalid",
                    f"{TOKEN_KEY_ENV} must hold Fernet keys (32 url-safe base64 bytes each)")
    return None


_HINTS = {
    "mcp.oauth.token_key_missing":
        "generate one with: python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'",
    "mcp.oauth.token_key_invalid": "generate a key with cryptography's Fernet.generate_key()",
    "mcp.oauth.extra_missing": "pip install 'subagents[oauth]'",
}


def check_per_user_oauth(doc: YamlDoc | None,
                         servers: list[McpServerConfig]) -> list[ConfigIssue]:
    """Issues for servers with ``oauth.per_user`` that cannot ask their users for consent."""
    if doc is None:
        return []
    raw = doc.data.get("mcp_servers") if isinstance(doc.data, dict) else None
    index = {item.get("name"): i for i, item in enumerate(raw or []) if isinstance(item, dict)}
    issues: list[ConfigIssue] = []
    key_checked = False
    for server in servers:
        oauth = server.oauth
        if oauth is None or not oauth.per_user:
            continue
        base: tuple[str | int, ...] = ("mcp_servers", index.get(server.name, 0))
        if not isinstance(server.session, PerUserSession):
            issues.append(doc.issue(
                "mcp.oauth.per_user_session_missing",
                f"MCP server {server.name!r} is authorized by each user, so it must know who "
                "the user is", (*base, "oauth", "per_user"),
                hint="add 'session: {per_user: metadata.<key>}' (or slots.<name>)"))
        if not oauth.public_url:
            issues.append(doc.issue(
                "mcp.oauth.public_url_missing",
                f"MCP server {server.name!r} sends users to sign in and needs the address "
                "their browser comes back to", (*base, "oauth", "per_user"),
                hint="set oauth.public_url to the address where users reach subagents serve"))
        elif not (oauth.public_url.startswith(("https://", "http://", "${"))):
            issues.append(doc.issue(
                "mcp.oauth.public_url_invalid",
                f"oauth.public_url of MCP server {server.name!r} must be an http(s) address",
                (*base, "oauth", "public_url")))
        if not key_checked:
            key_checked = True
            problem = token_key_problem()
            if problem is not None:
                code, message = problem
                issues.append(doc.issue(code, message, (*base, "oauth", "per_user"),
                                        hint=_HINTS.get(code)))
    return issues
