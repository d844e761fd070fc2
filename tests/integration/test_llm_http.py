"""The lean HTTP/1.1 client of model calls against raw servers on 127.0.0.1.

Every server here is a few lines over ``asyncio.start_server`` that reads the request and writes
exact response bytes, so the framing (Content-Length, chunked, close-delimited, garbage) and the
moment a connection closes are under the test's control. The server records each request and
each accepted connection, which is how connection reuse is observed.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import inspect
import ipaddress
import json
import socket
import ssl
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from subagents.llm._http import (
    HTTPConnectionError,
    HTTPResponse,
    HTTPTimeoutError,
    KeepAlivePool,
    available,
)

PATH = "/v1/chat/completions?api-version=x"
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
WAIT = 5.0  # upper bound of every wait for something that should happen promptly


# --- the raw server ---------------------------------------------------------------------------


@dataclass
class Request:
    """One request as the server read it."""

    line: str
    headers: dict[str, str]  # names lower-cased, repeated values joined with ", "
    raw_headers: list[tuple[str, str]]
    body: bytes
    conn: int  # index of the TCP connection it came on


@dataclass
class Conn:
    """One accepted TCP connection."""

    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: list[Request] = field(default_factory=list)
    client_eof: bool = False  # the client closed (or reset) the connection
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # the handler has finished

    async def send(self, *parts: bytes) -> None:
        """Write each part, flushed and a few loop turns apart (separate TCP segments)."""
        for part in parts:
            self.writer.write(part)
            await self.writer.drain()
            await spin(3)

    def reset(self) -> None:
        """Abort the connection with a TCP RST instead of a FIN."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


# respond(request, conn) writes the response; True keeps reading requests on the connection,
# False closes it.
Respond = Callable[[Request, Conn], Awaitable[bool]]


