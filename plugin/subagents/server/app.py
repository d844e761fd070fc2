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
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from subagents import __version__
from subagents.channels.bodies import BODY_TIMEOUT, MAX_BODY, BadRequestError, json_body
from subagents.channels.collecting import CollectingOutputChannel
from subagents.channels.input import InputChannel, TurnLimiter, busy_response
from subagents.channels.registry import channel_middleware, channel_routes
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
from subagents.types import dump_json

log = structlog.get_logger("subagents.server.app")
ERROR_ID_HEADER = "x-subagents-error-id"


class JsonResponse(JSONResponse):
    """starlette's JSON response (compact UTF-8), encoded by orjson."""

    def render(self, content: Any) -> bytes:
        """The body: ``content`` as JSON."""
        return dump_json(content)


def _error(status: int, message: str, code: str) -> JsonResponse:
    return JsonResponse({"error": message, "code": code}, status_code=status)


async def _route_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and methods answer like every other error: JSON with a code."""
    status = getattr(exc, "status_code", 404)
    code = "http.method_not_allowed" if status == 405 else "http.not_found"
    text = "this route does not take that method" if status == 405 else "no such route"
    return JsonResponse({"error": text, "code": code}, status_code=status,
                        headers=getattr(exc, "headers", None))


async def _message_body(request: Request, max_body: int,
                        body_timeout: float = BODY_TIMEOUT) -> tuple[str, str, dict[str, Any]]:
    body = await json_body(request, max_body, body_timeout)
    sender, message = body.get("sender"), body.get("message")
    if not isinstance(sender, str) or not sender.strip():
        raise BadRequestError(400, "'sender' must be a non-empty string",
                              "client.sender_id.invalid")
    if not isinstance(message, str):
        raise BadRequestError(400, "'message' must be a string", "client.message.invalid")
    metadata = body.get("metadata")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict):
        raise BadRequestError(400, "'metadata' must be an object", "client.metadata.invalid")
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
                 body_timeout: float = BODY_TIMEOUT,
                 limiter: TurnLimiter | None = None) -> None:
        self.assistant = assistant
        self.limiter = limiter or TurnLimiter(None)
        """The worker's turns in flight: beyond its cap a new turn is answered 503."""
        self.body_timeout = body_timeout
        self.token = token
        self.max_body = max_body
        self.inflight: set[asyncio.Task[Any]] = set()
        self.relay: ConsentRelay | None = None
        """Hands users' sign-in callbacks between workers sharing a Redis lock store."""

    def guard(self, handler: Any, *, check_token: bool = True) -> Any:
        """Bearer-token check (unless the handler checks its callers itself) and clear 4xx
        errors around a handler."""
        async def wrapped(request: Request) -> Response:
            if check_token and not self.authorized(request):
                return _error(401, "missing or wrong bearer token", "http.unauthorized")
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except BadRequestError as exc:
                return _error(exc.status, exc.message, exc.code)
            except ClientInputError as exc:
                return JsonResponse({"error": str(exc), "code": exc.code},
                                    status_code=exc.status)
            except Exception as exc:  # noqa: BLE001 - details go to the log, never the client
                error_id = _log_unexpected(exc, request.url.path)
                return JsonResponse({"error": "internal error", "error_id": error_id},
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

    def busy(self) -> bool:
        """Whether a new turn would be one too many for this worker (checked right before the
        turn's task is created, with no wait in between)."""
        if self.limiter.full:
            log.warning("server.busy", turns=self.limiter.running)
            return True
        return False

    async def _collect(self, sender: str, turn: Awaitable[Any],
                       channel: CollectingOutputChannel) -> Response:
        """Run a turn to its end (a client that hangs up does not cancel it) and answer with
        its messages; a failed turn answers with the internal-error reply alone."""
        task = asyncio.ensure_future(turn)
        self.track(task)
        self.limiter.hold(task)
        try:
            await asyncio.shield(task)
        except TurnFailedError as exc:
            return JsonResponse([{"recipient_id": sender, "text": exc.reply}],
                                headers={ERROR_ID_HEADER: exc.error_id})
        return JsonResponse(channel.messages)

    async def rest(self, request: Request) -> Response:
        if wants_stream(request):
            return await self.stream(request)
        sender, message, metadata = await self._message(request)
        check_sender_id(sender)
        message_id = _message_id(request)
        if self.busy():
            return busy_response()
        channel = CollectingOutputChannel()
        return await self._collect(sender, self.assistant.handle_message(
            sender, message, metadata, channel, message_id=message_id), channel)

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

        if self.busy():
            return busy_response()
        task = asyncio.ensure_future(run())
        self.track(task)
        self.limiter.hold(task)

        async def frames() -> AsyncIterator[bytes]:
            while (frame := await channel.queue.get()) is not None:
                yield frame

        return StreamingResponse(frames(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    async def tracker(self, request: Request) -> Response:
        sender = check_sender_id(request.path_params["sender"])
        return JsonResponse(await self.assistant.state(sender))

    async def recording(self, request: Request) -> Response:
        """Turn recording of one conversation on (PUT) or off (DELETE); GET tells."""
        sender = check_sender_id(request.path_params["sender"])
        if request.method == "GET":
            on = await self.assistant.recording_on(sender)
        else:  # stored with the conversation, so every worker sharing the store records it
            on = await self.assistant.switch_recording(sender, request.method == "PUT")
        return JsonResponse({"sender": sender, "recording": on})

    async def recorded_test(self, request: Request) -> Response:
        """The recorded conversation as a conversation test (YAML), for "save as test"."""
        sender = check_sender_id(request.path_params["sender"])
        events = await self.assistant.tracker(sender)
        try:
            text = dump_fixture(build_fixture(
                sender, events, a2a_agent_names(self.assistant.project)), sender)
        except ExportError as exc:
            status = 404 if exc.code == "export.no_conversation" else 409
            return JsonResponse({"error": exc.issue.message, "code": exc.code},
                                status_code=status)
        return Response(text, media_type="application/yaml")

    async def client_tool_results(self, request: Request) -> Response:
        """``{"id", "result"}`` or ``{"results": [{"id", "result"}]}`` -> the bot messages."""
        sender = check_sender_id(request.path_params["sender"])
        body = await json_body(request, self.max_body, self.body_timeout)
        results = body.get("results", [body] if "id" in body else None)
        if not isinstance(results, list) or not results or not all(
                isinstance(r, dict) and isinstance(r.get("id"), str) and "result" in r
                for r in results):
            raise BadRequestError(400, 'send {"id": "<tool call id>", "result": ...} or '
                                       '{"results": [...]}', "client.tool_results.invalid")
        if self.busy():
            return busy_response()
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
        unavailable = self.assistant.dependencies.report()
        if unavailable is None:
            return JsonResponse({"status": "ok"})
        # still 200: the assistant serves every flow that does not need what is down
        return JsonResponse({"status": "degraded", "unavailable": unavailable})

    async def version(self, request: Request) -> Response:
        return JsonResponse({"version": __version__})

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
               a2a_agents: list[str] | None = None,
               max_turns_in_flight: int | None = None) -> Starlette:
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
        max_turns_in_flight: Turns this worker runs at once before it answers a new one 503
            (``0``: no cap); by default ``SUBAGENTS_MAX_TURNS_IN_FLIGHT``, else 100.
    """
    limiter = TurnLimiter.from_env() if max_turns_in_flight is None else \
        TurnLimiter(max_turns_in_flight or None)
    api = _Api(assistant, token, max_body, body_timeout, limiter)
    if isinstance(assistant.lock_store, RedisLockStore):
        api.relay = consent_relay(assistant.lock_store.client, assistant.pool.consents,
                                  api.resume_parked_call)
    routes: list[BaseRoute] = [
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
        *consent_routes(assistant.pool.consents, api.resume_parked_call, api.relay),
        Route("/health", api.health, methods=["GET"]),
        Route("/version", api.guard(api.version), methods=["GET"]),
    ]
    if a2a_agents is not None:
        from subagents.server.a2a import A2ASettings, sub_agent_routes

        settings = A2ASettings.from_env(token=token, deadline=assistant.turn_timeout,
                                        max_body=max_body, body_timeout=body_timeout)
        routes += sub_agent_routes(assistant, a2a_agents, settings=settings, limiter=limiter,
                                   guard=lambda handler: api.guard(handler, check_token=False))
    routes += channel_routes(assistant, channels)  # the input channels of credentials.yml
    return Starlette(routes=routes, lifespan=api.lifespan,
                     exception_handlers={404: _route_error, 405: _route_error},
                     middleware=security_middleware(
                         cors_origins, allowed_hosts, [c.url_prefix() for c in channels],
                         channels=channel_middleware(assistant, channels, cors_origins,
                                                     limiter)))


def uvicorn_config(app: Starlette, *, host: str, port: int,
                   header_timeout: float = HEADER_TIMEOUT) -> Any:
    """uvicorn settings: graceful drain, idle and stalled connections closed."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning",
                          timeout_graceful_shutdown=30, timeout_keep_alive=5,
                          http=http_protocol(header_timeout))


_PYTHON_GC_THRESHOLDS = frozenset({(700, 10, 10), (2000, 10, 10)})
"""Python's own thresholds (3.11 and 3.12: 700; 3.13 and later: 2000): any other value was
set by the process, which keeps it."""
SERVING_GC_THRESHOLDS = (50_000, 10, 10)
"""The youngest generation is collected after 50,000 net allocations instead of 700: a turn
leaves no reference cycles behind (tests/integration/server/test_turn_garbage.py), so frequent
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
    elif gc.get_threshold() in _PYTHON_GC_THRESHOLDS:
        gc.set_threshold(*SERVING_GC_THRESHOLDS)


def serve(assistant: Assistant, *, host: str = "127.0.0.1", port: int = 5005,
          token: str | None = None, cors_origins: Sequence[str] | None = None,
          channels: Sequence[InputChannel] = (), a2a_agents: list[str] | None = None,
          strict_start: bool = False) -> None:
    """Serve until SIGTERM, when in-flight turns finish first (up to 30 s), or Ctrl-C (SIGINT),
    which stops at once, start-up included, and raises KeyboardInterrupt. A SIGINT handler
    installed before (the CLI's) is called too.

    On a loopback address only loopback ``Host`` names are accepted; CORS origins default to
    ``SUBAGENTS_CORS_ORIGINS``. A public address without a token gets a loud warning. A
    remote A2A agent or MCP server that does not answer does not stop the start (the server
    reports it on ``/health`` and connects it again in the background) unless
    ``strict_start``.
    """
    import uvicorn

    thresholds = gc_thresholds_from_env()  # a wrong value stops serve before anything starts
    failed: list[SubagentsError] = []
    outer_sigint = signal.getsignal(signal.SIGINT)
    stopped = asyncio.Event()

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if sig == signal.SIGINT:  # Ctrl-C: a short drain, and start-up is abandoned
                self.config.timeout_graceful_shutdown = 1
                stopped.set()
                if callable(outer_sigint) and outer_sigint is not signal.default_int_handler:
                    outer_sigint(sig, frame)

        async def startup(self, sockets: Any = None) -> None:
            # connect the agents before uvicorn's lifespan does (its start is then a no-op), so
            # that a project that cannot start ends with its one-screen error, not a traceback
            starting = asyncio.ensure_future(assistant.start(strict=strict_start))
            halt = asyncio.ensure_future(stopped.wait())
            await asyncio.wait([starting, halt], return_when=asyncio.FIRST_COMPLETED)
            halt.cancel()
            if not starting.done():
                starting.cancel()  # Ctrl-C while connecting
                self.should_exit = True
                return
            try:
                starting.result()
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
    if stopped.is_set():
        raise KeyboardInterrupt
