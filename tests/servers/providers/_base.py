"""What every provider stand-in shares: the scripted replies, the recorded requests, serving.

A subclass speaks one provider's wire format: it says which requests are chat calls
(:meth:`WireServer.classify`) and renders a scripted reply as that provider's JSON body, its
stream, or its error body. Everything else (recording, the script, starting and stopping uvicorn
on 127.0.0.1) lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from subagents.testing.mcp_http import serve_app

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city today.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
"""An OpenAI-shaped tool the tests offer, whatever the provider."""


@dataclass(frozen=True)
class ScriptedCall:
    """A tool call the model makes: its id, name and arguments (an object)."""

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        """The arguments as compact JSON text."""
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True)
class ScriptedError:
    """An error reply: HTTP status, message, and the seconds a 429 asks the client to wait."""

    status: int
    message: str
    retry_after: int | None = None


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted model turn: text and/or tool calls, an error, or a malformed body."""

    text: str = ""
    calls: tuple[ScriptedCall, ...] = ()
    error: ScriptedError | None = None
    malformed: bool = False
    """A 200 whose body is not the provider's JSON (cut short); streamed: a broken event."""
    stall: bool = False
    """Answer nothing until the server stops (the client's timeout ends the call)."""


def parse_reply(raw: Any, number: int) -> ScriptedReply:
    """A reply from a string (text) or a mapping with ``text``, ``tool_calls`` (each
    ``{name: {args}}`` or ``{name, arguments, id}``), ``error`` (``{status, message,
    retry_after}``), ``malformed: true`` or ``stall: true``. ``number`` makes tool-call ids
    unique."""
    if isinstance(raw, str):
        return ScriptedReply(text=raw)
    keys = {"text", "tool_calls", "error", "malformed", "stall"}
    if not isinstance(raw, dict) or set(raw) - keys:
        raise ValueError(f"a scripted reply is a string or a mapping of {', '.join(sorted(keys))};"
                         f" not {raw!r}")
    calls = []
    for index, item in enumerate(raw.get("tool_calls") or []):
        if "name" in item:
            name, args, call_id = item["name"], item.get("arguments", {}), item.get("id")
        else:
            (name, args), call_id = next(iter(item.items())), None
        calls.append(ScriptedCall(call_id or f"call{number}x{index}", name, dict(args or {})))
    error = raw.get("error")
    return ScriptedReply(
        text=str(raw.get("text") or ""), calls=tuple(calls), malformed=bool(raw.get("malformed")),
        stall=bool(raw.get("stall")),
        error=None if error is None else ScriptedError(
            int(error["status"]), str(error.get("message") or f"scripted error {error['status']}"),
            None if error.get("retry_after") is None else int(error["retry_after"])))