class RawServer:
    """A raw HTTP/1.1 server on 127.0.0.1 (port 0) that answers each request with `respond`."""

    def __init__(self, respond: Respond, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.ssl_context = ssl_context
        self.conns: list[Conn] = []
        self.requests: list[Request] = []
        self.active = 0  # requests being answered right now
        self.max_active = 0
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def accepts(self) -> int:
        return len(self.conns)

    def url(self, path: str = PATH, host: str = "127.0.0.1") -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0,
                                                  ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(len(self.conns), reader, writer)
        self.conns.append(conn)
        try:
            while True:
                request = await read_request(reader, conn.index)
                if request is None:
                    conn.client_eof = True
                    break
                conn.requests.append(request)
                self.requests.append(request)
                self.active += 1
                self.max_active = max(self.max_active, self.active)
                try:
                    keep = await self.respond(request, conn)
                finally:
                    self.active -= 1
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            conn.client_eof = True
        except asyncio.CancelledError:
            pass  # stopped by __aexit__: end normally (a cancelled handler task is logged)
        finally:
            writer.close()
            with suppress(Exception):
                await writer.wait_closed()
            conn.closed.set()


async def read_request(reader: asyncio.StreamReader, index: int) -> Request | None:
    """The next request on the connection, or None when the client closed it first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise
        return None
    line, *lines = head[:-4].decode("latin-1").split("\r\n")
    raw = [(name.strip(), value.strip())
           for name, _, value in (item.partition(":") for item in lines)]
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(line, headers, raw, body, index)


def response(status: int = 200, body: bytes = b"", *headers: tuple[str, str],
             reason: str = "OK", version: str = "HTTP/1.1", length: bool = True) -> bytes:
    """The bytes of a response; a Content-Length header is added unless `length` is False."""
    lines = [f"{version} {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def reply(*parts: bytes, keep: bool = True) -> Respond:
    """Answer every request with the same bytes (written as separate parts)."""

    async def respond(request: Request, conn: Conn) -> bool:
        await conn.send(*parts)
        return keep

    return respond


def json_reply(payload: object = None) -> Respond:
    body = json.dumps(payload if payload is not None else {"ok": True}).encode()
    return reply(response(200, body, ("Content-Type", "application/json")))


async def stall(request: Request, conn: Conn) -> bool:
    """Never answer: wait until the client closes the connection."""
    with suppress(ConnectionError):
        await conn.reader.read()  # returns at EOF
    conn.client_eof = True
    return False


def send_then_stall(*parts: bytes) -> Respond:
    """Write `parts`, then never write again; wait until the client closes the connection."""

    async def respond(request: Request, conn: Conn) -> bool:
        await conn.send(*parts)
        return await stall(request, conn)

    return respond


# --- helpers ----------------------------------------------------------------------------------


async def spin(turns: int = 20) -> None:
    """Let the event loop run `turns` iterations (I/O callbacks included), without sleeping."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def eventually(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait (bounded) until `predicate` holds, turning the event loop meanwhile."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - state of sockets and the pool, no event to wait on
            await asyncio.sleep(0)


async def closed(conn: Conn) -> None:
    """Wait (bounded) until the server's handler of `conn` finished."""
    await asyncio.wait_for(conn.closed.wait(), WAIT)


@asynccontextmanager
async def pool_for(url: str, headers: dict[str, str] | None = None,
                   **options: object) -> AsyncIterator[KeepAlivePool]:
    pool = KeepAlivePool(url, headers if headers is not None else {}, **options)
    try:
        yield pool
    finally:
        await pool.close()


@asynccontextmanager
async def served(respond: Respond, path: str = PATH, headers: dict[str, str] | None = None,
                 **options: object) -> AsyncIterator[tuple[RawServer, KeepAlivePool]]:
    """A raw server answering with `respond` and a pool posting to it (both closed after)."""
    async with RawServer(respond) as server, pool_for(server.url(path), headers,
                                                      **options) as pool:
        yield server, pool


async def post(pool: KeepAlivePool, body: bytes = BODY, timeout: float = WAIT) -> HTTPResponse:
    async with asyncio.timeout(WAIT * 2):
        return await pool.post(body, timeout)


# --- requests and plain responses -------------------------------------------------------------


def test_available_when_httptools_is_installed():
    """available() reports True: httptools is a dev dependency of this project."""
    assert available() is True


async def test_a_json_reply_with_content_length_and_the_request_the_server_saw():
    """Status, lower-cased headers and body come back; the server got exactly the POST sent."""
    payload = {"id": "cmpl-1", "choices": [{"message": {"content": "hello"}}]}
    extra = {"Authorization": "Bearer sk-test", "Content-Type": "application/json",
             "X-Custom": "yes"}
    async with served(json_reply(payload), headers=extra) as (server, pool):
        result = await post(pool)
    assert result.status == 200
    assert result.headers["content-type"] == "application/json"
    assert result.headers["content-length"] == str(len(result.body))
    assert all(name == name.lower() for name in result.headers)
    assert json.loads(result.body) == payload

    [request] = server.requests
    assert request.line == f"POST {PATH} HTTP/1.1"
    assert request.headers["host"] == f"127.0.0.1:{server.port}"
    assert request.headers["content-length"] == str(len(BODY))
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-custom"] == "yes"
    assert {"gzip", "deflate"} <= {
        token.strip() for token in request.headers["accept-encoding"].split(",")}
    assert request.headers["user-agent"]
    assert request.body == BODY
    # No header is sent twice (the extra headers do not duplicate the client's own).
    names = [name.lower() for name, _ in request.raw_headers]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("path", "target"), [
    ("/v1/chat/completions", "/v1/chat/completions"),
    ("/deployments/gpt/chat?api-version=2024-06-01&x=1",
     "/deployments/gpt/chat?api-version=2024-06-01&x=1"),
    ("", "/"),
])
async def test_the_request_target_is_the_urls_path_and_query(path, target):
    """The request line carries the URL's path with its query; an empty path is sent as "/"."""
    async with served(json_reply(), path=path) as (server, pool):
        await post(pool)
    assert server.requests[0].line == f"POST {target} HTTP/1.1"


async def test_repeated_response_headers_are_joined_with_a_comma():
    """A header the server repeats comes back once, its values joined with ", "."""
    raw = response(200, b"{}", ("X-Trace", "a"), ("Set-Cookie", "s=1"), ("x-trace", "b"),
                   ("Set-Cookie", "t=2"))
    async with served(reply(raw)) as (_, pool):
        result = await post(pool)
    assert result.headers["x-trace"] == "a, b"
    assert result.headers["set-cookie"] == "s=1, t=2"


@pytest.mark.parametrize(("status", "reason", "headers"), [
    (429, "Too Many Requests", [("Retry-After", "7"), ("Content-Type", "application/json")]),
    (500, "Internal Server Error", []),
    (503, "Service Unavailable", [("Retry-After", "120")]),
    (400, "Bad Request", []),
    (404, "Not Found", []),
])
async def test_error_statuses_are_returned_not_raised(status, reason, headers):
    """4xx/5xx answers are responses (status, headers such as retry-after, body), not errors."""
    body = json.dumps({"error": {"message": reason}}).encode()
    async with served(reply(response(status, body, *headers, reason=reason))) as (server, pool):
        result = await post(pool)
        again = await post(pool)
    assert result.status == again.status == status
    assert json.loads(result.body) == {"error": {"message": reason}}
    for name, value in headers:
        assert result.headers[name.lower()] == value
    assert server.accepts == 1  # an error status does not cost the connection


async def test_a_content_length_0_reply_keeps_the_connection():
    """Content-Length: 0 is a complete, empty body; the connection is reused."""
    async with served(reply(response(200, b""))) as (server, pool):
        first = await post(pool, timeout=2)
        second = await post(pool, timeout=2)
    assert first.body == second.body == b""
    assert server.accepts == 1


