"""A lean HTTP/1.1 client for plain (non-streamed) model calls.

One :class:`KeepAlivePool` per model endpoint posts JSON bodies over keep-alive connections
that are plain asyncio protocols; responses are parsed by httptools (llhttp, the C parser
uvicorn uses). A model call needs nothing else of a general HTTP client - no cookies,
redirects, proxies, multipart or streaming - and skipping that machinery halves the client's
CPU per call against aiohttp's ``ClientSession``. The model client falls back to aiohttp when
httptools is missing, when a proxy applies to the endpoint, or when
``SUBAGENTS_MODEL_HTTP_CLIENT=aiohttp`` is set.

Behaviour: HTTP/1.1 with ``Content-Length`` bodies; replies framed by ``Content-Length``,
chunked transfer coding or the server closing the connection; gzip and deflate content
codings decoded; 1xx interim replies skipped; TLS through the event loop's SSL support
(certificate and hostname verified by the given context). Timeouts work as aiohttp's
``ClientTimeout(connect=t, sock_read=t)``: the connection must open within ``t`` and the reply
must not stall for ``t`` between two reads. A connection is reused only after a complete
reply that allows keep-alive and only while it has been idle less than ``idle_timeout``; a
connection whose call failed or was cancelled is closed.
"""

from __future__ import annotations

import asyncio
import functools
import ssl as _ssl
import urllib.parse
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from . import __version__

try:
    import httptools
except ImportError:  # then the model client posts through aiohttp
    httptools = None  # type: ignore[assignment]

__all__ = ["HTTPConnectionError", "HTTPResponse", "HTTPTimeoutError", "KeepAlivePool",
           "available"]

_USER_AGENT = f"subagents/{__version__}"


class HTTPTimeoutError(Exception):
    """The connection did not open, or the reply stalled, for longer than the timeout."""


class HTTPConnectionError(Exception):
    """The connection failed: refused, reset, closed before the reply ended, TLS, bad HTTP."""


@dataclass(slots=True)
class HTTPResponse:
    """A complete reply: status, headers (lower-case names) and the decoded body."""

    status: int
    headers: dict[str, str]
    body: bytes


def available() -> bool:
    """Whether httptools (the response parser) can be imported."""
    return httptools is not None


