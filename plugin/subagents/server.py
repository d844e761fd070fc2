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
* ``GET /health``, ``GET /version``.

With a token (``--token`` or ``SUBAGENTS_TOKEN``) every route but ``/health`` needs
``Authorization: Bearer <token>`` or ``?token=<token>``. One sender's messages are serialised
by the assistant.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import __version__
from .channels.base import CollectingOutputChannel
from .channels.input import InputChannel
from .channels.registry import mount_channels
from .channels.sse import QueueOutputChannel, sse_frame
from .dialogue.processor import Assistant
from .rest_contract import extra_routes, token_matches, wants_stream

log = structlog.get_logger("subagents.server")
MAX_BODY = 1_000_000


class BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _json_body(request: Request, max_body: int) -> dict[str, Any]:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise BadRequestError(413, f"request body is larger than {max_body} bytes")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > max_body:
            raise BadRequestError(413, f"request body is larger than {max_body} bytes")
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequestError(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequestError(400, "the body must be a JSON object")
    return body


async def _message_body(request: Request, max_body: int) -> tuple[str, str, dict[str, Any]]:
    body = await _json_body(request, max_body)
    sender, message = body.get("sender"), body.get("message")
    if not isinstance(sender, str) or not sender.strip():
        raise BadRequestError(400, "'sender' must be a non-empty string")
    if not isinstance(message, str):
        raise BadRequestError(400, "'message' must be a string")
    metadata = body.get("metadata")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict):
        raise BadRequestError(400, "'metadata' must be an object")
    return sender, message, metadata


class _Api:
    """Route handlers; one instance per app."""

    def __init__(self, assistant: Assistant, token: str | None, max_body: int) -> None:
        self.assistant = assistant
        self.token = token
        self.max_body = max_body
        self.inflight: set[asyncio.Task[Any]] = set()

    def guard(self, handler: Any) -> Any:
        """Bearer-token check and clear 4xx errors around a handler."""
        async def wrapped(request: Request) -> Response:
            if self.token and not token_matches(request, self.token):
                return _error(401, "missing or wrong bearer token")
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except BadRequestError as exc:
                return _error(exc.status, exc.message)
        return wrapped

    def track(self, task: asyncio.Task[Any]) -> None:
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def rest(self, request: Request) -> Response:
        if wants_stream(request):
            return await self.stream(request)
        sender, message, metadata = await _message_body(request, self.max_body)
        channel = CollectingOutputChannel()
        task = asyncio.ensure_future(self.assistant.handle_message(sender, message, metadata,
                                                                   channel))
        self.track(task)
        await asyncio.shield(task)
        return JSONResponse(channel.messages)

    async def stream(self, request: Request) -> Response:
        sender, message, metadata = await _message_body(request, self.max_body)
        channel = QueueOutputChannel()

        async def run() -> None:
            try:
                await self.assistant.handle_message(sender, message, metadata, channel)
                await channel.queue.put(sse_frame("done", {"sender": sender}))
            except Exception as exc:
                log.exception("server.turn.failed", sender=sender)
                await channel.queue.put(sse_frame("error", {"message": str(exc)}))
            finally:
                await channel.queue.put(None)

        self.track(asyncio.ensure_future(run()))

        async def frames() -> AsyncIterator[bytes]:
            while (frame := await channel.queue.get()) is not None:
                yield frame

        return StreamingResponse(frames(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    async def tracker(self, request: Request) -> Response:
        return JSONResponse(await self.assistant.state(request.path_params["sender"]))

    async def client_tool_results(self, request: Request) -> Response:
        """``{"id", "result"}`` or ``{"results": [{"id", "result"}]}`` -> the bot messages."""
        body = await _json_body(request, self.max_body)
        results = body.get("results", [body] if "id" in body else None)
        if not isinstance(results, list) or not results or not all(
                isinstance(r, dict) and isinstance(r.get("id"), str) and "result" in r
                for r in results):
            raise BadRequestError(400, 'send {"id": "<tool call id>", "result": ...} or '
                                       '{"results": [...]}')
        channel = CollectingOutputChannel()
        task = asyncio.ensure_future(self.assistant.handle_client_tool_results(
            request.path_params["sender"], results, channel))
        self.track(task)
        await asyncio.shield(task)
        return JSONResponse(channel.messages)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": __version__})

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.assistant.start()
        log.info("server.started", agents=len(self.assistant.agents))
        try:
            yield
        finally:
            if self.inflight:
                log.info("server.draining", turns=len(self.inflight))
                await asyncio.wait(set(self.inflight), timeout=30)
            await self.assistant.close()


def create_app(assistant: Assistant, *, token: str | None = None,
               max_body: int = MAX_BODY, channels: Sequence[InputChannel] = (),
               a2a_agents: list[str] | None = None) -> Starlette:
    """``a2a_agents``: publish sub agents over A2A at ``/a2a/<name>/`` (``[]``: all of them)."""
    api = _Api(assistant, token, max_body)
    routes = [
        Route("/webhooks/rest/webhook", api.guard(api.rest), methods=["POST"]),
        Route("/webhooks/stream/webhook", api.guard(api.stream), methods=["POST"]),
        Route("/conversations/{sender}/tracker", api.guard(api.tracker), methods=["GET"]),
        Route("/conversations/{sender}/client_tool_results",
              api.guard(api.client_tool_results), methods=["POST"]),
        *extra_routes(api.guard),
        Route("/health", api.health, methods=["GET"]),
        Route("/version", api.guard(api.version), methods=["GET"]),
    ]
    if a2a_agents is not None:
        from .a2a.server import sub_agent_routes

        routes += sub_agent_routes(assistant, a2a_agents, guard=api.guard)
    app = Starlette(routes=routes, lifespan=api.lifespan)
    mount_channels(app, assistant, channels)  # the input channels of credentials.yml
    return app


def serve(assistant: Assistant, *, host: str = "127.0.0.1", port: int = 5005,
          token: str | None = None, channels: Sequence[InputChannel] = (),
          a2a_agents: list[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; in-flight turns finish first (up to 30 s)."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # listening now: tell whoever started us
                print(f"subagents: serving on http://{host}:{port}", file=sys.stderr,
                      flush=True)

    app = create_app(assistant, token=token, channels=channels, a2a_agents=a2a_agents)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=30)
    # uvicorn re-raises the signal that stopped it once it has drained; these handlers take it
    # so that a graceful stop ends with exit status 0
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    _Server(config).run()