async def test_a_204_reply_ends_at_its_headers():
    """A 204 has no body by definition: the post returns at once, without waiting for the
    server to close the connection (this server never does), and the connection is kept."""
    raw = response(204, b"", ("X-Request-Id", "r1"), reason="No Content", length=False)
    async with served(reply(raw)) as (server, pool):
        result = await post(pool, timeout=2)
        await post(pool, timeout=2)
    assert (result.status, result.body, result.headers["x-request-id"]) == (204, b"", "r1")
    assert server.accepts == 1


async def test_a_large_request_and_response_body_arrive_whole():
    """Megabytes each way: the request body and the response body are not truncated."""
    big_request = b"q" * (3 * 1024 * 1024 + 7)
    big_response = bytes(range(256)) * (8 * 1024 + 3)

    async def respond(request: Request, conn: Conn) -> bool:
        await conn.send(response(200, big_response))
        return True

    async with served(respond) as (server, pool):
        result = await post(pool, big_request)
    assert server.requests[0].body == big_request
    assert result.body == big_response


# --- keep-alive -------------------------------------------------------------------------------


async def test_sequential_posts_share_one_keep_alive_connection():
    """Three posts in a row go over one TCP connection, which stays open (idle) afterwards."""
    async with served(json_reply()) as (server, pool):
        for _ in range(3):
            assert (await post(pool)).status == 200
        assert pool.open_connections == 1
    assert server.accepts == 1
    assert [request.conn for request in server.requests] == [0, 0, 0]


async def test_concurrent_posts_open_a_connection_each_and_later_posts_reuse_them():
    """Five posts in flight use five connections; the next posts open none."""
    all_arrived = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        if len(server.requests) == 5:
            all_arrived.set()
        await all_arrived.wait()
        await conn.send(response(200, f"conn {conn.index}".encode()))
        return True

    async with served(respond) as (server, pool):
        tasks = [asyncio.create_task(post(pool)) for _ in range(5)]
        await asyncio.wait_for(all_arrived.wait(), WAIT)
        assert pool.open_connections == 5
        results = await asyncio.gather(*tasks)
        assert sorted(result.body for result in results) == [
            f"conn {index}".encode() for index in range(5)]
        assert pool.open_connections == 5
        for _ in range(5):
            await post(pool)
        assert pool.open_connections == 5
    assert server.accepts == 5
    assert len(server.requests) == 10


async def test_the_most_recently_used_idle_connection_is_reused_first():
    """Of two idle connections, the next post takes the one released last."""
    gates = [asyncio.Event(), asyncio.Event()]
    both_arrived = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        if conn.index < 2 and len(conn.requests) == 1:
            if len(server.requests) == 2:
                both_arrived.set()
            await gates[conn.index].wait()
        await conn.send(response(200, str(conn.index).encode()))
        return True

    async with served(respond) as (server, pool):
        tasks = [asyncio.create_task(post(pool)) for _ in range(2)]
        await asyncio.wait_for(both_arrived.wait(), WAIT)
        gates[0].set()
        done, _ = await asyncio.wait(tasks, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
        assert [task.result().body for task in done] == [b"0"]
        gates[1].set()
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
        assert (await post(pool)).body == b"1"
        assert (await post(pool)).body == b"1"
    assert server.accepts == 2


async def test_a_chunked_reply_is_decoded_and_the_connection_reused():
    """Chunks (one split across TCP writes, with an extension) are joined into the body."""
    raw = response(200, b"", ("Transfer-Encoding", "chunked"), length=False)
    parts = (raw + b"5\r\nhello\r\n",
             b"7;ext=1\r\n, w",
             b"orld\r\n1",
             b"\r\n!\r\n",
             b"0\r\n\r\n")
    async with served(reply(*parts)) as (server, pool):
        first = await post(pool)
        second = await post(pool)
    assert first.body == second.body == b"hello, world!"
    assert server.accepts == 1


@pytest.mark.parametrize(("encoding", "compress"), [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("GZIP", gzip.compress),
])
async def test_gzip_and_deflate_bodies_are_decoded(encoding, compress):
    """Content-Encoding gzip / deflate (zlib stream) bodies come back decoded."""
    plain = json.dumps({"text": "sunny " * 500}).encode()
    raw = response(200, compress(plain), ("Content-Encoding", encoding),
                   ("Content-Type", "application/json"))
    async with served(reply(raw)) as (server, pool):
        first = await post(pool)
        second = await post(pool)
    assert first.body == second.body == plain
    assert server.accepts == 1


async def test_a_gzip_body_sent_chunked_is_decoded():
    """Chunked transfer and gzip content-encoding together: both are undone."""
    plain = b'{"text": "' + b"cloudy " * 300 + b'"}'
    packed = gzip.compress(plain)
    head = response(200, b"", ("Transfer-Encoding", "chunked"), ("Content-Encoding", "gzip"),
                    length=False)
    middle = len(packed) // 2
    chunks = [packed[:middle], packed[middle:]]
    parts = [head, *(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for chunk in chunks),
             b"0\r\n\r\n"]
    async with served(reply(*parts)) as (_, pool):
        assert (await post(pool)).body == plain


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress"])
async def test_an_unsupported_content_encoding_is_a_connection_error(encoding):
    """A body in an encoding the client cannot decode raises HTTPConnectionError."""
    raw = response(200, b"\x8b\x02\x80not-really-compressed\x03", ("Content-Encoding", encoding))
    async with served(reply(raw)) as (_, pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool)


async def test_a_corrupt_gzip_body_is_a_connection_error():
    """A body that claims gzip but is not gzip raises HTTPConnectionError."""
    raw = response(200, b"this is not gzip at all", ("Content-Encoding", "gzip"))
    async with served(reply(raw)) as (_, pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool)


# --- connections that end -----------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    response(200, b'{"a": 1}', ("Connection", "close")),
    response(200, b'{"a": 1}', version="HTTP/1.0"),
], ids=["connection-close", "http-1.0"])
async def test_a_connection_the_server_will_not_keep_is_not_reused(raw):
    """After `Connection: close` (or HTTP/1.0 without keep-alive) the next post opens a new
    connection, though this server left the old one open, and the client closes the old one."""
    async with served(reply(raw, keep=True)) as (server, pool):
        first = await post(pool)
        second = await post(pool)
        assert pool.open_connections <= 1
    assert first.body == second.body == b'{"a": 1}'
    assert server.accepts == 2
    assert [request.conn for request in server.requests] == [0, 1]
    await closed(server.conns[0])
    assert server.conns[0].client_eof


