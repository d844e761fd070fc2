"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat completions protocol, scripted.

``async with FakeModelServer({"weather_agent": [...], "command_generator": [...]}) as fake:``
serves ``POST /<caller>/v1/chat/completions`` (``/v1/...`` is caller ``default``) on a random port;
point a client at ``fake.base_url(caller)``. Each request pops the caller's next scripted reply
(format: ``docs/conversation-tests.md``). Beyond the fixture format, a reply may carry ``stall``
(send nothing more, until the client gives up) and ``drop`` (close the connection), both applied
after the first streamed chunk when streaming, and ``finish_reason`` (e.g. ``length``: a reply
cut by the reply-length cap). With ``props`` given, ``GET /props`` answers it, as llama.cpp's
server describes itself there. ``POST .../embeddings`` answers with deterministic
bag-of-words vectors (:func:`embed_text`), unscripted; the texts of each such request are kept in
:attr:`FakeModelServer.embedding_inputs` (not in ``requests``).

Strict: a request with no reply left gets HTTP 400 and is recorded as a problem, as are replies
left unconsumed and failed ``expect`` checks; :meth:`FakeModelServer.problems` lists them and
:meth:`FakeModelServer.assert_done` raises if there are any. Every request is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FakeModelServer", "RecordedRequest", "Reply", "normalize_reply",
           "scripted_search_index"]


@contextlib.asynccontextmanager
async def scripted_search_index() -> AsyncIterator[Path]:
    """A folder of its own for the search index of an assistant on this server: its vectors
    come from the fake embeddings, so they must not replace the project's index (built with
    the real ones). Removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="subagents-scripted-index-") as root:
        yield Path(root)


@dataclass
class Reply:
    """One scripted model reply."""

    text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    delay_ms: float = 0
    expect: dict[str, Any] | None = None
    stall: bool = False
    drop: bool = False
    finish_reason: str | None = None
    """What the reply says ended it (default: ``tool_calls`` or ``stop``)."""

    @property
    def finish(self) -> str:
        """The reply's ``finish_reason``."""
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


@dataclass
class RecordedRequest:
    """A request the fake server received."""

    caller: str
    index: int
    """1-based number of this request among the caller's requests."""
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float
    handled_ms: float = 0.0
    """Time the server spent on this request (parse to last byte written), for benchmarks."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's chat messages."""
        return list(self.body.get("messages") or [])

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered in the request."""
        return [t.get("function", {}).get("name", "") for t in self.body.get("tools") or []]

    @property
    def system_text(self) -> str:
        """The request's system messages, joined by newlines."""
        return "\n".join(str(m.get("content") or "") for m in self.messages
                         if m.get("role") == "system")


_REPLY_KEYS = {"text", "tool_calls", "error", "delay_ms", "expect", "stall", "drop",
               "finish_reason"}
EXPECT_KEYS = {"tools", "tools_include", "tools_exclude", "tools_schema", "system_contains",
               "system_not_contains", "messages_contain", "messages_not_contain", "last_user",
               "roles"}


def normalize_reply(raw: Any, counter: list[int] | None = None) -> Reply:
    """Turn a fixture reply (bare string or mapping) into a :class:`Reply`; raise ValueError."""
    counter = counter if counter is not None else [0]
    if isinstance(raw, str):
        return Reply(text=raw)
    if not isinstance(raw, dict):
        raise ValueError(f"a scripted reply must be a string or a mapping, not {raw!r}")
    unknown = set(raw) - _REPLY_KEYS
    if unknown:
        raise ValueError(f"unknown reply key(s) {', '.join(sorted(unknown))}; "
                         f"use {', '.join(sorted(_REPLY_KEYS))}")
    calls = []
    for item in raw.get("tool_calls") or []:
        if not isinstance(item, dict) or not item:
            raise ValueError(f"a tool call must be a mapping, not {item!r}")
        counter[0] += 1
        if "name" in item and set(item) <= {"name", "arguments", "id"}:
            calls.append({"id": item.get("id") or f"call_{counter[0]}", "name": item["name"],
                          "arguments": item.get("arguments", {})})
        elif len(item) == 1:
            name, args = next(iter(item.items()))
            calls.append({"id": f"call_{counter[0]}", "name": name,
                          "arguments": {} if args is None else args})
        else:
            raise ValueError(f"a tool call is {{tool_name: {{args}}}} or {{name, arguments, id}}, "
                             f"not {item!r}")
    expect = raw.get("expect")
    if expect is not None and (not isinstance(expect, dict) or set(expect) - EXPECT_KEYS):
        raise ValueError(f"expect takes {', '.join(sorted(EXPECT_KEYS))}")
    if expect and not isinstance(expect.get("tools_schema", {}), dict):
        raise ValueError("expect.tools_schema maps tool names to (part of) their schema")
    if expect and not isinstance(expect.get("roles", []), list):
        raise ValueError("expect.roles is the list of message roles, in order")
    error = raw.get("error")
    if error is not None and (not isinstance(error, dict) or "status" not in error):
        raise ValueError("error needs {status: <http status>, message: ...}")
    return Reply(text=raw.get("text"), tool_calls=calls, error=error,
                 delay_ms=float(raw.get("delay_ms") or 0), expect=expect,
                 stall=bool(raw.get("stall")), drop=bool(raw.get("drop")),
                 finish_reason=str(raw["finish_reason"]) if raw.get("finish_reason") else None)


