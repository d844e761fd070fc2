"""Credentials taken from the conversation, and how MCP sessions are shared.

An MCP server's ``headers`` (and its ``token``) may contain templates over the conversation:
``{{ metadata.<key> }}`` (allow-listed message metadata) or ``{{ slots.<name> }}``. They are
resolved for each call from the conversation that makes it. Because a session's HTTP headers
are fixed when it opens, a server with templates needs its own sessions: ``session:
per_conversation`` or ``session: {per_user: metadata.<key>}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import field_validator

from subagents.config._base import StrictModel
from subagents.exceptions import ConfigIssue

if TYPE_CHECKING:
    from subagents._yaml import YamlDoc
    from subagents.config.endpoints import McpServerConfig

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
_NAME = re.compile(r"^\s*(metadata|slots)\.([A-Za-z_][A-Za-z0-9_\-]*)\s*$")
TEMPLATE_CODE = "mcp.template.invalid_name"


def is_template(value: str) -> bool:
    """Whether ``value`` contains a ``{{ ... }}`` placeholder."""
    return "{{" in value


def template_names(value: str) -> list[tuple[str, str]]:
    """The ``(source, name)`` pairs a template uses; ValueError for anything else."""
    names = []
    for match in _PLACEHOLDER.finditer(value):
        name = _NAME.match(match.group(1))
        if name is None:
            raise ValueError(f"{TEMPLATE_CODE}: {{{{{match.group(1)}}}}} is not a template "
                             "name; use {{ metadata.<key> }} or {{ slots.<name> }}")
        names.append((name.group(1), name.group(2)))
    return names


def render_template(value: str, values: Mapping[str, str]) -> str:
    """``value`` with each placeholder replaced by ``values["<source>.<name>"]``."""

    def replace(match: re.Match[str]) -> str:
        name = _NAME.match(match.group(1))
        assert name is not None  # checked when the configuration was loaded
        return values[f"{name.group(1)}.{name.group(2)}"]

    return _PLACEHOLDER.sub(replace, value)


def parse_reference(value: str) -> tuple[str, str]:
    """``metadata.<key>`` or ``slots.<name>`` as ``(source, name)``; ValueError otherwise."""
    match = _NAME.match(value)
    if match is None:
        raise ValueError(f"{TEMPLATE_CODE}: {value!r} must be metadata.<key> or slots.<name>")
    return match.group(1), match.group(2)


class PerUserSession(StrictModel):
    """One session per user, the user named by a metadata key or a slot."""

    per_user: str
    """``metadata.<key>`` or ``slots.<name>``: the value that identifies the user."""

    @field_validator("per_user")
    @classmethod
    def _reference(cls, value: str) -> str:
        parse_reference(value)
        return value.strip()


SessionMode = Literal["shared", "per_conversation"] | PerUserSession
"""``shared`` (one session per process), ``per_conversation`` or ``{per_user: ...}``."""


def check_template_slots(doc: YamlDoc | None, servers: list[McpServerConfig],
                         slot_known: Callable[[str], bool]) -> list[ConfigIssue]:
    """Issues for slots named by MCP server templates (and ``per_user``) that the domain
    does not define. Metadata keys need no declaration: naming them allow-lists them."""
    if doc is None:
        return []
    raw = doc.data.get("mcp_servers") if isinstance(doc.data, dict) else None
    index = {item.get("name"): i for i, item in enumerate(raw or []) if isinstance(item, dict)}
    issues = []
    for server in servers:
        base: tuple[str | int, ...] = ("mcp_servers", index.get(server.name, 0))
        places: list[tuple[tuple[str | int, ...], str]] = [
            ((*base, "headers", header), value) for header, value in server.headers.items()]
        if server.token:
            places.append(((*base, "token"), server.token))
        if server.oauth is not None and server.oauth.id_token:
            places.append(((*base, "oauth", "id_token"), server.oauth.id_token))
        if isinstance(server.session, PerUserSession):
            places.append(((*base, "session", "per_user"), f"{{{{ {server.session.per_user} }}}}"))
        for loc, value in places:
            for source, name in template_names(value):
                if source == "slots" and not slot_known(name):
                    issues.append(doc.issue(
                        "endpoints.mcp_server.unknown_slot",
                        f"MCP server {server.name!r} uses slot {name!r}, which is not in the "
                        "domain", loc, hint="add the slot to the domain or fix the name"))
    return issues


def metadata_keys(servers: list[McpServerConfig]) -> set[str]:
    """Message metadata keys the MCP servers' templates and ``per_user`` read."""
    keys = {name for server in servers for source, name in server.template_refs()
            if source == "metadata"}
    for server in servers:
        if isinstance(server.session, PerUserSession):
            source, name = parse_reference(server.session.per_user)
            if source == "metadata":
                keys.add(name)
    return keys