async def test_an_http_1_0_keep_alive_response_keeps_the_connection():
    """HTTP/1.0 with `Connection: keep-alive` and a Content-Length is a reusable connection."""
    raw = response(200, b"ok", ("Connection", "keep-alive"), version="HTTP/1.0")
    async with served(reply(raw)) as (server, pool):
        await post(pool)
        await post(pool)
    assert server.accepts == 1


async def test_a_close_delimited_body_is_read_to_the_end():
    """No Content-Length, not chunked: the body is everything until the server closes."""
    head = response(200, b"", ("Content-Type", "application/json"), length=False)
    body = b'{"text": "' + b"x" * 70_000 + b'"}'
    async with served(reply(head + body[:10], body[10:40_000], body[40_000:], keep=False)) as (
            server, pool):
        first = await post(pool)
        second = await post(pool)
    assert first.status == 200
    assert first.body == second.body == body
    assert server.accepts == 2


@pytest.mark.parametrize("raw", [
    b"",
    b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial",
    response(200, b"", ("Transfer-Encoding", "chunked"), length=False) + b"a\r\n0123456789\r\n",
], ids=["nothing", "mid-headers", "mid-body", "mid-chunked-body"])
async def test_the_server_closing_before_the_response_ends_is_a_connection_error(raw):
    """A FIN before the response is complete raises HTTPConnectionError; the pool goes on."""
    calls = 0

    async def respond(request: Request, conn: Conn) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            if raw:
                await conn.send(raw)
            return False
        await conn.send(response(200, b"fine"))
        return True

    async with served(respond) as (server, pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool)
        assert pool.open_connections == 0
        assert (await post(pool)).body == b"fine"
    assert server.accepts == 2


async def test_a_reset_connection_is_a_connection_error():
    """A TCP RST instead of a response raises HTTPConnectionError."""

    async def respond(request: Request, conn: Conn) -> bool:
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nabc")
        conn.reset()
        return False

    async with served(respond) as (_, pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool)
        assert pool.open_connections == 0


async def test_an_idle_connection_the_server_closed_is_not_reused():
    """The server closes after a keep-alive response; the next post succeeds on a new one."""
    async with served(reply(response(200, b"ok", ("Connection", "keep-alive")),
                            keep=False)) as (server, pool):
        await post(pool)
        await closed(server.conns[0])
        await spin()  # the client's protocol sees the FIN
        result = await post(pool)
        assert pool.open_connections <= 1
    assert result.body == b"ok"
    assert server.accepts == 2


@pytest.mark.parametrize("raw", [
    b"garbage\r\n\r\n",
    b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n",
    response(200, b"", ("Transfer-Encoding", "chunked"), length=False) + b"zz\r\nhello\r\n",
], ids=["garbage", "bad-status", "bad-content-length", "bad-chunk-size"])
async def test_malformed_http_is_a_connection_error_and_the_connection_is_dropped(raw):
    """Bytes that are not an HTTP response raise HTTPConnectionError; the client closes the
    connection (the server, still holding it open, sees EOF)."""
    async with served(send_then_stall(raw)) as (server, pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool)
        await closed(server.conns[0])
        assert server.conns[0].client_eof
        assert pool.open_connections == 0


