"""Serve an ``MCPServer`` over real streamable HTTP or SSE on 127.0.0.1 (a random port)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from starlette.types import ASGIApp, Receive, Scope, Send


class _RequireHeader:
    """ASGI middleware: 401 unless the request carries ``header: value``."""

    def __init__(self, app: ASGIApp, header: str, value: str) -> None:
        self.app, self.header, self.value = app, header.lower().encode(), value.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(self.header) != self.value:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def serve_mcp(server: Any, transport: Literal["http", "sse"] = "http", *,
                    require_header: tuple[str, str] | None = None,
                    port: int = 0) -> AsyncIterator[str]:
    """Yield the server's URL (``.../mcp`` or ``.../sse``) while uvicorn serves it (on
    ``port``, a random one by default)."""
    app: ASGIApp = server.streamable_http_app() if transport == "http" else server.sse_app()
    if require_header is not None:
        app = _RequireHeader(app, *require_header)
    async with serve_app(app, port=port) as base:
        yield f"{base}/{'mcp' if transport == 'http' else 'sse'}"


@contextlib.asynccontextmanager
async def serve_app(app: ASGIApp, *, port: int = 0) -> AsyncIterator[str]:
    """Serve any ASGI app with uvicorn on 127.0.0.1 (on ``port``, a random one by default);
    yield its base URL."""
    import uvicorn

    class _Server(uvicorn.Server):
        # A server inside another program leaves the process's signals alone: uvicorn would
        # otherwise install its own SIGINT/SIGTERM handlers and, when servers do not stop in
        # the order they started, leave one of a stopped server behind (which SSE responses
        # of later servers in the process then take for a shutdown).
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
    uv = _Server(config)
    task = asyncio.create_task(uv.serve())
    try:
        async with asyncio.timeout(10):
            while not uv.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        port = uv.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        try:
            async with asyncio.timeout(5):
                await task
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