def check_expect(expect: dict[str, Any], request: RecordedRequest) -> list[str]:
    """Failed ``expect`` checks of ``request``, as readable lines."""
    return (_check_tools(expect, request.tool_names) + _check_schemas(expect, request)
            + _check_texts(expect, request))


def _check_tools(expect: dict[str, Any], names: list[str]) -> list[str]:
    failures: list[str] = []
    if "tools" in expect and sorted(expect["tools"]) != sorted(names):
        failures.append(f"tools: expected {sorted(expect['tools'])}, offered {sorted(names)}")
    for name in expect.get("tools_include") or []:
        if name not in names:
            failures.append(f"tools_include: {name!r} not offered (offered {names})")
    for name in expect.get("tools_exclude") or []:
        if name in names:
            failures.append(f"tools_exclude: {name!r} was offered")
    return failures


def _check_schemas(expect: dict[str, Any], request: RecordedRequest) -> list[str]:
    offered = {t.get("function", {}).get("name"): t.get("function", {})
               for t in request.body.get("tools") or []}
    failures: list[str] = []
    for name, wanted in (expect.get("tools_schema") or {}).items():
        if name not in offered:
            failures.append(f"tools_schema: {name!r} not offered (offered {sorted(offered)})")
        elif not _contains(offered[name], wanted):
            failures.append(f"tools_schema: {name!r} is offered as "
                            f"{json.dumps(offered[name], sort_keys=True)}, which does not "
                            f"contain {json.dumps(wanted, sort_keys=True)}")
    return failures