@pytest.mark.parametrize("interim", [
    [b"HTTP/1.1 100 Continue\r\n\r\n"],
    [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n"],
], ids=["100", "100-and-103"])
async def test_informational_responses_before_the_final_one_are_skipped(interim):
    """1xx responses are passed over: the final 200 is returned and the connection reused."""
    final = response(200, b'{"done": true}', ("X-Final", "1"))
    async with served(reply(*interim, final)) as (server, pool):
        first = await post(pool)
        second = await post(pool)
    assert first.status == second.status == 200
    assert first.body == second.body == b'{"done": true}'
    assert first.headers["x-final"] == "1"
    assert "link" not in first.headers
    assert server.accepts == 1


async def test_a_100_continue_in_the_same_write_as_the_final_response_is_skipped():
    """Interim and final response arriving in one TCP segment are parsed apart."""
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + response(201, b"made", reason="Created")
    async with served(reply(raw)) as (_, pool):
        result = await post(pool)
    assert (result.status, result.body) == (201, b"made")


# --- timeouts, refusal, cancellation ----------------------------------------------------------


@pytest.mark.parametrize("sent", [
    b"",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234",
], ids=["nothing", "part-of-the-headers", "part-of-the-body"])
async def test_a_server_that_stops_answering_times_out(sent):
    """No byte for `timeout` seconds raises HTTPTimeoutError soon after; the stalled connection
    is closed, never reused, and the pool goes on with a new one."""
    calls = 0

    async def respond(request: Request, conn: Conn) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await send_then_stall(sent)(request, conn)
        await conn.send(response(200, b"fine"))
        return True

    async with asyncio.timeout(WAIT), served(respond) as (server, pool):
        started = time.monotonic()
        with pytest.raises(HTTPTimeoutError):
            await pool.post(BODY, 0.2)
        elapsed = time.monotonic() - started
        assert 0.15 <= elapsed < 2.0
        await closed(server.conns[0])
        assert server.conns[0].client_eof
        assert (await pool.post(BODY, 2)).body == b"fine"
    assert server.accepts == 2
    assert [request.conn for request in server.requests] == [0, 1]


async def test_a_connection_refused_is_a_connection_error():
    """A port nobody listens on raises HTTPConnectionError."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = sock.getsockname()[1]
        async with pool_for(f"http://127.0.0.1:{port}{PATH}") as pool:
            with pytest.raises(HTTPConnectionError):
                await post(pool, timeout=2)
            assert pool.open_connections == 0


async def test_a_closed_servers_port_is_a_connection_error():
    """After the server closed, a new connection to its port is refused: HTTPConnectionError."""
    async with RawServer(json_reply()) as server:
        url = server.url()
    async with pool_for(url) as pool:
        with pytest.raises(HTTPConnectionError):
            await post(pool, timeout=2)


async def test_a_connect_that_hangs_times_out():
    """A connect the server never completes (its accept queue is full) raises HTTPTimeoutError."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):  # fill the accept queue: further SYNs are dropped
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        async with asyncio.timeout(WAIT), pool_for(f"http://127.0.0.1:{port}/") as pool:
            started = time.monotonic()
            with pytest.raises(HTTPTimeoutError):
                await pool.post(BODY, 0.3)
            assert time.monotonic() - started < 2.0
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_cancelling_a_post_closes_its_connection():
    """A cancelled post raises CancelledError and closes the connection it was using."""
    async with served(stall) as (server, pool):
        task = asyncio.create_task(pool.post(BODY, 30))
        await eventually(lambda: len(server.requests) == 1)
        assert pool.open_connections == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)
        await closed(server.conns[0])
        assert server.conns[0].client_eof
        await eventually(lambda: pool.open_connections == 0)


async def test_a_post_cancelled_mid_body_never_hands_the_rest_to_the_next_post():
    """Cancelled while the body is arriving: the next post gets its own, clean response."""
    calls = 0
    half_sent = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nstale")
            half_sent.set()
            await stall(request, conn)
            return False
        await conn.send(response(200, b"fresh"))
        return True

    async with served(respond) as (server, pool):
        task = asyncio.create_task(pool.post(BODY, 30))
        await asyncio.wait_for(half_sent.wait(), WAIT)
        await spin()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)
        assert (await post(pool)).body == b"fresh"
    assert server.accepts == 2


# --- pool limits and lifetime -----------------------------------------------------------------


