"""Answers to the requests an MCP server may send us: roots, sampling and elicitation.

Roots and sampling are opt-in per server in ``endpoints.yml``; a server that is not given them
sees neither capability and cannot call them. Elicitation (a server asking the user for input in
the middle of a call) is always offered: the agent that made the call asks the user and parks,
and the user's answer goes back to the server on a later turn (see :class:`ElicitationRegistry`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.mcp.content import block_text

log = structlog.get_logger("subagents.mcp")
_T = TypeVar("_T")


def root_uris(config: McpServerConfig, root: Path) -> list[str]:
    """The configured roots as ``file://`` URIs (directories relative to the project root)."""
    out = []
    for entry in config.roots:
        if entry.startswith("file://"):
            out.append(entry)
        else:
            path = Path(entry)
            out.append((path if path.is_absolute() else root / path).resolve().as_uri())
    return out


def roots_callback(config: McpServerConfig, root: Path) -> Any:
    """A ``list_roots_callback`` for the SDK client, or None when no roots are configured."""
    if not config.roots:
        return None
    from mcp.types import ListRootsResult, Root

    roots = [Root.model_validate({"uri": uri, "name": Path(uri.removeprefix("file://")).name
                                  or None}) for uri in root_uris(config, root)]

    async def list_roots(context: Any) -> Any:
        log.debug("mcp.roots.listed", server=config.name, roots=len(roots))
        return ListRootsResult(roots=roots)

    return list_roots


class SamplingHandler:
    """Answers ``sampling/createMessage`` with the configured model group, capped in tokens."""

    def __init__(self, config: McpServerConfig, endpoints: EndpointsConfig | None) -> None:
        assert config.sampling is not None
        self.server = config.name
        self.settings = config.sampling
        self.endpoints = endpoints
        self._llm: Any = None

    def _client(self) -> Any:
        if self._llm is None:
            from subagents.llm import build_model, resolve_model_settings

            model = resolve_model_settings({"model_group": self.settings.model_group},
                                           self.endpoints, where="endpoints.yml")
            self._llm = build_model(model, name=f"mcp-sampling:{self.server}")
        return self._llm

    async def __call__(self, context: Any, params: Any) -> Any:
        """Answer one sampling request with a model reply, or an MCP error when it fails."""
        from mcp.types import INTERNAL_ERROR, CreateMessageResult, ErrorData, TextContent

        if params.tools:
            return ErrorData(code=INTERNAL_ERROR, message="tool use in sampling is not supported")
        messages: list[dict[str, Any]] = []
        if params.system_prompt:
            messages.append({"role": "system", "content": params.system_prompt})
        for message in params.messages:
            content = message.content
            blocks = content if isinstance(content, list) else [content]
            messages.append({"role": message.role,
                             "content": "\n".join(block_text(b) for b in blocks)})
        max_tokens = min(int(params.max_tokens), self.settings.max_tokens)
        try:
            llm = self._client()
            response = await llm.complete(messages, None,
                                          options={"max_completion_tokens": max_tokens})
        except Exception as exc:  # noqa: BLE001 - the server gets an error, the run goes on
            log.warning("mcp.sampling.failed", server=self.server, error=str(exc))
            return ErrorData(code=INTERNAL_ERROR, message="sampling failed")
        log.info("mcp.sampling.answered", server=self.server, model=llm.settings.model,
                 max_tokens=max_tokens, completion_tokens=response.usage.completion_tokens)
        stop = "maxTokens" if response.finish_reason == "length" else "endTurn"
        return CreateMessageResult(role="assistant", model=llm.settings.model, stop_reason=stop,
                                   content=TextContent(type="text", text=response.text or ""))

    async def close(self) -> None:
        """Close the model client if one was created."""
        if self._llm is not None:
            await self._llm.close()


# ---------------------------------------------------------------------------- elicitation
ELICITATION_TIMEOUT = 600.0
"""Seconds a server's request for input waits for the user's answer by default."""


@dataclass(frozen=True)
class ElicitationOwner:
    """Who may be asked when a call elicits: the conversation and tool call it belongs to."""

    key: str
    """``<conversation>:<tool call id>``: one pending request per call."""
    timeout: float = ELICITATION_TIMEOUT


_OWNER: ContextVar[ElicitationOwner | None] = ContextVar("subagents_elicitation_owner",
                                                         default=None)


