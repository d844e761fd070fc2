"""HTTP API (starlette + uvicorn).

* ``POST /webhooks/rest/webhook`` ``{"sender", "message", "metadata"}`` -> the bot messages
  (Rasa's REST channel contract);
* ``POST /webhooks/stream/webhook`` -> ``text/event-stream``: ``message_start`` /
  ``message_chunk`` / ``message_end`` while text is generated (``message`` for whole
  messages), ``tool`` and ``slot`` events, and a final ``done``;
* ``GET /conversations/{sender}/tracker`` -> events, slots and stack;
* ``POST /conversations/{sender}/client_tool_results`` ``{"id", "result"}`` (or
  ``{"results": [...]}``) -> delivers client-executed tool results, resumes the agent, answers
  like the REST webhook;
* ``GET /health``, ``GET /version``;
* ``GET /inspect``: the inspector page (``?inspect=true`` on the stream adds agent step events).

With a token (``--token`` or ``SUBAGENTS_TOKEN``) every route but ``/health`` needs
``Authorization: Bearer <token>`` or ``?token=<token>``. One sender's messages are serialised
by the assistant.
A message may carry an idempotency key (``Idempotency-Key`` header or ``message_id``); a retry
with a recorded key is answered from the tracker. A turn that fails answers the internal-error
reply (REST) or a ``message`` then an ``error`` frame (SSE) with an error id that finds the
details in the log; nothing of a failed turn is recorded. Browser origins, content types, Host
names and stalled connections are checked by :mod:`subagents.server.security`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from subagents import __version__
from subagents.channels.collecting import CollectingOutputChannel
from subagents.channels.input import InputChannel
from subagents.channels.registry import mount_channels
from subagents.channels.sse import QueueOutputChannel, sse_frame
from subagents.dialogue.client_input import (
    ClientInputError,
    TurnFailedError,
    check_message_id,
    check_sender_id,
)
from subagents.dialogue.processor import Assistant
from subagents.exceptions import SubagentsError
from subagents.mcp.oauth.relay import ConsentRelay
from subagents.recording.export import ExportError, a2a_agent_names, build_fixture, dump_fixture
from subagents.server.inspector import inspector_routes, wants_trace
from subagents.server.oauth_callback import consent_relay, consent_routes
from subagents.server.rest_contract import extra_routes, token_matches, wants_stream
from subagents.server.security import (
    HEADER_TIMEOUT,
    LOOPBACK_HOSTS,
    cors_origins_from_env,
    http_protocol,
    is_loopback,
    security_middleware,
    warn_if_exposed,
)
from subagents.stores.redis_lock import RedisLockStore

log = structlog.get_logger("subagents.server.app")
MAX_BODY = 1_000_000
ERROR_ID_HEADER = "x-subagents-error-id"
BODY_TIMEOUT = 30.0
"""Seconds a request body may take to arrive."""


class BadRequestError(Exception):
    """A request the server refuses, with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


MAX_JSON_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""The start of a ``\\uD800``-``\\uDFFF`` escape: in an ASCII body, the only way a lone
surrogate gets into the parsed JSON."""


async def _json_body(request: Request, max_body: int,
                     body_timeout: float = BODY_TIMEOUT) -> dict[str, Any]:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise BadRequestError(413, f"request body is larger than {max_body} bytes")
    raw = b""
    try:
        async with asyncio.timeout(body_timeout):  # a client that stops sending mid-body
            async for chunk in request.stream():
                raw += chunk
                if len(raw) > max_body:
                    raise BadRequestError(413, f"request body is larger than {max_body} bytes")
    except TimeoutError:
        raise BadRequestError(408, f"the body did not arrive in {body_timeout:g}s") from None
    except ClientDisconnect:
        raise BadRequestError(400, "the client went away before sending the body") from None
    return _parse_json_object(raw)


def _parse_json_object(raw: bytes) -> dict[str, Any]:
    """A JSON object of plain UTF-8 text, nested at most MAX_JSON_DEPTH deep (else 400)."""
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and \
            _nesting_depth(raw) > MAX_JSON_DEPTH:
        raise BadRequestError(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError):  # bad JSON or UTF-8, an integer too long to convert
        raise BadRequestError(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequestError(400, "the body must be a JSON object")
    if not raw.isascii() or _SURROGATE_ESCAPE.search(raw):
        try:  # \ud800 escapes decode to lone surrogates, which no store or response can encode
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequestError(400, "the body contains an unpaired surrogate") from None
    return body


def _nesting_depth(raw: bytes) -> int:
    """The deepest bracket nesting outside strings (an upper bound is enough)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