async def test_the_limit_caps_requests_in_flight():
    """With limit=2, four concurrent posts never have more than two requests at the server."""
    release = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        await release.wait()
        await conn.send(response(200, b"ok"))
        return True

    async with served(respond, limit=2) as (server, pool):
        tasks = [asyncio.create_task(post(pool)) for _ in range(4)]
        await eventually(lambda: len(server.requests) == 2)
        # A third request would arrive at once if the limit did not hold.
        with pytest.raises(TimeoutError):
            await eventually(lambda: len(server.requests) > 2 or server.accepts > 2,
                             timeout=0.3)
        assert pool.open_connections == 2
        release.set()
        results = await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    assert [result.body for result in results] == [b"ok"] * 4
    assert len(server.requests) == 4
    assert server.max_active == 2
    assert server.accepts == 2


async def test_a_post_cancelled_while_waiting_for_the_limit_leaves_the_limit_intact():
    """With limit=1, cancelling a post that waits for a slot neither frees a slot it never had
    nor keeps one: later posts still run one at a time, and all of them run."""
    release = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        if len(server.requests) == 1:
            await release.wait()
        await conn.send(response(200, b"ok"))
        return True

    async with served(respond, limit=1) as (server, pool):
        first = asyncio.create_task(post(pool))
        await eventually(lambda: len(server.requests) == 1)
        waiting = asyncio.create_task(post(pool))
        await spin()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, WAIT)
        later = [asyncio.create_task(post(pool)) for _ in range(2)]
        with pytest.raises(TimeoutError):
            await eventually(lambda: len(server.requests) > 1, timeout=0.3)
        release.set()
        results = await asyncio.wait_for(asyncio.gather(first, *later), WAIT)
    assert [result.body for result in results] == [b"ok"] * 3
    assert server.max_active == 1
    assert len(server.requests) == 3


async def test_close_closes_idle_connections():
    """close() closes every idle connection (the server sees EOF); usable() held before."""
    all_arrived = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        if len(server.requests) == 3:
            all_arrived.set()
        await all_arrived.wait()
        await conn.send(response(200, b"ok"))
        return True

    async with RawServer(respond) as server:
        pool = KeepAlivePool(server.url(), {})
        assert pool.usable()
        await asyncio.wait_for(asyncio.gather(*(pool.post(BODY, WAIT) for _ in range(3))), WAIT)
        assert pool.open_connections == 3
        assert pool.usable()
        await pool.close()
        for conn in server.conns:
            await closed(conn)
            assert conn.client_eof
        await eventually(lambda: pool.open_connections == 0)


async def test_close_during_a_request_closes_that_connection_when_it_ends():
    """A connection in use at close() finishes its request, then is closed, not kept idle."""
    release = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        await release.wait()
        await conn.send(response(200, b"late"))
        return True

    async with RawServer(respond) as server:
        pool = KeepAlivePool(server.url(), {})
        task = asyncio.create_task(pool.post(BODY, WAIT))
        await eventually(lambda: len(server.requests) == 1)
        await pool.close()
        release.set()
        result = await asyncio.wait_for(task, WAIT)
        assert result.body == b"late"
        await closed(server.conns[0])
        assert server.conns[0].client_eof
        await eventually(lambda: pool.open_connections == 0)


def test_a_pool_is_not_usable_from_another_event_loop():
    """usable() is True on the loop that used the pool and False on a later, different loop."""

    async def first_loop() -> tuple[KeepAlivePool, bool]:
        async with RawServer(json_reply()) as server:
            pool = KeepAlivePool(server.url(), {})
            await post(pool)
            was_usable = pool.usable()
            await pool.close()
        return pool, was_usable

    async def second_loop(pool: KeepAlivePool) -> bool:
        return pool.usable()

    pool, was_usable = asyncio.run(first_loop())
    assert was_usable is True
    assert asyncio.run(second_loop(pool)) is False


@pytest.mark.parametrize("idle_timeout", [0.0, 1e-6])
async def test_connections_idle_longer_than_idle_timeout_are_replaced(idle_timeout):
    """With a (near) zero idle_timeout the second post opens a new connection; the old one is
    closed."""
    async with served(json_reply(), idle_timeout=idle_timeout) as (server, pool):
        await post(pool)
        await post(pool)
        await closed(server.conns[0])
        assert server.conns[0].client_eof
        assert pool.open_connections <= 1
    assert server.accepts == 2
    assert [request.conn for request in server.requests] == [0, 1]


# --- TLS ----------------------------------------------------------------------------------------


