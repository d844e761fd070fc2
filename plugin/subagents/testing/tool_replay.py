"""The replay MCP stand-in: recorded tool results served by a real MCP server on 127.0.0.1.

A test case with ``tool_script`` runs with every MCP server of the project replaced by a stand-in
(one per server name, real streamable HTTP): it lists the tools the script names and answers each
call with a recorded result. A call takes the first unused entry of that tool whose arguments
equal the call's; failing that, the next unused entry of that tool (the arguments differ, which
is reported); failing that, an error result the model reads ("no recorded result").

Beyond recorded calls, a script can stage failures: ``delay_ms`` makes the stand-in wait before
answering (past the caller's timeout, the call times out), ``structured_content`` adds a
structured result next to the text, and a server whose value is ``down`` gets no stand-in at
all: its address is a local port where nothing listens.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from subagents.config.endpoints import McpServerConfig

ENTRY_KEYS = {"tool", "arguments", "result", "is_error", "description", "input_schema",
              "delay_ms", "structured_content"}
DOWN = "down"
"""A server's value in the script that stages it as unreachable."""


def tool_script_problems(script: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """What is wrong with a ``tool_script`` value: (message, location below it) pairs."""
    if not isinstance(script, dict):
        return [("tool_script maps MCP server names to lists of recorded calls", ())]
    problems: list[tuple[str, tuple[Any, ...]]] = []
    for server, entries in script.items():
        if entries == DOWN:
            continue
        if not isinstance(entries, list):
            problems.append((f"the recorded calls of {server!r} must be a list (or "
                             f"{DOWN!r}: the server cannot be reached)", (server,)))
            continue
        for index, entry in enumerate(entries):
            where = (server, index)
            if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str):
                problems.append(("a recorded call is a mapping with 'tool: <name>'", where))
                continue
            unknown = sorted(set(entry) - ENTRY_KEYS)
            if unknown:
                problems.append((f"unknown keys {unknown}; use {sorted(ENTRY_KEYS)}", where))
            for key, kind in (("arguments", dict), ("input_schema", dict), ("is_error", bool),
                              ("delay_ms", int), ("structured_content", dict)):
                if entry.get(key) is not None and not isinstance(entry[key], kind):
                    problems.append((f"{key} must be a {kind.__name__}", (*where, key)))
    return problems


@dataclass
class _Entry:
    tool: str
    arguments: dict[str, Any] | None
    result: Any
    is_error: bool
    delay_ms: int = 0
    structured: dict[str, Any] | None = None
    used: bool = False


@dataclass
class ReplayServer:
    """The recorded calls of one MCP server name, and what happened to them."""

    name: str
    entries: list[_Entry] = field(default_factory=list)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name -> {description, input_schema}, in first-recorded order."""
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_script(cls, name: str, recorded: list[dict[str, Any]]) -> ReplayServer:
        """Build from the ``tool_script`` entries of one server."""
        server = cls(name)
        for item in recorded:
            tool = str(item["tool"])
            spec = server.tools.setdefault(tool, {
                "description": item.get("description") or f"{tool} (recorded)",
                "input_schema": item.get("input_schema")})
            if not item.get("input_schema"):  # any value for every recorded argument
                schema = spec["input_schema"] or {"type": "object", "properties": {}}
                schema.get("properties", {}).update({k: {} for k in item.get("arguments") or {}})
                spec["input_schema"] = schema
            server.entries.append(_Entry(tool, item.get("arguments"), item.get("result"),
                                         bool(item.get("is_error")),
                                         int(item.get("delay_ms") or 0),
                                         item.get("structured_content")))
        return server

    def take(self, tool: str, arguments: dict[str, Any]) -> _Entry | None:
        """The recorded entry that answers a call (marked used), or None."""
        unused = [e for e in self.entries if not e.used and e.tool == tool]
        schema = (self.tools.get(tool) or {}).get("input_schema") or {}
        exact = next((e for e in unused if _with_defaults(e.arguments, schema) ==
                      _with_defaults(arguments, schema)), None)
        entry = exact or (unused[0] if unused else None)
        if entry is None:
            self.problems.append(f"unexpected call of {tool}({_args(arguments)}) on "
                                 f"{self.name}: no recorded result left")
            return None
        if exact is None:
            self.problems.append(f"{tool} on {self.name} was called with {_args(arguments)}, "
                                 f"recorded with {_args(entry.arguments or {})}")
        entry.used = True
        return entry

    def unused(self) -> list[str]:
        """Recorded calls nobody made."""
        return [f"recorded call {e.tool}({_args(e.arguments or {})}) on {self.name} was not "
                "made" for e in self.entries if not e.used]

    def mcp_server(self) -> Any:
        """A low-level MCP SDK server answering from this script."""
        from mcp import types
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=[
                types.Tool(name=name, description=spec["description"],
                           input_schema=spec["input_schema"])
                for name, spec in self.tools.items()])

        async def call_tool(ctx: Any, params: Any) -> Any:
            entry = self.take(params.name, dict(params.arguments or {}))
            if entry is None:
                text = f"no recorded result for {params.name} with these arguments (tool replay)"
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=text)], is_error=True)
            if entry.delay_ms:
                await anyio.sleep(entry.delay_ms / 1000)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=_text(entry.result))],
                structured_content=entry.structured, is_error=entry.is_error)

        return Server(f"replay-{self.name}", on_list_tools=list_tools, on_call_tool=call_tool)


def _with_defaults(arguments: dict[str, Any] | None, schema: dict[str, Any]) -> dict[str, Any]:
    """The arguments with the schema's top-level defaults filled in, as the caller sends them."""
    filled = dict(arguments or {})
    for name, prop in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(prop, dict) and "default" in prop:
            filled[name] = prop["default"]
    return filled


def _text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, dict) and set(result) <= {"tool_name", "result", "is_error",
                                                    "error_message"}:
        return str(result.get("error_message") if result.get("is_error")
                   else result.get("result") or "")
    return json.dumps(result, ensure_ascii=False)


def _args(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


@contextlib.asynccontextmanager
async def replay_servers(script: dict[str, Any], names: list[str],
                         timeouts: dict[str, float] | None = None
                         ) -> AsyncIterator[tuple[dict[str, ReplayServer],
                                                  list[McpServerConfig]]]:
    """Serve a stand-in for each server name (those the script does not mention list no
    tools; those it marks ``down`` get none); yield the stand-ins and endpoint entries that
    point at them, with the servers' ``timeouts`` kept."""
    from subagents.testing.mcp_http import serve_mcp

    down = {name for name, entries in script.items() if entries == DOWN}
    servers = {name: ReplayServer.from_script(name, [] if name in down else
                                              list(script.get(name) or []))
               for name in dict.fromkeys([*names, *script])}
    configs = []
    async with contextlib.AsyncExitStack() as stack:
        for name, server in servers.items():
            if name in down:
                url = f"http://127.0.0.1:{_closed_port()}/mcp"
            else:
                url = await stack.enter_async_context(serve_mcp(server.mcp_server(), "http"))
            config = McpServerConfig(name=name, type="http", url=url)
            if timeouts and timeouts.get(name):
                config.timeout = timeouts[name]
            configs.append(config)
        yield servers, configs


def _closed_port() -> int:
    """A local port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