@contextlib.contextmanager
def elicitation_owner(owner: ElicitationOwner) -> Iterator[None]:
    """MCP calls made inside this block may ask the user (through the agent) for input."""
    token = _OWNER.set(owner)
    try:
        yield
    finally:
        _OWNER.reset(token)


def with_defaults(schema: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    """An answer to a form with the form's ``default`` for every field left out."""
    filled = dict(content)
    for name, spec in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(spec, dict) and "default" in spec:
            filled[name] = spec["default"]
    return filled


class _Flight:
    """One MCP call that may be asked for input, and its open question."""

    def __init__(self, owner: ElicitationOwner, registry: ElicitationRegistry) -> None:
        self.owner = owner
        self.registry = registry
        """The registry that holds this call."""
        self.question: Any = None
        """The open ``ElicitRequestParams`` (None while no question waits)."""
        self.answer: asyncio.Future[Any] | None = None
        self.asked = asyncio.Event()
        """Set while a question waits for its answer."""
        self.settled = asyncio.Event()
        """Set while no question waits (the opposite of :attr:`asked`)."""
        self.settled.set()
        self.task: asyncio.Task[Any] | None = None
        self.collecting = False
        """Set once an answer was sent: a resumed run will collect the call's result."""
        self._watchers: list[asyncio.Future[None]] = []

    def question_asked(self) -> asyncio.Future[None]:
        """A future resolved once a question waits (at once if one does already)."""
        watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.asked.is_set():
            watcher.set_result(None)
        else:
            self._watchers = [w for w in self._watchers if not w.done()]
            self._watchers.append(watcher)
        return watcher

    @property
    def waiting(self) -> bool:
        """True while the server waits for the user's answer."""
        return self.asked.is_set()

    async def ask(self, params: Any) -> Any:
        """Hold the server's request until the answer arrives (or the deadline cancels it)."""
        loop = asyncio.get_running_loop()
        answer = self.answer = loop.create_future()
        self.question = params
        self.collecting = False
        self.settled.clear()
        self.asked.set()
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)
        deadline = loop.call_later(self.owner.timeout, self._expire)
        try:
            return await answer
        finally:
            deadline.cancel()
            if not answer.done():  # the connection went away while the user was asked
                self._close()

    def respond(self, result: Any) -> bool:
        """Answer the open question; False when none is open."""
        if self.answer is None or self.answer.done():
            return False
        self.answer.set_result(result)
        self._close()
        return True

    def _close(self) -> None:
        self.asked.clear()
        self.settled.set()
        self.question = None

    def _expire(self) -> None:
        from mcp.types import ElicitResult

        if self.respond(ElicitResult(action="cancel")):
            log.info("mcp.elicitation.expired", key=self.owner.key, timeout=self.owner.timeout)
        self.registry.forget(self.owner.key)


class ElicitationHandler:
    """The ``elicitation_callback`` of one connection: routes a server's request for input to
    the call in flight that may ask the user.

    A request names no call, so it goes to the only call in flight on this connection that has
    an owner; with none or several the request is cancelled (and logged).
    """

    def __init__(self, server: str, registry: ElicitationRegistry) -> None:
        self.server = server
        self.registry = registry
        self._flights: list[_Flight] = []

    @contextlib.contextmanager
    def track(self) -> Iterator[_Flight | None]:
        """Register the calling task's flight (if its call may ask) while the call runs."""
        flight = self.registry.current()
        if flight is not None:
            self._flights.append(flight)
        try:
            yield flight
        finally:
            if flight is not None:
                self._flights.remove(flight)

    def sole_flight(self) -> _Flight | None:
        """The one call in flight on this connection that may ask the user (None: none or
        several)."""
        candidates = [f for f in self._flights if not f.waiting]
        return candidates[0] if len(candidates) == 1 else None

    async def __call__(self, context: Any, params: Any) -> Any:
        """Answer the server's ``elicitation/create`` request with the user's reply."""
        from mcp.types import ElicitResult

        candidates = [f for f in self._flights if not f.waiting]
        if len(candidates) != 1:
            log.warning("mcp.elicitation.unroutable", server=self.server,
                        calls_in_flight=len(candidates))
            return ElicitResult(action="cancel")
        flight = candidates[0]
        log.info("mcp.elicitation.requested", server=self.server, key=flight.owner.key,
                 mode=getattr(params, "mode", "form"))
        result = await flight.ask(params)
        log.info("mcp.elicitation.answered", server=self.server, key=flight.owner.key,
                 action=result.action)
        return result


