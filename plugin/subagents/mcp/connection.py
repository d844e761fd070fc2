"""One shared, reconnecting connection to one MCP server (stdio, SSE or streamable HTTP).

The ``mcp`` client runs in a task of its own: any failure inside ``async with Client`` (which
comes out as nested exception groups) only marks the connection dead; the next call reconnects.
An in-flight call that loses the connection is retried once after reconnecting if the tool is
read-only; any other becomes an error result saying it may or may not have run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ..config._base import resolve_env
from ..config.endpoints import McpServerConfig
from ..exceptions import (
    MCPConnectionError,
    ToolInvocationError,
    ToolTimeoutError,
)
from ..types import AgentToolResult
from .auth import HeaderBuilder

log = structlog.get_logger("subagents.mcp")

REQUEST_TIMEOUT = -32001
CONNECTION_CLOSED = -32000


@dataclass(frozen=True)
class MCPTool:
    """A tool as listed by a server."""

    server: str
    name: str
    description: str | None
    input_schema: dict[str, Any]
    read_only: bool


class _ConnectionLostError(Exception):
    pass


class MCPServerConnection:
    """See the module docstring: :meth:`start`, :meth:`call_tool`, :meth:`tools`, :meth:`close`."""

    def __init__(self, config: McpServerConfig, *, root: Path | None = None,
                 call_grace: float = 2.0) -> None:
        self.config = config
        self.name = config.name
        self.root = root or Path.cwd()
        self._headers = HeaderBuilder(config)
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._dead = asyncio.Event()
        self._tools: list[MCPTool] = []
        self._tools_stale = False
        self.tools_changed = asyncio.Event()
        """Set when the server announces a changed tool list (tests and observers wait on it)."""
        self._lock = asyncio.Lock()
        self._call_grace = call_grace
        self._http: Any = None
        self.connects = 0
        """How many times a session was opened (1 + reconnects)."""

    # ------------------------------------------------------------------ transports
    async def _transport(self) -> Any:
        from mcp import StdioServerParameters

        cfg = self.config
        if cfg.type == "stdio":
            command = sys.executable if cfg.command in ("python", "python3") else str(cfg.command)
            env = {k: resolve_env(v, what=f"env {k} of MCP server {cfg.name!r}")
                   for k, v in cfg.env.items()}
            cwd = (self.root / cfg.cwd) if cfg.cwd else self.root
            return StdioServerParameters(command=command, args=list(cfg.args), env=env,
                                         cwd=str(cwd))
        headers = await self._headers.headers()
        if cfg.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(str(cfg.url), headers=headers, timeout=cfg.timeout,
                              sse_read_timeout=300)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers=headers, follow_redirects=True,
                                  timeout=httpx2.Timeout(cfg.timeout, read=300))
        self._http = http
        return streamable_http_client(str(cfg.url), http_client=http)

    # ------------------------------------------------------------------ lifecycle
    async def start(self, attempts: int = 5, *, base_delay: float = 0.2,
                    agent: str | None = None) -> None:
        """Connect, retrying with exponential backoff; raise MCPConnectionError at the end."""
        last: BaseException | None = None
        for attempt in range(1, max(attempts, 1) + 1):
            try:
                await self._open()
                return
            except MCPConnectionError as exc:
                last = exc
                log.warning("mcp.connect.failed", server=self.name, attempt=attempt,
                            attempts=attempts, error=str(exc))
                if attempt < attempts:
                    await asyncio.sleep(min(base_delay * 2 ** (attempt - 1), 5.0))
        who = f"agent {agent!r}: " if agent else ""
        raise MCPConnectionError(
            f"{who}cannot connect to MCP server {self.name!r} at {self.config.address} "
            f"after {attempts} attempt(s): {last}", code="mcp.connection_failed")

    async def _open(self) -> None:
        await self._shutdown_task()
        self._stop = asyncio.Event()
        self._dead = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.timeout)
        except TimeoutError as exc:
            await self._shutdown_task()
            raise MCPConnectionError(f"no answer within {self.config.timeout:g}s") from exc

    async def _run(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client

        try:
            transport = await self._transport()
            async with Client(transport, mode="legacy", message_handler=self._on_message,
                              cache=None) as client:
                self._client = client
                self._tools = await self._list(client)
                self.connects += 1
                log.info("mcp.connected", server=self.name, transport=self.config.type,
                         tools=len(self._tools))
                if not ready.done():
                    ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - any failure means the session is dead
            if not ready.done():
                ready.set_exception(MCPConnectionError(_describe(exc)))
            elif not self._stop.is_set():
                log.warning("mcp.connection.lost", server=self.name, error=_describe(exc))
        finally:
            self._client = None
            self._dead.set()
            http, self._http = self._http, None
            if http is not None:
                with contextlib.suppress(BaseException):
                    await http.aclose()

    async def _shutdown_task(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 5)
        except Exception:  # noqa: BLE001 - a task that will not stop is cancelled
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def close(self) -> None:
        await self._shutdown_task()

    @property
    def connected(self) -> bool:
        return (self._client is not None and not self._dead.is_set()
                and not self._stop.is_set())

    async def _ensure(self) -> Any:
        async with self._lock:
            if not self.connected:
                log.info("mcp.reconnecting", server=self.name)
                await self.start(attempts=2, base_delay=0.1)
            return self._client

    # ------------------------------------------------------------------ tools
    async def _on_message(self, message: Any) -> None:
        if type(message).__name__ == "ToolListChangedNotification":
            self._tools_stale = True
            self.tools_changed.set()
            log.info("mcp.tools.list_changed", server=self.name)

    async def _list(self, client: Any) -> list[MCPTool]:
        tools: list[MCPTool] = []
        cursor = None
        while True:
            result = await client.list_tools(cursor=cursor) if cursor else \
                await client.list_tools()
            for tool in result.tools:
                annotations = tool.annotations
                read_only = bool(annotations and annotations.read_only_hint)
                tools.append(MCPTool(self.name, tool.name, tool.description,
                                     dict(tool.input_schema or {}), read_only))
            cursor = result.next_cursor
            if not cursor:
                return tools

    async def tools(self) -> list[MCPTool]:
        """The server's tools; listed again after a reconnect or a list_changed notification."""
        client = await self._ensure()
        if self._tools_stale:
            self._tools_stale = False
            try:
                self._tools = await self._list(client)
            except Exception as exc:  # noqa: BLE001 - keep the previous list
                log.warning("mcp.tools.refresh_failed", server=self.name, error=str(exc))
        return list(self._tools)

    async def call_tool_result(self, name: str, arguments: dict[str, Any], *,
                               timeout: float) -> Any:
        """Call a tool and return the SDK's ``CallToolResult`` as it is (flow tool steps read
        its fields); any failure, a timeout included, raises."""
        client = await self._ensure()
        return await asyncio.wait_for(
            client.call_tool(name, arguments, read_timeout_seconds=timeout), timeout + 1)

    async def call_tool(self, name: str, arguments: dict[str, Any], *, timeout: float,
                        read_only: bool = False, meta: dict[str, Any] | None = None
                        ) -> AgentToolResult:
        """Call a tool; failures the model should see raise ToolInvocationError."""
        try:
            return await self._call_once(name, arguments, timeout, meta)
        except _ConnectionLostError as exc:
            self._stop.set()
            if not read_only:
                raise ToolInvocationError(
                    f"the connection to MCP server {self.name!r} was lost during the call to "
                    f"{name!r}; the tool may or may not have run. Check before calling it again",
                    code="tool.connection_lost") from exc
            log.info("mcp.call.retry_after_reconnect", server=self.name, tool=name)
            try:
                return await self._call_once(name, arguments, timeout, meta)
            except _ConnectionLostError as again:
                self._stop.set()
                raise ToolInvocationError(f"MCP server {self.name!r} is unreachable: {again}",
                                          code="tool.connection_lost") from again

    async def _call_once(self, name: str, arguments: dict[str, Any], timeout: float,
                         meta: dict[str, Any] | None) -> AgentToolResult:
        from mcp import MCPError

        try:
            client = await self._ensure()
        except MCPConnectionError as exc:
            raise _ConnectionLostError(str(exc)) from exc
        started = time.perf_counter()
        call = asyncio.ensure_future(client.call_tool(
            name, arguments, read_timeout_seconds=timeout, meta=meta or None))
        dead = asyncio.ensure_future(self._dead.wait())
        try:
            done, _ = await asyncio.wait({call, dead}, timeout=timeout + self._call_grace,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            dead.cancel()
        if call not in done:
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            if dead in done:
                raise _ConnectionLostError("the server went away")
            raise ToolTimeoutError(self._timeout_text(name, timeout))
        try:
            result = call.result()
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolTimeoutError(self._timeout_text(name, timeout)) from exc
            if exc.code == CONNECTION_CLOSED:
                raise _ConnectionLostError(exc.message) from exc
            raise ToolInvocationError(f"MCP server {self.name!r} rejected the call to {name!r}: "
                                      f"{exc.message}") from exc
        except (asyncio.CancelledError, Exception) as exc:
            raise _ConnectionLostError(_describe(exc)) from exc
        log.debug("mcp.call.finished", server=self.name, tool=name,
                  duration_ms=round((time.perf_counter() - started) * 1000, 1),
                  is_error=result.is_error)
        return convert_result(name, result)

    def _timeout_text(self, name: str, timeout: float) -> str:
        return (f"tool {name!r} on MCP server {self.name!r} did not answer within {timeout:g}s "
                "(tool_timeout)")


def convert_result(tool_name: str, result: Any) -> AgentToolResult:
    """MCP ``CallToolResult`` -> AgentToolResult: text joined as text, structured as JSON."""
    texts = []
    for item in result.content or []:
        text = getattr(item, "text", None)
        if text is not None:
            texts.append(str(text))
        else:
            texts.append(json.dumps(item.model_dump(by_alias=True, mode="json",
                                                    exclude_none=True)))
    joined = "\n".join(texts)
    if result.is_error:
        return AgentToolResult(tool_name=tool_name, is_error=True,
                               error_message=joined or f"tool {tool_name!r} reported an error")
    structured = result.structured_content
    if structured is not None:
        value = structured.get("result", structured) if isinstance(structured, dict) \
            and set(structured) == {"result"} else structured
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return AgentToolResult(tool_name=tool_name, result=text)
    return AgentToolResult(tool_name=tool_name, result=joined)


def _describe(exc: BaseException) -> str:
    """Flatten exception groups into one readable line."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, asyncio.CancelledError):
        return "connection cancelled"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text
