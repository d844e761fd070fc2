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
import json
import os
import sys
from typing import Any

from subagents.config.endpoints import McpServerConfig
from subagents.mcp import MCPServerConnection

_SAMPLE = {"number": 1, "integer": 1, "string": "x", "boolean": True}


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    return {name: _SAMPLE.get(str(spec.get("type")), "x") for name, spec in props.items()
            if name in (schema.get("required") or [])}


def _config(url: str, scenario: str, context: dict[str, Any]) -> McpServerConfig:
    settings: dict[str, Any] = {"name": "conformance", "type": "http", "url": url, "timeout": 30}
    if "client_secret" in context:
        os.environ["CONFORMANCE_CLIENT_SECRET"] = str(context["client_secret"])
        method = "client_secret_post" if scenario.endswith("-post") else "client_secret_basic"
        settings["oauth"] = {"client_id": context["client_id"], "auth_method": method,
                             "client_secret": "${CONFORMANCE_CLIENT_SECRET}"}
    if "private_key_pem" in context:
        os.environ["CONFORMANCE_PRIVATE_KEY"] = str(context["private_key_pem"])
        settings["oauth"] = {"client_id": context["client_id"], "auth_method": "private_key_jwt",
                             "private_key": "${CONFORMANCE_PRIVATE_KEY}",
                             "signing_algorithm": context.get("signing_algorithm", "RS256")}
    return McpServerConfig(**settings)


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    conn = MCPServerConnection(_config(url, scenario, context))
    try:
        await conn.start(attempts=1)
        for tool in await conn.tools():
            result = await conn.call_tool(tool.name, _arguments(tool.input_schema), timeout=10)
            print(f"{tool.name}: {result.result or result.error_message}")
    except Exception as exc:  # the exit status is the report
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        await conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