def _contains(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(k in actual and _contains(actual[k], v)
                                                for k, v in wanted.items())
    return bool(actual == wanted)


def _check_texts(expect: dict[str, Any], request: RecordedRequest) -> list[str]:
    failures: list[str] = []
    system = request.system_text
    for text in _as_list(expect.get("system_contains")):
        if text not in system:
            failures.append(f"system_contains: {text!r} not in the system prompt")
    for text in _as_list(expect.get("system_not_contains")):
        if text in system:
            failures.append(f"system_not_contains: {text!r} is in the system prompt")
    others = [str(m.get("content") or "") for m in request.messages if m.get("role") != "system"]
    for text in _as_list(expect.get("messages_contain")):
        if not any(text in content for content in others):
            failures.append(f"messages_contain: {text!r} in no non-system message")
    failures += _check_messages(expect, request, others)
    if "last_user" in expect:
        users = [str(m.get("content") or "") for m in request.messages if m.get("role") == "user"]
        last = users[-1] if users else None
        if last != expect["last_user"]:
            failures.append(f"last_user: expected {expect['last_user']!r}, got {last!r}")
    return failures


def _check_messages(expect: dict[str, Any], request: RecordedRequest,
                    others: list[str]) -> list[str]:
    failures: list[str] = []
    for text in _as_list(expect.get("messages_not_contain")):
        if any(text in content for content in others):
            failures.append(f"messages_not_contain: {text!r} is in a non-system message")
    if "roles" in expect:
        roles = [str(m.get("role")) for m in request.messages]
        if roles != list(expect["roles"]):
            failures.append(f"roles: expected {list(expect['roles'])}, got {roles}")
    return failures


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


class FakeModelServer:
    """Scripted OpenAI-compatible server; see the module docstring."""

    def __init__(self, script: dict[str, list[Any]] | None = None, *, host: str = "127.0.0.1",
                 chunk_chars: int = 8, model: str = "fake-model",
                 props: dict[str, Any] | None = None) -> None:
        self.host = host
        self.props = props
        """What ``GET /props`` answers (None: 404, as servers other than llama.cpp do)."""
        self.port = 0
        self.chunk_chars = chunk_chars
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.embedding_inputs: list[list[str]] = []
        """The texts of each ``/embeddings`` request, in arrival order."""
        self._problems: list[str] = []
        self._queues: dict[str, list[Reply]] = {}
        self._counts: dict[str, int] = {}
        self._counter = [0]
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()
        self._arrived = asyncio.Condition()
        for caller, replies in (script or {}).items():
            self.add(caller, replies)

    # ------------------------------------------------------------------ scripting
    def add(self, caller: str, replies: list[Any]) -> None:
        """Append replies for ``caller`` (fixture format)."""
        self._queues.setdefault(caller, []).extend(normalize_reply(r, self._counter)
                                                   for r in replies)

    def reset(self) -> None:
        """Forget scripts, requests and problems (a new test case on the same server)."""
        self._queues.clear()
        self._counts.clear()
        self._problems.clear()
        self.requests.clear()
        self.embedding_inputs.clear()
        self._counter[0] = 0

    def base_url(self, caller: str = "default") -> str:
        """The OpenAI-compatible base URL for ``caller``'s scripted replies."""
        prefix = "" if caller == "default" else f"/{caller}"
        return f"http://{self.host}:{self.port}{prefix}/v1"

    async def wait_for_requests(self, count: int, caller: str | None = None) -> None:
        """Wait (bound it with a timeout) until ``count`` requests (of ``caller``) arrived."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(
                self.requests if caller is None else self.requests_of(caller)) >= count)

    def llm_factory(self, *, max_retries: int = 0) -> Callable[[str, Any], Any]:
        """An ``Assistant(llm_factory=...)`` that points every caller at its own path here."""
        from subagents.llm import Model, build_model

        def factory(caller: str, settings: Any) -> Model:
            for model in settings.members():  # every model of a routed group
                model.api_base, model.api_key = self.base_url(caller), None
                model.max_retries, model.provider = max_retries, "openai"
            return build_model(settings, name=caller)

        return factory

    def requests_of(self, caller: str) -> list[RecordedRequest]:
        """The received requests of ``caller``."""
        return [r for r in self.requests if r.caller == caller]

    def unconsumed(self) -> dict[str, int]:
        """Scripted replies not yet requested, counted per caller."""
        return {c: len(q) for c, q in self._queues.items() if q}

    def problems(self) -> list[str]:
        """Problems seen so far, including scripted replies never requested."""
        left = [f"{n} scripted repl{'y' if n == 1 else 'ies'} for {c} never requested"
                for c, n in self.unconsumed().items()]
        return [*self._problems, *left]

    def assert_done(self) -> None:
        """Raise AssertionError listing the problems, if there are any."""
        problems = self.problems()
        if problems:
            raise AssertionError("fake model server: " + "; ".join(problems))

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> FakeModelServer:
        self._server = await asyncio.start_server(self._handle, self.host, 0, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while not self._closing.is_set():
                request = await _read_request(reader)
                if request is None:
                    break
                started = time.perf_counter()
                before = len(self.requests)
                keep = await self._respond(request, writer)
                if len(self.requests) > before:
                    self.requests[-1].handled_ms = (time.perf_counter() - started) * 1000
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the server is shutting down
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _respond(self, request: tuple[str, str, dict[str, str], bytes],
                       writer: asyncio.StreamWriter) -> bool:
        method, path, headers, raw = request
        route = path.split("?", 1)[0]  # an azure path carries ?api-version=
        if await self._unscripted(method, route, raw, writer):
            return True
        if method != "POST" or not route.endswith("/chat/completions"):
            await _send_json(writer, 404, {"error": {"message": f"no route {method} {path}"}})
            return True
        prefix = route[: -len("/chat/completions")].strip("/")
        parts = prefix.split("/")
        caller = "default" if parts in (["v1"], [""]) else parts[0]
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            await _send_json(writer, 400, {"error": {"message": "body is not JSON"}})
            return True
        self._counts[caller] = self._counts.get(caller, 0) + 1
        record = RecordedRequest(caller, self._counts[caller], path, headers, body,
                                 time.monotonic())
        self.requests.append(record)
        async with self._arrived:
            self._arrived.notify_all()
        queue = self._queues.get(caller) or []
        if not queue:
            message = f"unexpected model call by {caller}, request {record.index}"
            self._problems.append(message)
            await _send_json(writer, 400, {"error": {"message": message,
                                                     "type": "unexpected_call"}})
            return True
        reply = queue.pop(0)
        if reply.expect:
            for failure in check_expect(reply.expect, record):
                self._problems.append(f"expect failed for {caller}, request {record.index}: "
                                      f"{failure}")
        if reply.delay_ms:
            await asyncio.sleep(reply.delay_ms / 1000)
        if reply.error is not None:
            status = int(reply.error["status"])
            await _send_json(writer, status, {"error": {
                "message": str(reply.error.get("message", f"scripted error {status}")),
                "type": "scripted_error"}})
            return True
        if body.get("stream"):
            return await self._stream(reply, body, writer)
        if reply.drop:
            return False
        if reply.stall:
            await self._closing.wait()
            return False
        await _send_json(writer, 200, self._completion(reply, body))
        return True

    async def _unscripted(self, method: str, route: str, raw: bytes,
                          writer: asyncio.StreamWriter) -> bool:
        """Answer ``/embeddings`` and ``/props`` (no script); whether it was one of them."""
        if method == "POST" and route.endswith("/embeddings"):
            texts, payload = _embeddings(raw)
            self.embedding_inputs.append(texts)
            await _send_json(writer, 200, payload)
            return True
        if method == "GET" and route == "/props" and self.props is not None:
            await _send_json(writer, 200, self.props)
            return True
        return False

    def _message(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": _args_text(c["arguments"])}}
                for c in reply.tool_calls]
        return message

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        prompt = len(json.dumps(body.get("messages", []))) // 4
        completion = (len(reply.text or "") + sum(len(_args_text(c["arguments"]))
                                                  for c in reply.tool_calls)) // 4 + 1
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _completion(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
                "created": int(time.time()), "model": body.get("model", self.model),
                "choices": [{"index": 0, "message": self._message(reply),
                             "finish_reason": reply.finish}],
                "usage": self._usage(body, reply)}

    async def _stream(self, reply: Reply, body: dict[str, Any],
                      writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
        base = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model", self.model)}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        text = reply.text or ""
        for start in range(0, len(text), self.chunk_chars):
            deltas.append({"content": text[start:start + self.chunk_chars]})
        for index, call in enumerate(reply.tool_calls):
            args = _args_text(call["arguments"])
            half = len(args) // 2
            deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                           "function": {"name": call["name"], "arguments": ""}}]})
            for piece in (args[:half], args[half:]):
                if piece:
                    deltas.append({"tool_calls": [{"index": index,
                                                   "function": {"arguments": piece}}]})
        for number, delta in enumerate(deltas):
            await _send_chunk(writer, {**base, "choices": [
                {"index": 0, "delta": delta, "finish_reason": None}]})
            if number == 1 and reply.drop:
                return False
            if number == 1 and reply.stall:
                await self._closing.wait()
                return False
            if reply.delay_ms and number:
                await asyncio.sleep(reply.delay_ms / 1000)
        await _send_chunk(writer, {**base, "choices": [
            {"index": 0, "delta": {}, "finish_reason": reply.finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await _send_chunk(writer, {**base, "choices": [], "usage": self._usage(body, reply)})
        await _write_chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


EMBEDDING_SIZE = 256


def embed_text(text: str) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words are close (cosine)."""
    import hashlib

    vector = [0.0] * EMBEDDING_SIZE
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
        vector[int.from_bytes(digest, "big") % EMBEDDING_SIZE] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def _embeddings(raw: bytes) -> tuple[list[str], dict[str, Any]]:
    try:
        body = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        body = {}
    inputs = body.get("input") if isinstance(body, dict) else None
    texts = [inputs] if isinstance(inputs, str) else [str(i) for i in inputs or []]
    model = body.get("model", "fake-embeddings") if isinstance(body, dict) else "fake-embeddings"
    return texts, {"object": "list", "model": model,
                   "data": [{"object": "embedding", "index": i, "embedding": embed_text(t)}
                            for i, t in enumerate(texts)],
                   "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def _args_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


async def _read_request(reader: asyncio.StreamReader
                        ) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = ([*lines[0].split(" "), "", ""])[:3]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


async def _send_json(writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
              500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()


async def _send_chunk(writer: asyncio.StreamWriter, payload: dict[str, Any]) -> None:
    await _write_chunk(writer, b"data: " + json.dumps(payload).encode() + b"\n\n")


async def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()