@dataclass
class WireRequest:
    """A request the stand-in received, as the provider's API would see it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes
    body: Any
    """The decoded JSON body (None when it was not JSON)."""
    stream: bool = False
    usage: tuple[int, int] = (0, 0)
    """The (input, output) token counts the reply reported."""


@dataclass
class _Script:
    replies: list[ScriptedReply] = field(default_factory=list)
    served: int = 0


class WireServer:
    """Scripted stand-in for one provider's chat API, served on 127.0.0.1 (a random port).

    ``async with AnthropicServer(["Hello", {"tool_calls": [{"get_weather": {...}}]}]) as s:``
    answers each chat call with the next scripted reply, in the provider's own format, streamed
    when the request asks for a stream. Every request is recorded in :attr:`requests`; a chat call
    with no reply left gets HTTP 500 and is listed by :meth:`problems`.
    """

    chunk_chars = 6
    """Streamed text is cut into pieces of this many characters."""

    def __init__(self, replies: Iterable[Any] = ()) -> None:
        self.requests: list[WireRequest] = []
        self._script = _Script()
        self._problems: list[str] = []
        self._base_url: str | None = None
        self._serving: contextlib.AbstractAsyncContextManager[str] | None = None
        self._closing = asyncio.Event()
        self.add(*replies)

    # ------------------------------------------------------------------ scripting
    def add(self, *replies: Any) -> None:
        """Append scripted replies (strings or mappings, see :func:`parse_reply`)."""
        start = len(self._script.replies)
        self._script.replies.extend(parse_reply(r, start + i + 1) for i, r in enumerate(replies))

    def problems(self) -> list[str]:
        """Chat calls that found no reply, and replies never asked for."""
        left = len(self._script.replies) - self._script.served
        return [*self._problems, *([f"{left} scripted replies never requested"] if left else [])]

    def assert_done(self) -> None:
        """Raise AssertionError when :meth:`problems` lists anything."""
        if self.problems():
            raise AssertionError("; ".join(self.problems()))

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` while serving."""
        if self._base_url is None:
            raise RuntimeError("the server is not running; use it as an async context manager")
        return self._base_url

    # ------------------------------------------------------------------ provider format
    def classify(self, request: WireRequest) -> bool | None:
        """True for a streamed chat call, False for a plain one, None for any other request."""
        raise NotImplementedError

    def reply_body(self, reply: ScriptedReply, request: WireRequest) -> dict[str, Any]:
        """The provider's JSON body for a plain reply."""
        raise NotImplementedError

    def reply_stream(self, reply: ScriptedReply, request: WireRequest) -> Iterable[bytes]:
        """The provider's streamed reply, piece by piece as written to the connection."""
        raise NotImplementedError

    def error_response(self, error: ScriptedError, request: WireRequest) -> Response:
        """The provider's error reply."""
        raise NotImplementedError

    def malformed_stream(self, request: WireRequest) -> Iterable[bytes]:
        """A stream that starts well (the text ``Hel``) and then sends an event that is not
        JSON."""
        raise NotImplementedError

    stream_media_type = "text/event-stream"

    def other(self, request: WireRequest) -> Response:
        """A reply to a request that is not a chat call (a 404 unless a subclass serves it)."""
        return JSONResponse({"error": f"no route {request.method} {request.path}"}, 404)

    # ------------------------------------------------------------------ helpers for subclasses
    def usage_for(self, reply: ScriptedReply, request: WireRequest) -> tuple[int, int]:
        """Deterministic token counts: a quarter of the request bytes, a quarter of the output."""
        output = len(reply.text) + sum(len(c.arguments_json) + len(c.name) for c in reply.calls)
        return max(1, len(request.raw) // 4), output // 4 + 1

    def pieces(self, text: str) -> list[str]:
        """``text`` cut into streamed pieces."""
        return [text[i:i + self.chunk_chars] for i in range(0, len(text), self.chunk_chars)]

    # ------------------------------------------------------------------ HTTP
    def app(self) -> Starlette:
        """The ASGI app: every path, recorded, then answered by the provider format."""
        return Starlette(routes=[Route("/{path:path}", self._handle,
                                       methods=["GET", "POST", "PUT", "DELETE"])])

    async def _handle(self, http: Request) -> Response:
        raw = await http.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = WireRequest(http.method, http.url.path, dict(http.query_params),
                              {k.lower(): v for k, v in http.headers.items()}, raw, body)
        self.requests.append(request)
        kind = self.classify(request)
        if kind is None:
            return self.other(request)
        request.stream = kind
        if self._script.served >= len(self._script.replies):
            self._problems.append(f"unexpected chat call {len(self.requests)}: {request.path}")
            return JSONResponse({"error": "no scripted reply left"}, 500)
        reply = self._script.replies[self._script.served]
        self._script.served += 1
        if reply.stall:
            await self._closing.wait()
            return JSONResponse({"error": "the server is stopping"}, 503)
        if reply.error is not None:
            return self.error_response(reply.error, request)
        request.usage = self.usage_for(reply, request)
        if reply.malformed and not kind:
            return Response(b'{"id": "cut-short", "content": [', 200,
                            media_type="application/json")
        if kind:
            pieces = self.malformed_stream(request) if reply.malformed else \
                self.reply_stream(reply, request)
            return StreamingResponse(_aiter(pieces), media_type=self.stream_media_type)
        return JSONResponse(self.reply_body(reply, request))

    async def __aenter__(self) -> WireServer:
        self._closing.clear()
        self._serving = serve_app(self.app())
        self._base_url = await self._serving.__aenter__()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        serving, self._serving, self._base_url = self._serving, None, None
        self._closing.set()
        if serving is not None:
            await serving.__aexit__(kind, exc, tb)


async def _aiter(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line and a JSON (or raw text) ``data:``."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()