class ElicitationRegistry:
    """The calls of this process that wait for a user's answer, by owner key.

    A call that elicits keeps running in a task of its own; the agent run that made it parks and
    a later run (the user's answer) finds it here. The registry lives in memory: after a restart
    nothing is pending, and the run that resumes says so instead of waiting. The MCP pool owns
    one (:attr:`subagents.mcp.pool.MCPPool.elicitations`) and hands it to its connections, the
    agents' toolsets and the OAuth callback; nothing reaches it through a module global.
    """

    def __init__(self) -> None:
        self._flights: dict[str, _Flight] = {}
        self._current: ContextVar[_Flight | None] = ContextVar("subagents_flight",
                                                               default=None)

    def current(self) -> _Flight | None:
        """The flight of the MCP call the calling task makes (None: the call may not ask)."""
        return self._current.get()

    def question(self, key: str) -> Any:
        """The open question of the call ``key`` (None when none waits)."""
        flight = self._flights.get(key)
        return flight.question if flight is not None else None

    def answered(self, key: str) -> bool:
        """Whether the call ``key`` got its answer while no run was waiting (e.g. the user
        finished a sign-in in the browser): a resumed run collects its result."""
        flight = self._flights.get(key)
        return flight is not None and flight.collecting and not flight.waiting

    def active(self, flight: _Flight) -> bool:
        """Whether ``flight`` is still the held call of its key (not ended or dropped)."""
        return self._flights.get(flight.owner.key) is flight

    def pending(self, key: str) -> bool:
        """Whether the call ``key`` is still held (running or waiting for an answer)."""
        return key in self._flights

    def held_call(self, key: str) -> asyncio.Task[Any] | None:
        """The task of the held call ``key`` (observers may wait for it), if any."""
        flight = self._flights.get(key)
        return flight.task if flight is not None else None

    def answer(self, key: str, result: Any) -> bool:
        """Send the user's answer for the call ``key``; False when nothing waits for one."""
        flight = self._flights.get(key)
        if flight is None or not flight.respond(result):
            return False
        flight.collecting = True
        return True

    def forget(self, key: str) -> None:
        """Drop the call ``key``: its question is cancelled and its result discarded."""
        from mcp.types import ElicitResult

        flight = self._flights.pop(key, None)
        if flight is not None:
            flight.respond(ElicitResult(action="cancel"))

    async def call(self, start: Callable[[], Awaitable[_T]]) -> _T | None:
        """Make (or, for a call that was answered, wait for) the MCP call ``start`` starts.

        Returns the result, or None when the server asked for input: the question is then
        :meth:`question` of the owner's key and the call goes on in the background.
        """
        owner = _OWNER.get()
        if owner is None:
            return await start()
        flight = self._flights.get(owner.key)
        if flight is None or flight.task is None:
            flight = _Flight(owner, self)
            token = self._current.set(flight)
            try:
                flight.task = asyncio.ensure_future(start())  # copies the context: the flight
            finally:
                self._current.reset(token)
            flight.task.add_done_callback(lambda task: self._ended(flight, task))
            self._flights[owner.key] = flight
        while True:
            asked = flight.question_asked()
            try:
                await asyncio.wait({flight.task, asked}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                self._flights.pop(owner.key, None)  # the run was cancelled: so is the call
                flight.task.cancel()
                raise
            finally:
                asked.cancel()
            if flight.task.done():
                break
            if flight.waiting:
                return None
            # asked and answered before this run woke up: the call goes on, so does the wait
        self._flights.pop(owner.key, None)
        # the task's context holds the flight: dropping the task frees both without the collector
        task, flight.task = flight.task, None
        result: _T = task.result()
        return result

    def _ended(self, flight: _Flight, task: asyncio.Task[Any]) -> None:
        """A held call ended: drop it unless a resumed run is about to collect its result (a
        call that failed while the user was asked, e.g. its connection died, is dropped)."""
        if not task.cancelled():
            task.exception()  # retrieved: a dropped call may fail unobserved
        if not flight.collecting and self._flights.get(flight.owner.key) is flight:
            del self._flights[flight.owner.key]

"""The process-wide registry of calls waiting for the user's input."""
