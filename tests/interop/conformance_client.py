"""The client under test for ``@modelcontextprotocol/conformance client``.

The conformance runner starts this script with the scenario's server URL as the last argument,
the scenario name in ``MCP_CONFORMANCE_SCENARIO`` and scenario data (client credentials, ...) as
JSON in ``MCP_CONFORMANCE_CONTEXT``. It connects through our own MCP layer
(``subagents.mcp.MCPServerConnection``, configured as ``endpoints.yml`` would configure it), lists
the tools, calls each one with arguments filled from its schema, and exits 0 unless connecting
failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
from subagents.cli.mcp_login import interactive_connection
from subagents.config.endpoints import McpServerConfig
from subagents.mcp import MCPServerConnection
from subagents.mcp.callbacks import ElicitationOwner, elicitation_owner, with_defaults

_SAMPLE = {"number": 1, "integer": 1, "string": "x", "boolean": True}


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    return {name: _SAMPLE.get(str(spec.get("type")), "x") for name, spec in props.items()
            if name in (schema.get("required") or [])}


async def _browser(url: str) -> None:
    """Stands in for the person: the conformance authorization server approves at once and
    redirects to our local callback."""
    async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as client:
        await client.get(url)


async def _authorization_server(url: str) -> str:
    """What an operator looks up before configuring cross-app access: the authorization server
    the MCP server names in its protected-resource metadata (RFC 9728)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    async with httpx2.AsyncClient(timeout=30) as client:
        for where in (f"/.well-known/oauth-protected-resource{parts.path}",
                      "/.well-known/oauth-protected-resource"):
            response = await client.get(origin + where)
            if response.status_code == 200:
                return str(response.json()["authorization_servers"][0])
    raise RuntimeError("no protected-resource metadata")


async def _config(url: str, scenario: str, context: dict[str, Any]) -> McpServerConfig:
    settings: dict[str, Any] = {"name": "conformance", "type": "http", "url": url, "timeout": 30}
    if "idp_id_token" in context:  # cross-app access
        os.environ["CONFORMANCE_CLIENT_SECRET"] = str(context["client_secret"])
        os.environ["CONFORMANCE_ID_TOKEN"] = str(context["idp_id_token"])
        settings["oauth"] = {
            "grant": "identity_assertion", "client_id": context["client_id"],
            "client_secret": "${CONFORMANCE_CLIENT_SECRET}",
            "issuer": await _authorization_server(url), "id_token": "${CONFORMANCE_ID_TOKEN}",
            "idp_token_url": context["idp_token_endpoint"],
            "idp_client_id": context["idp_client_id"]}
        return McpServerConfig(**settings)
    if scenario.startswith("auth/") and not context:
        # the suite's authorization server knows this metadata document (basic-cimd)
        settings["oauth"] = {"grant": "authorization_code", "client_metadata_url":
                             "https://conformance-test.local/client-metadata.json"}
    elif "client_secret" in context:
        # as docs/mcp.md tells a user: no auth_method (the server's metadata decides); a
        # pre-registered client of a login is the authorization-code grant with its client_id
        os.environ["CONFORMANCE_CLIENT_SECRET"] = str(context["client_secret"])
        settings["oauth"] = {"client_id": context["client_id"],
                             "client_secret": "${CONFORMANCE_CLIENT_SECRET}"}
        if not scenario.startswith("auth/client-credentials-"):
            settings["oauth"]["grant"] = "authorization_code"
    if "private_key_pem" in context:
        os.environ["CONFORMANCE_PRIVATE_KEY"] = str(context["private_key_pem"])
        settings["oauth"] = {"client_id": context["client_id"], "auth_method": "private_key_jwt",
                             "private_key": "${CONFORMANCE_PRIVATE_KEY}",
                             "signing_algorithm": context.get("signing_algorithm", "RS256")}
    return McpServerConfig(**settings)


async def _call(conn: MCPServerConnection, name: str, arguments: dict[str, Any]) -> Any:
    """Call a tool as an agent run would; a server that asks for input gets the answer of a
    user who accepts every default (through the same registry the agents use)."""
    from mcp.types import ElicitResult

    owner = ElicitationOwner(key=f"conformance:{name}", timeout=30)
    while True:
        with elicitation_owner(owner):
            result = await conn.elicitations.call(
                lambda: conn.call_tool(name, arguments, timeout=10))
        if result is not None:
            return result
        question = conn.elicitations.question(owner.key)
        content = with_defaults(getattr(question, "requested_schema", None) or {}, {}) \
            if getattr(question, "mode", "form") == "form" else None
        conn.elicitations.answer(owner.key, ElicitResult(action="accept", content=content))


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    config = await _config(url, scenario, context)
    root = Path(tempfile.mkdtemp(prefix="conformance-"))
    try:
        async with contextlib.AsyncExitStack() as stack:
            if config.oauth is not None and config.oauth.grant == "authorization_code":
                conn = await stack.enter_async_context(
                    interactive_connection(config, root, open_url=_browser))
            else:
                conn = MCPServerConnection(config, root=root)
                stack.push_async_callback(conn.close)
                await conn.start(attempts=1)
            for tool in await conn.tools():
                result = await _call(conn, tool.name, _arguments(tool.input_schema))
                print(f"{tool.name}: {result.result or result.error_message}")
    except Exception as exc:  # the exit status is the report
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
