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
must not stall for ``t`` between two reads, and a request waits at most ``t`` for a free
connection. A connection is reused only after a complete reply that allows keep-alive and
only while it has been idle less than ``idle_timeout`` (a timer closes those idle longer); a
connection whose call failed or was cancelled is closed. A request on a kept connection that
the server closes without a byte of reply - its idle timeout running out as the request went
out - is sent once more, at once, on a new connection.
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
from typing import Any, cast

from subagents import __version__

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


_FIRST_VALUE_ONLY = frozenset({"retry-after", "retry-after-ms", "x-should-retry",
                               "content-type", "content-encoding"})
"""Headers read as one value: a server that repeats one is taken at its first word."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; serves one request at a time."""

    __slots__ = ("_body", "_chunked", "_headers", "_length", "_loop", "_parser", "_status",
                 "_timeout", "_timer", "_waiter", "closed", "got_data", "idle_since", "keep",
                 "last_read", "lost", "pool", "transport")

    def __init__(self, pool: KeepAlivePool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self._loop = loop
        assert httptools is not None
        self._parser: Any = httptools.HttpResponseParser(self)
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
        self.lost: asyncio.Future[None] = loop.create_future()
        """Done once the connection is closed (``connection_lost``)."""
        self.keep = False
        self.got_data = False
        """A byte of the reply to the current request arrived."""
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
        self.got_data = True
        self.last_read = self._loop.time()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            # bad HTTP, an upgrade, or a callback's error (a reply nobody asked for)
            self._fail(HTTPConnectionError(f"the server sent malformed HTTP: {exc!r}"))
            self.abort()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost finishes or fails the reply

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self.pool._forget(self)
        if not self.lost.done():
            self.lost.set_result(None)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if exc is None and self._status >= 200 and not self._length and not self._chunked:
                # a reply whose body ends when the server closes the connection
                self._finish()
            else:
                reason = f" ({exc})" if exc else ""
                self._fail(HTTPConnectionError(
                    "the server closed the connection "
                    f"{'before the reply ended' if self._status else 'without replying'}"
                    f"{reason}"))
        self._parser = None  # the parser points back here: no cycle left for the collector

    # ------------------------------------------------------------------ httptools callbacks
    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second reply after the one asked for: framing is lost
            raise HTTPConnectionError("the server sent a reply nobody asked for")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._status:
            return  # a chunked body's trailer: not the reply's headers
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        if previous is None:
            self._headers[key] = text
        elif key not in _FIRST_VALUE_ONLY:
            self._headers[key] = f"{previous}, {text}"
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
        self.got_data = False
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
        response = HTTPResponse(self._status, self._headers, body)
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
        """Close the connection once what is written has gone out (at once when a request
        is still being written: the server may have stopped reading)."""
        if self.transport is not None and not self.closed:
            if self.transport.get_write_buffer_size():
                self.transport.abort()
            else:
                self.transport.close()


class KeepAlivePool:
    """Keep-alive connections to one URL; :meth:`post` sends a body and returns the reply.

    Args:
        url: ``http://`` or ``https://`` URL; its path and query are the request target.
        headers: Sent with every request (``Authorization``, ``Content-Type``, ...).
        ssl_context: For ``https``; the system's default context when None.
        limit: Requests in flight at once; more wait for one to end (up to the timeout).
        idle_timeout: Seconds an idle connection stays open for reuse.

    Raises:
        ValueError: the URL is not http(s), or a header has a line break or a NUL.
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
        target = urllib.parse.quote(parts.path or "/", safe=_PATH_SAFE)
        if parts.query:
            target += "?" + urllib.parse.quote(parts.query, safe=_QUERY_SAFE)
        authority = parts.netloc.rsplit("@", 1)[-1]  # never send credentials of the URL
        given = {name.lower() for name in headers}
        lines = [f"POST {target} HTTP/1.1", f"Host: {authority}"]
        if "user-agent" not in given:
            lines.append(f"User-Agent: {_USER_AGENT}")
        if "accept-encoding" not in given:
            lines.append("Accept-Encoding: gzip, deflate")
        for name, value in headers.items():
            text = str(value)
            if any(c in name or c in text for c in "\r\n\0") or not name.strip():
                raise ValueError(f"the header {name!r} is empty or has a line break or a NUL")
            if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
                continue
            lines.append(f"{name}: {text}")
        lines.append("Content-Length: ")
        # header values as UTF-8, as aiohttp sends them
        self._head = "\r\n".join(lines).encode("utf-8")
        self._idle: deque[_Connection] = deque()
        """Idle connections, the longest idle first."""
        self._open: set[_Connection] = set()
        self._limit = limit
        self._slots = asyncio.Semaphore(limit)
        """One per request in flight."""
        self._sweep: asyncio.TimerHandle | None = None
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
        slots = self._slots
        if slots.locked():  # all busy: wait, as long as a connection may take to open
            try:
                async with asyncio.timeout(timeout):
                    await slots.acquire()
            except TimeoutError as exc:
                raise HTTPTimeoutError(
                    f"all {self._limit} connections to {self.host}:{self.port} stayed busy "
                    f"for {timeout:g}s") from exc
        else:
            await slots.acquire()  # at once
        try:
            connection, response = await self._exchange(loop, data, timeout)
        finally:
            slots.release()
        if connection.keep and not connection.closed and not self._closed:
            connection.idle_since = loop.time()
            self._idle.append(connection)
            if self._sweep is None:
                self._sweep = loop.call_at(connection.idle_since + self.idle_timeout,
                                           self._close_expired)
        else:
            connection.close()
        coding = response.headers.get("content-encoding")
        if coding and response.body:
            try:
                response.body = _decode(coding, response.body)
            except HTTPConnectionError:
                if response.status < 400:
                    raise  # an error reply keeps its status, whatever its body
        return response

    async def _exchange(self, loop: asyncio.AbstractEventLoop, data: bytes, timeout: float
                        ) -> tuple[_Connection, HTTPResponse]:
        """Send the request on a kept or a new connection; the connection and the reply."""
        connection = self._idle_connection(loop)
        if connection is not None:
            try:
                return connection, await connection.send(data, timeout)
            except HTTPConnectionError:
                connection.abort()
                if connection.got_data:
                    raise
                # a kept connection closed without a byte of reply: almost always the server's
                # idle timeout running out as the request went out, so it goes out once more,
                # at once, on a new connection (a retry by the caller would wait first)
            except BaseException:
                connection.abort()
                raise
        connection = await self._connect(loop, timeout)
        try:
            return connection, await connection.send(data, timeout)
        except BaseException:
            connection.abort()
            raise

    def _idle_connection(self, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        """The most recently used idle connection still open; expired ones are closed."""
        idle = self._idle
        if not idle:
            return None
        self._close_idle_since(loop.time() - self.idle_timeout)
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.transport is not None \
                    and not connection.transport.is_closing():
                return connection
        return None

    def _close_idle_since(self, expired: float) -> None:
        """Close the connections idle since ``expired`` or longer (the oldest come first)."""
        idle = self._idle
        while idle and idle[0].idle_since <= expired:
            idle.popleft().close()

    def _close_expired(self) -> None:
        """Close the connections idle for ``idle_timeout`` (a timer, while any are idle)."""
        self._sweep = None
        idle = self._idle
        loop = self._loop
        if loop is None:
            return
        self._close_idle_since(loop.time() - self.idle_timeout)
        if idle:
            self._sweep = loop.call_at(idle[0].idle_since + self.idle_timeout,
                                       self._close_expired)

    async def _connect(self, loop: asyncio.AbstractEventLoop, timeout: float) -> _Connection:
        ssl: _ssl.SSLContext | None = None
        if self.tls:
            ssl = self.ssl_context or _default_tls()
        try:
            async with asyncio.timeout(timeout) as scope:
                _, protocol = await loop.create_connection(
                    lambda: _Connection(self, loop), self.host, self.port, ssl=ssl,
                    server_hostname=self.host if ssl is not None else None)
        except TimeoutError as exc:
            if not scope.expired():  # the system's own connect timeout
                raise HTTPConnectionError(
                    f"cannot connect to {self.host}:{self.port}: {exc}") from exc
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
        if connection.idle_since and connection in self._idle:
            self._idle.remove(connection)  # closed by the server while idle (rare)

    async def close(self) -> None:
        """Close the idle connections and wait (up to a second) until they are closed; those
        in use close when their request ends."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        idle, self._idle = self._idle, deque()
        for connection in idle:
            connection.close()
        waiting = [connection.lost for connection in idle if not connection.lost.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=1.0)
        for connection in idle:
            connection.abort()  # a server that does not finish the TLS close in time


_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


def _decode(coding: str, body: bytes) -> bytes:
    """The body without its content coding (gzip, deflate, identity)."""
    coding = coding.strip().lower()
    try:
        if coding in ("gzip", "x-gzip"):
            parts = []
            while body:  # a gzip body may hold several members, one after the other
                decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
                parts.append(decoder.decompress(body))
                if not decoder.eof:
                    raise zlib.error("the body ends inside a gzip member")
                body = decoder.unused_data
            return b"".join(parts)
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