async def _message_body(request: Request, max_body: int,
                        body_timeout: float = BODY_TIMEOUT) -> tuple[str, str, dict[str, Any]]:
    body = await _json_body(request, max_body, body_timeout)
    sender, message = body.get("sender"), body.get("message")
    if not isinstance(sender, str) or not sender.strip():
        raise BadRequestError(400, "'sender' must be a non-empty string")
    if not isinstance(message, str):
        raise BadRequestError(400, "'message' must be a string")
    metadata = body.get("metadata")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict):
        raise BadRequestError(400, "'metadata' must be an object")
    check_message_id(body.get("message_id"))
    request.state.message_id = body.get("message_id")
    return sender, message, metadata


def _message_id(request: Request) -> str | None:
    """The client's idempotency key: the ``Idempotency-Key`` header or the body's
    ``message_id`` (a retry with the same key is answered from the tracker)."""
    header = request.headers.get("idempotency-key")
    value = header if header is not None else getattr(request.state, "message_id", None)
    check_message_id(value)
    return value


def _log_unexpected(exc: Exception, where: str) -> str:
    error_id = uuid.uuid4().hex[:16]
    log.error("server.request.failed", where=where, error_id=error_id,
              error_type=type(exc).__name__, exc_info=exc)
    return error_id


class _Api:
    """Route handlers; one instance per app."""

    def __init__(self, assistant: Assistant, token: str | None, max_body: int,
                 body_timeout: float = BODY_TIMEOUT) -> None:
        self.assistant = assistant
        self.body_timeout = body_timeout
        self.token = token
        self.max_body = max_body
        self.inflight: set[asyncio.Task[Any]] = set()
        self.relay: ConsentRelay | None = None
        """Hands users' sign-in callbacks between workers sharing a Redis lock store."""

    def guard(self, handler: Any) -> Any:
        """Bearer-token check and clear 4xx errors around a handler."""
        async def wrapped(request: Request) -> Response:
            if not self.authorized(request):
                return _error(401, "missing or wrong bearer token")
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except BadRequestError as exc:
                return _error(exc.status, exc.message)
            except ClientInputError as exc:
                return JSONResponse({"error": str(exc), "code": exc.code},
                                    status_code=exc.status)
            except Exception as exc:  # noqa: BLE001 - details go to the log, never the client
                error_id = _log_unexpected(exc, request.url.path)
                return JSONResponse({"error": "internal error", "error_id": error_id},
                                    status_code=500, headers={ERROR_ID_HEADER: error_id})
        return wrapped

    def authorized(self, request: Request) -> bool:
        if not self.token:
            return True
        # headers arrive as latin-1 text; compare bytes so non-ASCII input is just a mismatch
        return token_matches(request, self.token)

    async def _message(self, request: Request) -> tuple[str, str, dict[str, Any]]:
        return await _message_body(request, self.max_body, self.body_timeout)

    def track(self, task: asyncio.Task[Any]) -> None:
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def _collect(self, sender: str, turn: Awaitable[Any],
                       channel: CollectingOutputChannel) -> Response:
        """Run a turn to its end (a client that hangs up does not cancel it) and answer with
        its messages; a failed turn answers with the internal-error reply alone."""
        task = asyncio.ensure_future(turn)
        self.track(task)
        try:
            await asyncio.shield(task)
        except TurnFailedError as exc:
            return JSONResponse([{"recipient_id": sender, "text": exc.reply}],
                                headers={ERROR_ID_HEADER: exc.error_id})
        return JSONResponse(channel.messages)

    async def rest(self, request: Request) -> Response:
        if wants_stream(request):
            return await self.stream(request)
        sender, message, metadata = await self._message(request)
        check_sender_id(sender)
        channel = CollectingOutputChannel()
        return await self._collect(sender, self.assistant.handle_message(
            sender, message, metadata, channel, message_id=_message_id(request)), channel)

    async def stream(self, request: Request) -> Response:
        sender, message, metadata = await self._message(request)
        check_sender_id(sender)
        message_id = _message_id(request)
        # agent step records for the inspector, opt-in per request (the token guard applies)
        channel = QueueOutputChannel(trace=wants_trace(request))

        async def run() -> None:
            try:
                await self.assistant.handle_message(sender, message, metadata, channel,
                                                    message_id=message_id)
                await channel.queue.put(sse_frame("done", {"sender": sender}))
            except ClientInputError as exc:
                await channel.queue.put(sse_frame("error", {
                    "error": str(exc), "code": exc.code, "turn_recorded": False}))
            except TurnFailedError as exc:  # the reply went out as a message frame already
                await channel.queue.put(sse_frame("error", {
                    "error": "the turn failed", "code": exc.code, "error_id": exc.error_id,
                    "turn_recorded": False}))
            except Exception as exc:  # noqa: BLE001 - details go to the log, never the client
                await channel.queue.put(sse_frame("error", {
                    "error": "internal error", "error_id": _log_unexpected(exc, "stream"),
                    "turn_recorded": False}))
            finally:
                await channel.queue.put(None)

        self.track(asyncio.ensure_future(run()))

        async def frames() -> AsyncIterator[bytes]:
            while (frame := await channel.queue.get()) is not None:
                yield frame

        return StreamingResponse(frames(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    async def tracker(self, request: Request) -> Response:
        sender = check_sender_id(request.path_params["sender"])
        return JSONResponse(await self.assistant.state(sender))

    async def recording(self, request: Request) -> Response:
        """Turn recording of one conversation on (PUT) or off (DELETE); GET tells."""
        sender = check_sender_id(request.path_params["sender"])
        if request.method == "GET":
            on = await self.assistant.recording_on(sender)
        else:  # stored with the conversation, so every worker sharing the store records it
            on = await self.assistant.switch_recording(sender, request.method == "PUT")
        return JSONResponse({"sender": sender, "recording": on})

    async def recorded_test(self, request: Request) -> Response:
        """The recorded conversation as a conversation test (YAML), for "save as test"."""
        sender = check_sender_id(request.path_params["sender"])
        events = await self.assistant.tracker(sender)
        try:
            text = dump_fixture(build_fixture(
                sender, events, a2a_agent_names(self.assistant.project)), sender)
        except ExportError as exc:
            status = 404 if exc.code == "export.no_conversation" else 409
            return JSONResponse({"error": exc.issue.message, "code": exc.code},
                                status_code=status)
        return Response(text, media_type="application/yaml")

    async def client_tool_results(self, request: Request) -> Response:
        """``{"id", "result"}`` or ``{"results": [{"id", "result"}]}`` -> the bot messages."""
        sender = check_sender_id(request.path_params["sender"])
        body = await _json_body(request, self.max_body, self.body_timeout)
        results = body.get("results", [body] if "id" in body else None)
        if not isinstance(results, list) or not results or not all(
                isinstance(r, dict) and isinstance(r.get("id"), str) and "result" in r
                for r in results):
            raise BadRequestError(400, 'send {"id": "<tool call id>", "result": ...} or '
                                       '{"results": [...]}')
        channel = CollectingOutputChannel()
        return await self._collect(sender, self.assistant.handle_client_tool_results(
            sender, results, channel), channel)

    def resume_parked_call(self, owner_key: str) -> bool:
        """Resume, in the background, the agent whose call a user's sign-in let run; False
        when the conversation's channel cannot send until the user's next message."""
        sender = owner_key.rpartition(":")[0]
        if self.assistant.reachable.get(sender) is None:
            return False

        async def resume() -> None:
            with contextlib.suppress(TurnFailedError):  # logged, and the user was told
                await self.assistant.resume_parked_call(owner_key)

        self.track(asyncio.ensure_future(resume()))
        return True

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": __version__})

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.assistant.start()
        if self.relay is not None:
            await self.relay.start()
        log.info("server.started", agents=len(self.assistant.agents))
        try:
            yield
        finally:
            if self.relay is not None:
                await self.relay.close()
            if self.inflight:
                log.info("server.draining", turns=len(self.inflight))
                await asyncio.wait(set(self.inflight), timeout=30)
            await self.assistant.close()


def create_app(assistant: Assistant, *, token: str | None = None, max_body: int = MAX_BODY,
               cors_origins: Sequence[str] = (),
               allowed_hosts: Sequence[str] | None = None,
               body_timeout: float = BODY_TIMEOUT,
               channels: Sequence[InputChannel] = (),
               replay: dict[str, Any] | None = None,
               a2a_agents: list[str] | None = None) -> Starlette:
    """The ASGI app.

    Args:
        assistant: The loaded assistant.
        token: When set, every route but ``/health`` needs ``Authorization: Bearer <token>``.
        max_body: The largest request body accepted (bytes).
        cors_origins: Browser origins allowed to call the API (``*`` for any); requests from
            other origins are refused.
        allowed_hosts: When set, the only ``Host`` header values accepted.
        body_timeout: Seconds a request body may take to arrive (else 408).
        channels: Input channels (from ``credentials.yml``) mounted beside the API.
        replay: The conversation test the inspector replays (``subagents inspect --replay``).
        a2a_agents: Publish sub agents over A2A at ``/a2a/<name>/`` (``[]``: all of them).
    """
    api = _Api(assistant, token, max_body, body_timeout)
    if isinstance(assistant.lock_store, RedisLockStore):
        api.relay = consent_relay(assistant.lock_store.client, api.resume_parked_call)
    routes = [
        Route("/webhooks/rest/webhook", api.guard(api.rest), methods=["POST"]),
        Route("/webhooks/stream/webhook", api.guard(api.stream), methods=["POST"]),
        Route("/conversations/{sender}/tracker", api.guard(api.tracker), methods=["GET"]),
        Route("/conversations/{sender}/recording", api.guard(api.recording),
              methods=["GET", "PUT", "DELETE"]),
        Route("/conversations/{sender}/test", api.guard(api.recorded_test), methods=["GET"]),
        Route("/conversations/{sender}/client_tool_results",
              api.guard(api.client_tool_results), methods=["POST"]),
        *extra_routes(api.guard),
        *inspector_routes(api.guard, replay),
        # reached by users' browsers: authenticated by the OAuth state
        *consent_routes(api.resume_parked_call, api.relay),
        Route("/health", api.health, methods=["GET"]),
        Route("/version", api.guard(api.version), methods=["GET"]),
    ]
    if a2a_agents is not None:
        from subagents.server.a2a import sub_agent_routes

        routes += sub_agent_routes(assistant, a2a_agents, guard=api.guard)
    app = Starlette(routes=routes, lifespan=api.lifespan,
                    middleware=security_middleware(
                        cors_origins, allowed_hosts, [c.url_prefix() for c in channels]))
    mount_channels(app, assistant, channels)  # the input channels of credentials.yml
    return app


def uvicorn_config(app: Starlette, *, host: str, port: int,
                   header_timeout: float = HEADER_TIMEOUT) -> Any:
    """uvicorn settings: graceful drain, idle and stalled connections closed."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning",
                          timeout_graceful_shutdown=30, timeout_keep_alive=5,
                          http=http_protocol(header_timeout))


_PYTHON_GC_THRESHOLDS = (700, 10, 10)
SERVING_GC_THRESHOLDS = (50_000, 10, 10)
"""The youngest generation is collected after 50,000 net allocations instead of 700: a turn
leaves no reference cycles behind (tests/integration/test_turn_garbage.py), so frequent
collections would only walk the state of the turns in flight, again and again."""
GC_THRESHOLDS_ENV = "SUBAGENTS_GC_THRESHOLDS"


def gc_thresholds_from_env() -> tuple[int, ...] | None:
    """``SUBAGENTS_GC_THRESHOLDS``: one to three whole numbers for ``gc.set_threshold``
    (``700,10,10`` is Python's own); None when unset.

    Raises:
        SubagentsError: the value is not one to three whole numbers
            (``server.gc_thresholds_invalid``).
    """
    raw = os.environ.get(GC_THRESHOLDS_ENV, "").strip()
    if not raw:
        return None
    try:
        values = tuple(int(part) for part in raw.split(","))
    except ValueError:
        values = ()
    if not 1 <= len(values) <= 3 or any(value < 0 for value in values):
        raise SubagentsError(
            f"{GC_THRESHOLDS_ENV}={raw!r} is not one to three whole numbers: use e.g. "
            "50000,10,10 (the default of serve) or 700,10,10 (Python's own)",
            code="server.gc_thresholds_invalid")
    return values


def settle_heap(chosen: tuple[int, ...] | None = None) -> None:
    """Take what start-up built out of the cyclic garbage collector's way.

    A started assistant holds a large heap that lives as long as the process: modules,
    pydantic schemas, the project, the MCP tool listings, the model clients' connection pools.
    Left as it is, every full collection walks all of it, which stops every turn in flight
    for tens of milliseconds. Collected once and frozen here, it is never walked again.
    Collections also become rarer (:data:`SERVING_GC_THRESHOLDS`), unless thresholds are
    ``chosen`` (``SUBAGENTS_GC_THRESHOLDS``) or the process already set its own.
    """
    gc.collect()
    gc.freeze()
    if chosen is not None:
        gc.set_threshold(*chosen)
    elif gc.get_threshold() == _PYTHON_GC_THRESHOLDS:
        gc.set_threshold(*SERVING_GC_THRESHOLDS)


def serve(assistant: Assistant, *, host: str = "127.0.0.1", port: int = 5005,
          token: str | None = None, cors_origins: Sequence[str] | None = None,
          channels: Sequence[InputChannel] = (), a2a_agents: list[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; in-flight turns finish first (up to 30 s).

    On a loopback address only loopback ``Host`` names are accepted; CORS origins default to
    ``SUBAGENTS_CORS_ORIGINS``. A public address without a token gets a loud warning.
    """
    import uvicorn

    thresholds = gc_thresholds_from_env()  # a wrong value stops serve before anything starts
    failed: list[SubagentsError] = []

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            # connect the agents before uvicorn's lifespan does (its start is then a no-op), so
            # that a project that cannot start ends with its one-screen error, not a traceback
            try:
                await assistant.start()
            except SubagentsError as exc:
                failed.append(exc)
                self.should_exit = True
                return
            settle_heap(thresholds)
            await super().startup(sockets)
            if self.started:  # listening now: tell whoever started us
                print(f"subagents: serving on http://{host}:{port}", file=sys.stderr,
                      flush=True)

    warn_if_exposed(host, token)
    hosts = list(LOOPBACK_HOSTS) if is_loopback(host) else None
    origins = cors_origins_from_env() if cors_origins is None else list(cors_origins)
    app = create_app(assistant, token=token, cors_origins=origins, allowed_hosts=hosts,
                     channels=channels, a2a_agents=a2a_agents)
    config = uvicorn_config(app, host=host, port=port)
    # uvicorn re-raises the signal that stopped it once it has drained; these handlers take it
    # so that a graceful stop ends with exit status 0
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    _Server(config).run()
    if failed:
        raise failed[0]