def self_signed(tmp_path: Path, *names: str) -> tuple[ssl.SSLContext, str]:
    """A server context with a fresh self-signed certificate for `names`, and its PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llm-http test")])
    alt_names: list[x509.GeneralName] = []
    for name in names:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    public_key = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public_key),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)
    return server_context, cert_pem.decode()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_https_with_a_trusted_certificate(tmp_path, host):
    """Over TLS with a context trusting the server's certificate: posts succeed, keep-alive."""
    server_context, cert_pem = self_signed(tmp_path, "localhost", "127.0.0.1")
    client_context = ssl.create_default_context(cadata=cert_pem)
    async with RawServer(json_reply({"secure": True}), ssl_context=server_context) as server:
        async with pool_for(server.url(host=host), {"Authorization": "Bearer t"},
                            ssl_context=client_context) as pool:
            first = await post(pool)
            second = await post(pool)
        await eventually(lambda: all(conn.closed.is_set() for conn in server.conns))
    assert json.loads(first.body) == json.loads(second.body) == {"secure": True}
    assert server.accepts == 1
    assert server.requests[0].headers["host"] == f"{host}:{server.port}"
    assert server.requests[0].body == BODY


async def test_https_with_an_untrusted_certificate_is_a_connection_error(tmp_path):
    """The default context does not trust a self-signed certificate: HTTPConnectionError."""
    server_context, _ = self_signed(tmp_path, "localhost", "127.0.0.1")
    async with (RawServer(json_reply(), ssl_context=server_context) as server,
                pool_for(server.url(host="localhost")) as pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool, timeout=2)
        assert pool.open_connections == 0
    assert server.requests == []


async def test_https_to_a_host_the_certificate_does_not_name_is_a_connection_error(tmp_path):
    """A trusted certificate for another name fails the hostname check: HTTPConnectionError."""
    server_context, cert_pem = self_signed(tmp_path, "model.example.test")
    client_context = ssl.create_default_context(cadata=cert_pem)
    async with (RawServer(json_reply(), ssl_context=server_context) as server,
                pool_for(server.url(host="127.0.0.1"), ssl_context=client_context) as pool):
        with pytest.raises(HTTPConnectionError):
            await post(pool, timeout=2)
    assert server.requests == []



# --- found in review ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 429, 204])
async def test_an_empty_body_with_a_content_coding_keeps_its_status(status):
    """A reply with `Content-Encoding: gzip` and no body (servers send these for errors) is
    returned as it is: decoding nothing is not an error."""
    raw = response(status, b"", ("Content-Encoding", "gzip"), ("Retry-After", "3"))
    async with served(reply(raw)) as (_, pool):
        result = await post(pool)
    assert (result.status, result.body, result.headers["retry-after"]) == (status, b"", "3")


async def test_an_error_reply_whose_body_does_not_decode_keeps_its_status():
    raw = response(503, b"not gzip at all", ("Content-Encoding", "gzip"))
    async with served(reply(raw)) as (_, pool):
        result = await post(pool)
    assert result.status == 503


async def test_a_repeated_retry_after_is_read_as_its_first_value():
    raw = response(429, b"{}", ("Retry-After", "5"), ("Retry-After", "5"),
                   ("X-Should-Retry", "true"), ("x-should-retry", "true"))
    async with served(reply(raw)) as (_, pool):
        result = await post(pool)
    assert result.headers["retry-after"] == "5"
    assert result.headers["x-should-retry"] == "true"


async def test_a_chunked_bodys_trailers_are_not_taken_for_headers():
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Trace: head\r\n\r\n"
           b"2\r\n{}\r\n0\r\nX-Trace: trailer\r\nX-Checksum: 1\r\n\r\n")
    async with served(reply(raw)) as (server, pool):
        result = await post(pool)
        await post(pool)
    assert result.body == b"{}"
    assert result.headers["x-trace"] == "head"
    assert "x-checksum" not in result.headers
    assert server.accepts == 1


async def test_a_gzip_body_of_several_members_is_decoded_whole():
    body = gzip.compress(b'{"a": ') + gzip.compress(b'"b"}')
    async with served(reply(response(200, body, ("Content-Encoding", "gzip")))) as (_, pool):
        result = await post(pool)
    assert result.body == b'{"a": "b"}'


async def test_idle_connections_are_closed_after_the_idle_timeout_without_more_traffic():
    """Connections left idle after a burst are closed once idle_timeout passes, even when no
    request comes to look at them."""
    arrived = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        if len(server.requests) == 3:
            arrived.set()
        await asyncio.wait_for(arrived.wait(), WAIT)
        await conn.send(response(200, b"{}"))
        return True

    async with served(respond, idle_timeout=0.05) as (server, pool):
        await asyncio.gather(*(post(pool) for _ in range(3)))
        assert server.accepts == 3
        for conn in server.conns:
            await closed(conn)  # the client closed every one of them
        assert pool.open_connections == 0