class _Connection(asyncio.Protocol):
    """One keep-alive connection; serves one request at a time."""

    __slots__ = ("_body", "_chunked", "_headers", "_length", "_loop", "_parser", "_status",
                 "_timeout", "_timer", "_waiter", "closed", "idle_since", "keep", "last_read",
                 "pool", "transport", "used")

    def __init__(self, pool: KeepAlivePool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self._loop = loop
        assert httptools is not None
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[HTTPResponse] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._length = False
        """The reply in progress has a Content-Length."""
        self._chunked = False
        self._timer: asyncio.TimerHandle | None = None
        self._timeout = 0.0
        self.closed = False
        self.keep = False
        self.used = False
        """A request was written on this connection (so the server saw its bytes)."""
        self.idle_since = 0.0
        self.last_read = 0.0

    # ------------------------------------------------------------------ asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, only alike
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            # bytes nobody asked for (on an idle connection): the framing is lost
            self.abort()
            return
        self.last_read = self._loop.time()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            # bad HTTP, an upgrade, or a callback's error (a reply nobody asked for)
            self._fail(HTTPConnectionError(f"the server sent malformed HTTP: {exc}"))
            self.abort()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost finishes or fails the reply

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self.pool._forget(self)
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._status >= 200 and not self._length and not self._chunked:
            # a reply whose body ends when the server closes the connection
            self._finish()
            return
        reason = f" ({exc})" if exc else ""
        if self._status:
            self._fail(HTTPConnectionError(
                f"the server closed the connection before the reply ended{reason}"))
        else:
            self._fail(HTTPConnectionError(
                f"the server closed the connection without replying{reason}"))

    # ------------------------------------------------------------------ httptools callbacks
    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second reply after the one asked for: framing is lost
            raise HTTPConnectionError("the server sent a reply nobody asked for")

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        self._headers[key] = text if previous is None else f"{previous}, {text}"
        if key == "content-length":
            self._length = True
        elif key == "transfer-encoding" and "chunked" in text.lower():
            self._chunked = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if 100 <= self._status < 200:  # an interim reply (100 Continue): the real one follows
            self._reset()
            return
        self.keep = self._parser.should_keep_alive()
        self._finish()

    # ------------------------------------------------------------------ requests
    def send(self, data: bytes, timeout: float) -> asyncio.Future[HTTPResponse]:
        """Write one request; the future gets its reply (or the error)."""
        assert self.transport is not None
        self._reset()
        waiter = self._loop.create_future()
        self._waiter = waiter
        self.keep = False
        self.used = True
        self._timeout = timeout
        self.last_read = self._loop.time()
        self._timer = self._loop.call_at(self.last_read + timeout, self._check_stall)
        self.transport.write(data)
        return waiter

    def _reset(self) -> None:
        self._status = 0
        self._headers = {}
        self._body = []
        self._length = False
        self._chunked = False

    def _check_stall(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        due = self.last_read + self._timeout
        if self._loop.time() >= due:
            self._fail(HTTPTimeoutError(f"no reply within {self._timeout:g}s"))
            self.abort()
        else:
            self._timer = self._loop.call_at(due, self._check_stall)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _finish(self) -> None:
        self._cancel_timer()
        waiter = self._waiter
        self._waiter = None
        if not (self._length or self._chunked or self._status in (204, 304)):
            self.keep = False  # a body framed by the close cannot share the connection
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        headers = self._headers
        response = HTTPResponse(self._status, headers, body)
        self._reset()
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _fail(self, error: Exception) -> None:
        self._cancel_timer()
        waiter = self._waiter
        self._waiter = None
        self.keep = False
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def abort(self) -> None:
        """Close the connection at once (nothing pending is sent)."""
        self.keep = False
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def close(self) -> None:
        """Close the connection once what is written has gone out."""
        if self.transport is not None and not self.closed:
            self.transport.close()


class KeepAlivePool:
    """Keep-alive connections to one URL; :meth:`post` sends a body and returns the reply.

    Args:
        url: ``http://`` or ``https://`` URL; its path and query are the request target.
        headers: Sent with every request (``Authorization``, ``Content-Type``, ...).
        ssl_context: For ``https``; the system's default context when None.
        limit: Requests in flight at once; more wait for one to end.
        idle_timeout: Seconds an idle connection stays reusable.
    """

    def __init__(self, url: str, headers: Mapping[str, str], *,
                 ssl_context: _ssl.SSLContext | None = None, limit: int = 1000,
                 idle_timeout: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.ssl_context = ssl_context
        self.idle_timeout = idle_timeout
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rsplit("@", 1)[-1]  # never send credentials of the URL
        given = {name.lower() for name in headers}
        lines = [f"POST {target} HTTP/1.1", f"Host: {authority}"]
        if "user-agent" not in given:
            lines.append(f"User-Agent: {_USER_AGENT}")
        if "accept-encoding" not in given:
            lines.append("Accept-Encoding: gzip, deflate")
        for name, value in headers.items():
            if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
                continue
            if "\r" in name or "\n" in name or "\r" in str(value) or "\n" in str(value):
                raise ValueError(f"the header {name!r} has a line break")
            lines.append(f"{name}: {value}")
        lines.append("Content-Length: ")
        self._head = "\r\n".join(lines).encode("latin-1")
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._limit = limit
        self._busy = 0
        """Requests in flight (each holds one of ``limit`` slots)."""
        self._queue: deque[asyncio.Future[None]] = deque()
        """Requests waiting for a slot, in arrival order."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections open now, idle or in use."""
        return len(self._open)

    def usable(self) -> bool:
        """False once the pool belongs to another (or a closed) event loop."""
        if self._loop is None:
            return True
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    async def post(self, body: bytes, timeout: float) -> HTTPResponse:
        """POST ``body``; any status is returned. Raises HTTPTimeoutError or
        HTTPConnectionError."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        data = b"%b%d\r\n\r\n%b" % (self._head, len(body), body)
        if self._busy < self._limit and not self._queue:
            self._busy += 1
        else:
            await self._wait_for_slot(loop)
        try:
            connection = self._idle_connection(loop)
            if connection is None:
                connection = await self._connect(loop, timeout)
            waiter = connection.send(data, timeout)
            try:
                response = await waiter
            except BaseException:
                connection.abort()
                raise
            if connection.keep and not connection.closed and not self._closed:
                connection.idle_since = loop.time()
                self._idle.append(connection)
            else:
                connection.close()
            if response.headers.get("content-encoding"):
                response.body = _decode(response.headers["content-encoding"], response.body)
            return response
        finally:
            self._release_slot()

    async def _wait_for_slot(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until a request that ends hands its slot over."""
        waiter = loop.create_future()
        self._queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # handed over just as this request was cancelled
            raise

    def _release_slot(self) -> None:
        queue = self._queue
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to the next waiting request
                return
        self._busy -= 1

    def _idle_connection(self, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        idle = self._idle
        while idle:
            connection = idle.pop()
            if connection.closed or connection.transport is None \
                    or connection.transport.is_closing():
                continue
            if loop.time() - connection.idle_since >= self.idle_timeout:
                connection.abort()
                continue
            return connection
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop, timeout: float) -> _Connection:
        ssl: _ssl.SSLContext | None = None
        if self.tls:
            ssl = self.ssl_context or _default_tls()
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(self, loop), self.host, self.port, ssl=ssl,
                    server_hostname=self.host if ssl is not None else None)
        except TimeoutError as exc:
            raise HTTPTimeoutError(
                f"the connection to {self.host}:{self.port} did not open within "
                f"{timeout:g}s") from exc
        except (OSError, _ssl.SSLError) as exc:
            raise HTTPConnectionError(
                f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        assert isinstance(protocol, _Connection)
        self._open.add(protocol)
        return protocol

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        if connection in self._idle:  # closed by the server while idle (rare: no scan per call)
            self._idle.remove(connection)

    async def close(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _decode(coding: str, body: bytes) -> bytes:
    """The body without its content coding (gzip, deflate, identity)."""
    coding = coding.strip().lower()
    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, as some send
    except zlib.error as exc:
        raise HTTPConnectionError(f"the reply's {coding} body does not decode: {exc}") from exc
    if coding in ("identity", ""):
        return body
    raise HTTPConnectionError(f"the reply uses the content coding {coding!r}, which this "
                              "client did not ask for")


@functools.cache
def _default_tls() -> _ssl.SSLContext:
    return _ssl.create_default_context()
