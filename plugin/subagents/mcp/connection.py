"""One shared, reconnecting connection to one MCP server (stdio, SSE or streamable HTTP).

The ``mcp`` client runs in a task of its own: any failure inside ``async with Client`` (which
comes out as nested exception groups) only marks the connection dead; the next call reconnects.
An in-flight call that loses the connection is retried once after reconnecting if the tool is
read-only; any other becomes an error result saying it may or may not have run. A
streamable-HTTP session the server no longer knows (HTTP 404 on a request carrying the session
id, or a 400 that says so, e.g. after a server restart) is re-established and the call resent:
the server never saw it, so this is safe for every tool. Progress notifications restart a call's
timeout (up to ``PROGRESS_MAX_FACTOR`` times the timeout in total), and the server's log messages
go to our structured log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import structlog

from subagents import __version__
from subagents.config._base import resolve_env
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.config.mcp_sessions import is_template, render_template
from subagents.exceptions import MCPConnectionError, ToolInvocationError, ToolTimeoutError
from subagents.mcp.callbacks import (
    ElicitationHandler,
    ElicitationRegistry,
    SamplingHandler,
    roots_callback,
)
from subagents.mcp.content import contents_text, convert_result
from subagents.mcp.oauth.auth import HeaderBuilder, oauth_provider
from subagents.mcp.oauth.consent import ConsentRegistry
from subagents.mcp.oauth.login import LoginHandlers, LoginRequiredError
from subagents.mcp.oauth.policy import scope_refused
from subagents.mcp.oauth.token_store import TokenStore
from subagents.retry import RetryPolicy, retry_call
from subagents.types import AgentToolResult

log = structlog.get_logger("subagents.mcp")

REQUEST_TIMEOUT = -32001
URL_ELICITATION_REQUIRED = -32042
CONNECTION_CLOSED = -32000
PROGRESS_MAX_FACTOR = 10
"""A call that keeps reporting progress may run at most this many times its timeout."""
MAX_CONNECT_DELAY = 5.0
"""Seconds: the longest pause between two attempts to connect."""

_MCP_TO_STDLIB = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
                  "warning": logging.WARNING, "error": logging.ERROR,
                  "critical": logging.CRITICAL, "alert": logging.CRITICAL,
                  "emergency": logging.CRITICAL}


def mcp_log_level(level: int) -> str:
    """The MCP ``logging/setLevel`` value matching a stdlib log level."""
    if level <= logging.DEBUG:
        return "debug"
    if level <= logging.INFO:
        return "info"
    if level <= logging.WARNING:
        return "warning"
    return "error" if level <= logging.ERROR else "critical"


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


class _SessionExpiredError(Exception):
    """The server no longer knows our session id: it never handled the request."""


class _UrlElicitationRequiredError(Exception):
    """The server refused the call until the user completes its URL-mode elicitations."""

    def __init__(self, elicitations: list[Any]) -> None:
        super().__init__("URL elicitation required")
        self.elicitations = elicitations


class _Progress:
    """The progress reports of one call, as a future per wait (no task per wait)."""

    def __init__(self) -> None:
        self._next: asyncio.Future[None] | None = None

    def next_report(self) -> asyncio.Future[None]:
        """A future the next report resolves (reports before this call are forgotten)."""
        self._next = asyncio.get_running_loop().create_future()
        return self._next

    def reported(self) -> None:
        """The server reported progress."""
        if self._next is not None and not self._next.done():
            self._next.set_result(None)


class MCPServerConnection:
    """See the module docstring: :meth:`start`, :meth:`call_tool`, :meth:`tools`, :meth:`close`."""

    def __init__(self, config: McpServerConfig, *, root: Path | None = None,
                 endpoints: EndpointsConfig | None = None,
                 login: LoginHandlers | None = None,
                 template_values: Mapping[str, str] | None = None,
                 oauth_user: str | None = None, tokens: TokenStore | None = None,
                 elicitations: ElicitationRegistry | None = None,
                 consents: ConsentRegistry | None = None) -> None:
        self.config = config
        self.elicitations = elicitations or ElicitationRegistry()
        """Where calls that wait for a user's answer are held (the pool's registry)."""
        self.consents = consents or ConsentRegistry()
        """Where the user's sign-in links wait for the browser (the pool's registry)."""
        self._template_values = template_values
        self._oauth_user = oauth_user
        """The user whose own authorization this session uses (``oauth.per_user``)."""
        self._tokens = tokens
        self.name = config.name
        self.root = root or Path.cwd()
        self._headers = HeaderBuilder(config)
        self._sampling = SamplingHandler(config, endpoints) if config.sampling else None
        self._elicitation = ElicitationHandler(config.name, self.elicitations)
        self._oauth: Any = None
        self._login = login
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._dead = asyncio.Event()
        self._tools: list[MCPTool] = []
        self._tools_stale = False
        self.tools_changed = asyncio.Event()
        """Set when the server announces a changed tool list (tests and observers wait on it)."""
        self._lock = asyncio.Lock()
        self._http: Any = None
        self._session_lost = False
        self._last_status: int | None = None
        self._refused_scope: str | None = None
        """The scope of the latest 403 ``insufficient_scope`` no re-authorization answered."""
        self._resources: tuple[Any, list[str], list[str]] | None = None
        self._url_waits: dict[str, Any] = {}
        """Elicitation id -> the call (flight) waiting for the server to say it completed."""
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
        headers = _fill_templates(await self._headers.headers(), self._template_values)
        if self._oauth is None:
            # once: its tokens outlive reconnects
            self._oauth = self._auth()
        if cfg.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(str(cfg.url), headers=headers, timeout=cfg.timeout,
                              sse_read_timeout=300, auth=self._oauth,
                              httpx_client_factory=self._sse_http_client)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = _observed_client()(self._on_final_response, headers=headers,
                                  follow_redirects=True,
                                  timeout=httpx2.Timeout(cfg.timeout, read=300),
                                  auth=self._oauth,
                                  event_hooks={"response": [self._on_http_response]})
        self._http = http
        return streamable_http_client(str(cfg.url), http_client=http)

    def _sse_http_client(self, headers: dict[str, str] | None = None, timeout: Any = None,
                         auth: Any = None) -> Any:
        """The HTTP client of the SSE transport."""
        return _observed_client()(self._on_final_response, headers=headers, timeout=timeout,
                                  auth=auth)

    def _on_final_response(self, response: Any) -> None:
        """A response as the transport gets it (after any re-authorization): a 403
        ``insufficient_scope`` is remembered for the call it answers."""
        if response.status_code != 403:
            return
        refused = scope_refused(response)
        if refused is None:
            return
        self._refused_scope = refused
        if self.config.type == "sse":
            # the SDK's SSE transport sends nothing more after a refused message: the session
            # ends, so the call fails now (see call_tool), not at its timeout
            self._stop.set()

    def _auth(self) -> Any:
        oauth = self.config.oauth
        if oauth is None or not oauth.per_user or not self.config.url \
                or self._login is not None:  # `subagents mcp login`: an operator signs in
            return oauth_provider(self.config, self.root, self._login, self._template_values)
        from subagents.mcp.oauth.consent import listing_provider, user_provider

        if self._oauth_user is None or self._tokens is None:
            return listing_provider(self.config, self.root)
        return user_provider(self.config, user=self._oauth_user, store=self._tokens,
                             flights=self._asking_flight, consents=self.consents)

    @property
    def lists_only(self) -> bool:
        """True for the shared session of a server each user authorizes: it lists the tools
        (with an operator's login, if any) and never calls one for a user."""
        oauth = self.config.oauth
        return bool(oauth is not None and oauth.per_user and self._oauth_user is None
                    and self._login is None)

    def _refuse_user_call(self, what: str) -> None:
        if self.lists_only:
            raise ToolInvocationError(
                f"MCP server {self.name!r} acts for each user with their own authorization; "
                f"{what} needs a user's session (an agent's call with the user known)",
                code="mcp.user_session_required")

    def _asking_flight(self) -> Any:
        """The call that may ask the user to sign in: the one call in flight on this session,
        else the call this session is being opened for."""
        flight = self._elicitation.sole_flight() or self.elicitations.current()
        return flight if flight is not None and self.elicitations.active(flight) else None

    async def _on_http_response(self, response: Any) -> None:
        status = response.status_code
        self._last_status = status
        if "mcp-session-id" not in response.request.headers or status not in (400, 404):
            return
        if status == 404:
            self._session_lost = True
            return
        # servers built on the TypeScript SDK answer an unknown session with 400
        body = (await response.aread())[:2000].decode("utf-8", "replace").lower()
        if "session" in body:
            self._session_lost = True

    # ------------------------------------------------------------------ lifecycle
    async def start(self, attempts: int = 5, *, base_delay: float = 0.2,
                    agent: str | None = None) -> None:
        """Connect, in up to ``attempts`` attempts with pauses doubling from ``base_delay`` (at most
        :data:`MAX_CONNECT_DELAY`); raise MCPConnectionError at the end.

        A refusal of the credentials (``mcp.unauthorized``, a missing login) is not retried:
        the same credentials would be refused again.
        """
        tried = 0

        async def attempt() -> None:
            nonlocal tried
            tried += 1
            try:
                await self._open()
            except MCPConnectionError as exc:
                log.warning("mcp.connect.failed", server=self.name, attempt=tried,
                            attempts=attempts, error=str(exc))
                raise

        policy = RetryPolicy(attempts=max(attempts, 1), retry_on=_worth_reconnecting,
                             delay=lambda n, _error: min(base_delay * 2 ** (n - 1),
                                                         MAX_CONNECT_DELAY))
        try:
            await retry_call(attempt, policy)
        except MCPConnectionError as last:
            who = f"agent {agent!r}: " if agent else ""
            raise MCPConnectionError(
                f"{who}cannot connect to MCP server {self.name!r} at {self.config.address} "
                f"after {tried} attempt(s): {last}",
                code=last.code or "mcp.connection_failed") from None

    async def _open(self) -> None:
        await self._shutdown_task()
        self._stop = asyncio.Event()
        self._dead = asyncio.Event()
        self._session_lost = False
        self._last_status = None
        self._refused_scope = None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(ready), name=f"mcp:{self.name}")
        try:
            await self._wait_ready(ready)
        except TimeoutError as exc:
            await self._shutdown_task()
            raise MCPConnectionError(f"no answer within {self.config.timeout:g}s") from exc
        except MCPConnectionError as exc:
            if self._last_status == 401 and self.lists_only:
                raise LoginRequiredError(
                    f"MCP server {self.name!r} lists its tools only for a signed-in account: "
                    f"run `subagents mcp login {self.name}` once (an operator account lists "
                    "the tools; each user still authorizes their own calls)") from exc
            if self._last_status == 401 and not isinstance(exc, LoginRequiredError):
                raise MCPConnectionError(f"unauthorized (HTTP 401): {exc}",
                                         code="mcp.unauthorized") from exc
            raise

    async def _wait_ready(self, ready: asyncio.Future[None]) -> None:
        """Wait for the session; the time a user spends signing in does not count."""
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(ready), self.config.timeout)
                return
            except TimeoutError:
                if not getattr(self._oauth, "waiting_for_user", False):
                    raise

    async def _run(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client
        from mcp.types import Implementation

        try:
            transport = await self._transport()
            async with Client(transport, mode="legacy", message_handler=self._on_message,
                              logging_callback=self._on_log, cache=None,
                              list_roots_callback=roots_callback(self.config, self.root),
                              sampling_callback=self._sampling,
                              elicitation_callback=self._elicitation,
                              client_info=Implementation(name="subagents", version=__version__)
                              ) as client:
                self._client = client
                await self._set_log_level(client)
                self._tools = await self._list(client)
                self.connects += 1
                log.info("mcp.connected", server=self.name, transport=self.config.type,
                         tools=len(self._tools))
                if not ready.done():
                    ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - any failure means the session is dead
            if not ready.done():
                ready.set_exception(_connect_error(exc))
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
        """Close the session and the sampling handler."""
        await self._shutdown_task()
        if self._sampling is not None:
            await self._sampling.close()

    @property
    def connected(self) -> bool:
        """True while a live session is open (an expired HTTP session counts as closed)."""
        return (self._client is not None and not self._dead.is_set()
                and not self._stop.is_set() and not self._session_lost)

    async def _ensure(self) -> Any:
        async with self._lock:
            if not self.connected:
                log.info("mcp.reconnecting", server=self.name)
                await self.start(attempts=2, base_delay=0.1)
            return self._client

    # ------------------------------------------------------------------ server logging
    async def _set_log_level(self, client: Any) -> None:
        """Ask a server that logs to send what our own ``subagents.mcp`` level lets through."""
        caps = client.server_capabilities
        if caps is None or caps.logging is None:
            return
        from mcp.shared.exceptions import MCPDeprecationWarning

        level = mcp_log_level(logging.getLogger("subagents.mcp").getEffectiveLevel())
        try:
            with warnings.catch_warnings():  # deprecated from protocol 2026-07-28 on only
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level(level)
        except Exception as exc:  # noqa: BLE001 - a server may refuse; logging is optional
            log.debug("mcp.logging.set_level_failed", server=self.name, error=str(exc))

    async def _on_log(self, params: Any) -> None:
        level = _MCP_TO_STDLIB.get(str(params.level), logging.INFO)
        if not logging.getLogger("subagents.mcp").isEnabledFor(level):
            return  # a server that ignores logging/setLevel
        data = params.data
        if not isinstance(data, str | int | float | bool | type(None)):
            data = json.dumps(data, ensure_ascii=False, default=str)[:2000]
        log.log(level, "mcp.server.log", server=self.name, logger=params.logger,
                mcp_level=str(params.level), data=data)

    # ------------------------------------------------------------------ tools
    async def _on_message(self, message: Any) -> None:
        if type(message).__name__ == "ElicitCompleteNotification":
            self._url_completed(str(message.params.elicitation_id))
        if type(message).__name__ == "ResourceListChangedNotification":
            self._resources = None
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
                execution = getattr(tool, "execution", None)
                if execution is not None and execution.task_support == "required":
                    # Task-augmented calls (tasks/get polling) are not supported: a tool that
                    # can only run as a task would fail every call, so the model never sees it.
                    log.info("mcp.tools.task_only_skipped", server=self.name, tool=tool.name)
                    continue
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
        self._refuse_user_call(f"calling {name!r}")
        client = await self._ensure()
        return await asyncio.wait_for(
            client.call_tool(name, arguments, read_timeout_seconds=timeout), timeout + 1)

    async def call_tool(self, name: str, arguments: dict[str, Any], *, timeout: float,
                        read_only: bool = False, meta: dict[str, Any] | None = None,
                        on_progress: ProgressCallback | None = None) -> AgentToolResult:
        """Call a tool; failures the model should see raise ToolInvocationError.

        ``on_progress(progress, total, message)`` hears the progress the server reports.
        """
        self._refuse_user_call(f"calling {name!r}")
        try:
            return await self._call_answering_urls(name, arguments, timeout, meta, on_progress)
        except _ConnectionLostError as exc:
            self._stop.set()
            refused, self._refused_scope = self._refused_scope, None
            if refused is not None:  # SSE: the refusal for lack of scope ended the session
                raise self._scope_error(f"run {name!r}", refused) from exc
            if not read_only:
                raise ToolInvocationError(
                    f"the connection to MCP server {self.name!r} was lost during the call to "
                    f"{name!r}; the tool may or may not have run. Check before calling it again",
                    code="tool.connection_lost") from exc
            log.info("mcp.call.retry_after_reconnect", server=self.name, tool=name)
            try:
                return await self._call_answering_urls(name, arguments, timeout, meta,
                                                       on_progress)
            except _ConnectionLostError as again:
                self._stop.set()
                raise ToolInvocationError(f"MCP server {self.name!r} is unreachable: {again}",
                                          code="tool.connection_lost") from again

    async def _call_answering_urls(self, name: str, arguments: dict[str, Any], timeout: float,
                                   meta: dict[str, Any] | None,
                                   on_progress: ProgressCallback | None = None
                                   ) -> AgentToolResult:
        """One call; when the server first needs the user to open a link (URL elicitation
        required), the user is asked through the call's agent and the call is made again once
        the server says the step is complete or the user says they did it."""
        try:
            return await self._call_fresh_session(name, arguments, timeout, meta, on_progress)
        except _UrlElicitationRequiredError as needed:
            await self._complete_urls(name, needed.elicitations)
        try:
            return await self._call_fresh_session(name, arguments, timeout, meta, on_progress)
        except _UrlElicitationRequiredError as again:
            raise ToolInvocationError(
                f"MCP server {self.name!r} still needs the user to complete a step in the "
                f"browser before {name!r} can run", code="mcp.url_elicitation_required"
            ) from again

    async def _complete_urls(self, name: str, elicitations: list[Any]) -> None:
        from mcp.types import ElicitRequestURLParams

        flight = self.elicitations.current()
        assert flight is not None  # checked before the error was raised
        for params in elicitations:
            question = ElicitRequestURLParams(message=params.message, url=params.url,
                                              elicitation_id=params.elicitation_id)
            wait_id = str(question.elicitation_id or f"unnamed-{id(question)}")
            self._url_waits[wait_id] = flight
            log.info("mcp.elicitation.url_required", server=self.name, tool=name,
                     key=flight.owner.key)
            try:
                result = await flight.ask(question)
            finally:
                self._url_waits.pop(wait_id, None)
            if result.action != "accept":
                raise ToolInvocationError(
                    f"the user did not complete the step MCP server {self.name!r} needs before "
                    f"{name!r} ({result.action})", code="mcp.url_elicitation_declined")

    def _url_completed(self, elicitation_id: str) -> None:
        """The server says the user completed a URL elicitation: the waiting call goes on."""
        from mcp.types import ElicitResult

        flight = self._url_waits.get(elicitation_id)
        if flight is not None and self.elicitations.answer(flight.owner.key,
                                                           ElicitResult(action="accept")):
            log.info("mcp.elicitation.url_completed", server=self.name, key=flight.owner.key)

    async def _call_fresh_session(self, name: str, arguments: dict[str, Any], timeout: float,
                                  meta: dict[str, Any] | None,
                                  on_progress: ProgressCallback | None = None
                                  ) -> AgentToolResult:
        """One call; resent once on a new session if the server had forgotten ours."""
        try:
            return await self._call_once(name, arguments, timeout, meta, on_progress)
        except _SessionExpiredError:
            log.info("mcp.session.expired", server=self.name, tool=name)
            self._stop.set()
        try:
            return await self._call_once(name, arguments, timeout, meta, on_progress)
        except _SessionExpiredError as exc:
            raise _ConnectionLostError("the server rejected a new session as well") from exc

    async def _await_call(self, call: asyncio.Future[Any], progressed: _Progress,
                          timeout: float, flight: Any = None) -> bool:
        """Wait for ``call``; each progress report restarts the timeout. False if it expired.
        While the server waits for the user's answer (``flight``) the timeout stands still."""
        limit = time.monotonic() + timeout * PROGRESS_MAX_FACTOR
        # the session's task ends when the connection dies: waited on as it is, no helper task
        session = self._task
        while True:
            if flight is not None and flight.waiting:
                paused = time.monotonic()
                await self._await_answer(call, flight)
                limit += time.monotonic() - paused
            window = min(timeout, max(limit - time.monotonic(), 0.0))
            progress = progressed.next_report()
            dead = session if session is not None else asyncio.ensure_future(self._dead.wait())
            try:
                done, _ = await asyncio.wait({call, dead, progress}, timeout=window,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                progress.cancel()
                if dead is not session:
                    dead.cancel()
            if call in done:
                return True
            if dead in done:
                raise _ConnectionLostError("the server went away")
            if flight is not None and flight.waiting:
                continue
            if progress not in done or time.monotonic() >= limit:
                return False

    async def _await_answer(self, call: asyncio.Future[Any], flight: Any) -> None:
        """Wait while the user is asked (the registry's deadline bounds this)."""
        answered = asyncio.ensure_future(flight.settled.wait())
        dead = asyncio.ensure_future(self._dead.wait())
        try:
            await asyncio.wait({call, answered, dead}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
            dead.cancel()
    def _progress_listener(self, name: str, progressed: _Progress,
                           sink: ProgressCallback | None) -> ProgressCallback:
        """Progress restarts the call's timeout and is passed on to ``sink``."""

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            progressed.reported()
            if sink is not None:
                try:
                    await sink(progress, total, message)
                except Exception:  # noqa: BLE001 - a failing listener never fails the call
                    log.warning("mcp.progress.listener_failed", server=self.name, tool=name)

        return on_progress

    async def _call_once(self, name: str, arguments: dict[str, Any], timeout: float,
                         meta: dict[str, Any] | None,
                         sink: ProgressCallback | None = None) -> AgentToolResult:
        from mcp import MCPError

        try:
            client = await self._ensure()
        except MCPConnectionError as exc:
            raise _ConnectionLostError(str(exc)) from exc
        started = time.perf_counter()
        progressed = _Progress()

        with self._elicitation.track() as flight:
            # a call that may ask the user is timed by _await_call alone
            call = asyncio.ensure_future(client.call_tool(
                name, arguments, read_timeout_seconds=None if flight is not None
                else timeout * PROGRESS_MAX_FACTOR,
                progress_callback=self._progress_listener(name, progressed, sink),
                meta=meta or None))
            try:
                finished = await self._await_call(call, progressed, timeout, flight)
            finally:
                if not call.done():
                    call.cancel()
                    with contextlib.suppress(BaseException):
                        await call
        if not finished:
            raise ToolTimeoutError(self._timeout_text(name, timeout))
        try:
            result = call.result()
        except MCPError as exc:
            if self._session_lost:
                raise _SessionExpiredError(exc.message) from exc
            if exc.code == URL_ELICITATION_REQUIRED and self.elicitations.current() is not None:
                from mcp import UrlElicitationRequiredError

                raise _UrlElicitationRequiredError(
                    UrlElicitationRequiredError.from_error(exc.error).elicitations) from exc
            refused, self._refused_scope = self._refused_scope, None
            if refused is not None:
                raise self._scope_error(f"run {name!r}", refused) from exc
            if self._last_status == 401:
                raise ToolInvocationError(
                    f"MCP server {self.name!r} refused the call to {name!r}: unauthorized "
                    "(HTTP 401)", code="mcp.unauthorized") from exc
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

    # ------------------------------------------------------------------ resources
    async def resources(self, limit: int = 50) -> tuple[list[str], list[str]]:
        """Resource URIs and URI templates the server lists (first ``limit`` of each).

        Both lists are empty when the server offers no resources. The listing is kept until the
        server announces a changed resource list or the connection is re-opened.
        """
        client = await self._ensure()
        if self._resources is not None and self._resources[0] is client:
            return self._resources[1], self._resources[2]
        caps = client.server_capabilities
        if caps is None or caps.resources is None:
            return [], []
        uris: list[str] = []
        templates: list[str] = []
        try:
            listed = await client.list_resources()
            uris = [str(r.uri) for r in listed.resources[:limit]]
            listed_templates = await client.list_resource_templates()
            templates = [str(t.uri_template) for t in listed_templates.resource_templates[:limit]]
        except Exception as exc:  # noqa: BLE001 - listing is a hint; reading may still work
            log.info("mcp.resources.list_failed", server=self.name, error=str(exc))
            return uris, templates
        self._resources = (client, uris, templates)  # until a list_changed or a reconnect
        return uris, templates

    async def offers_resources(self) -> bool:
        """Whether the server declared the resources capability."""
        client = await self._ensure()
        caps = client.server_capabilities
        return caps is not None and caps.resources is not None

    async def read_resource(self, uri: str, *, timeout: float) -> AgentToolResult:
        """``resources/read`` as a tool result: text as text, blobs as placeholders."""
        from mcp import MCPError

        self._refuse_user_call(f"reading {uri!r}")
        try:
            client = await self._ensure()
            with anyio.fail_after(timeout):
                result = await client.read_resource(uri, cache_mode="refresh")
        except TimeoutError as exc:
            raise ToolTimeoutError(f"reading {uri!r} from MCP server {self.name!r} took longer "
                                   f"than {timeout:g}s") from exc
        except MCPError as exc:
            refused, self._refused_scope = self._refused_scope, None
            if refused is not None:
                raise self._scope_error(f"read {uri!r}", refused) from exc
            raise ToolInvocationError(f"MCP server {self.name!r} could not read {uri!r}: "
                                      f"{exc.message}", code="mcp.resource_failed") from exc
        except MCPConnectionError as exc:
            raise ToolInvocationError(str(exc), code="tool.connection_lost") from exc
        return AgentToolResult(tool_name="read_resource", result=contents_text(result.contents))

    def _scope_error(self, what: str, scope: str) -> ToolInvocationError:
        """A refusal for lack of scope (403 ``insufficient_scope``): the server did nothing.

        With an operator's login (a server process cannot sign anyone in again) the error says
        which command to run (``mcp.login_required``); otherwise the credentials or the user's
        grant lack the scope (``mcp.insufficient_scope``).
        """
        needed = f"the scope {scope!r}" if scope else "a larger scope"
        text = (f"MCP server {self.name!r} refused to {what}: it needs {needed}, which this "
                "assistant's authorization does not include. Nothing was run.")
        oauth = self.config.oauth
        if oauth is not None and oauth.grant == "authorization_code" \
                and self._oauth_user is None:
            return ToolInvocationError(
                f"{text} An operator must sign in again with that scope: add it to oauth.scope "
                f"of {self.name!r} in endpoints.yml and run `subagents mcp login {self.name}`",
                code="mcp.login_required")
        who = "the user's sign-in" if self._oauth_user is not None else "its credentials"
        return ToolInvocationError(f"{text} The scope has to be granted to {who}",
                                   code="mcp.insufficient_scope")

    def _timeout_text(self, name: str, timeout: float) -> str:
        return (f"tool {name!r} on MCP server {self.name!r} did not answer within {timeout:g}s "
                "(tool_timeout)")


_E = TypeVar("_E", bound=BaseException)


ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]
"""``(progress, total, message)`` of a running call."""


@functools.cache
def _observed_client() -> Any:
    """``httpx2.AsyncClient`` that shows each final response (after the auth flow, unlike an
    event hook, which also sees the responses the auth flow answers itself) to a callback."""
    import httpx2

    class _ObservedClient(httpx2.AsyncClient):
        def __init__(self, on_response: Callable[[Any], None], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._on_response = on_response

        async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
            response = await super().send(request, **kwargs)
            self._on_response(response)
            return response

    return _ObservedClient


def _fill_templates(headers: dict[str, str],
                    values: Mapping[str, str] | None) -> dict[str, str]:
    """Headers with their conversation templates filled in; without values (the session that
    lists a per-conversation server's tools) templated headers are left out."""
    out = {}
    for name, value in headers.items():
        if not is_template(value):
            out[name] = value
        elif values is not None:
            out[name] = render_template(value, values)
    return out


def _worth_reconnecting(error: BaseException) -> bool:
    """Whether a failed connect is tried again: not when the credentials were refused."""
    return isinstance(error, MCPConnectionError) and error.code != "mcp.unauthorized" \
        and not isinstance(error, LoginRequiredError)


def _connect_error(exc: BaseException) -> MCPConnectionError:
    """Why connecting failed, with the stable code of a login or credentials problem."""
    import httpx2

    ours = _find(exc, MCPConnectionError)  # a login, consent or identity-assertion failure
    if ours is not None:
        return ours
    refused = _find(exc, httpx2.HTTPStatusError)  # SSE raises the status; HTTP is hooked
    if refused is not None and refused.response.status_code == 401:
        return MCPConnectionError(f"unauthorized (HTTP 401): {_describe(exc)}",
                                  code="mcp.unauthorized")
    return MCPConnectionError(_describe(exc))


def _find(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first ``kind`` exception in ``exc`` or its (nested) exception groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((f for e in exc.exceptions if (f := _find(e, kind)) is not None), None)
    return None


def _describe(exc: BaseException) -> str:
    """Flatten exception groups into one readable line."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, asyncio.CancelledError):
        return "connection cancelled"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text