async def test_the_oldest_idle_connections_are_closed_while_traffic_goes_on():
    """Steady traffic reuses the newest connection; the others of an earlier burst are closed
    once idle longer than idle_timeout, not kept forever at the bottom of the pool."""
    arrived = asyncio.Event()

    async def respond(request: Request, conn: Conn) -> bool:
        if len(server.requests) == 4:
            arrived.set()
        if len(server.requests) <= 4:
            await asyncio.wait_for(arrived.wait(), WAIT)
        await conn.send(response(200, b"{}"))
        return True

    async with served(respond, idle_timeout=0.2) as (server, pool):
        await asyncio.gather(*(post(pool) for _ in range(4)))
        start = time.monotonic()
        async with asyncio.timeout(WAIT):
            while pool.open_connections > 1:
                await post(pool)  # one at a time: only the newest connection is used
        assert time.monotonic() - start >= 0.15
    assert server.accepts == 4


async def test_a_kept_connection_closed_without_a_reply_is_retried_at_once_on_a_new_one():
    """The keep-alive race: the server closes an idle connection just as the next request goes
    out on it. The request goes out again on a new connection, without an error."""

    async def respond(request: Request, conn: Conn) -> bool:
        if len(conn.requests) == 2:  # the second request on a connection: drop it unanswered
            return False
        await conn.send(response(200, b'{"n": %d}' % len(server.requests)))
        return True

    async with served(respond) as (server, pool):
        first = await post(pool)
        second = await post(pool)
    assert (first.body, second.body) == (b'{"n": 1}', b'{"n": 3}')
    assert server.accepts == 2
    assert [r.body for r in server.requests] == [BODY] * 3


async def test_a_new_connection_closed_without_a_reply_is_an_error_not_retried():
    async with served(reply(keep=False)) as (server, pool):
        with pytest.raises(HTTPConnectionError, match="without replying"):
            await post(pool)
    assert len(server.requests) == 1


async def test_a_kept_connection_closed_mid_reply_is_an_error_not_retried():
    async def respond(request: Request, conn: Conn) -> bool:
        if len(conn.requests) == 2:
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")
            return False
        await conn.send(response(200, b"{}"))
        return True

    async with served(respond) as (server, pool):
        await post(pool)
        with pytest.raises(HTTPConnectionError, match="before the reply ended"):
            await post(pool)
    assert len(server.requests) == 2


async def test_waiting_for_a_free_slot_times_out_and_gives_the_slot_back():
    """With every connection busy a post waits at most its timeout; the slot the first post
    frees afterwards serves the next post."""
    async def respond(request: Request, conn: Conn) -> bool:
        if len(server.requests) == 1:
            await asyncio.wait_for(release.wait(), WAIT)
        await conn.send(response(200, b"{}"))
        return True

    release = asyncio.Event()
    async with served(respond, limit=1) as (server, pool):
        first = asyncio.ensure_future(pool.post(BODY, WAIT))
        await eventually(lambda: len(server.requests) == 1)
        with pytest.raises(HTTPTimeoutError, match="stayed busy"):
            await post(pool, timeout=0.1)
        release.set()
        assert (await asyncio.wait_for(first, WAIT)).status == 200
        assert (await post(pool)).status == 200
    assert len(server.requests) == 2


async def test_header_values_go_out_as_utf8_and_the_path_percent_encoded():
    async with RawServer(json_reply()) as server, pool_for(
            server.url("/my models/v1/chat completions?q=a b"),
            {"X-Team": "café"}) as pool:
        await post(pool)
    [request] = server.requests
    assert request.line == "POST /my%20models/v1/chat%20completions?q=a%20b HTTP/1.1"
    raw = dict(request.raw_headers)
    assert raw["X-Team"].encode("latin-1").decode("utf-8") == "café"


@pytest.mark.parametrize("headers", [{"X-Bad": "a\r\nInjected: 1"}, {"X-Nul": "a\0b"},
                                     {"": "empty name"}])
def test_a_header_with_a_line_break_or_nul_is_refused(headers):
    with pytest.raises(ValueError, match="line break or a NUL"):
        KeepAlivePool("http://127.0.0.1:9/v1", headers)


async def test_close_waits_until_its_connections_are_closed():
    async with served(json_reply()) as (_, pool):
        await asyncio.gather(*(post(pool) for _ in range(3)))
        await pool.close()
        assert pool.open_connections == 0


# --- the same on uvloop -------------------------------------------------------------------------

_ON_UVLOOP = sorted(
    (function for name, function in list(globals().items())
     if name.startswith("test_") and inspect.iscoroutinefunction(function)
     and not inspect.signature(function).parameters),
    key=lambda function: function.__name__)


@pytest.mark.parametrize("case", _ON_UVLOOP, ids=lambda function: function.__name__)
def test_on_uvloop(case):
    """`serve` runs on uvloop when it is installed: every test above without parameters runs
    again on a uvloop event loop (its transports are not asyncio's own classes)."""
    uvloop = pytest.importorskip("uvloop")
    uvloop.run(case())
