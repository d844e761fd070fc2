"""The one HTTP stack of model calls: an aiohttp session per endpoint, one retry policy, one
error mapping, the same proxy and TLS rules for plain and streamed calls.

* Connections are kept alive (up to 1,000 per endpoint, idle ones closed after 30 s); TLS uses
  the system's certificates and certifi's; the proxy comes from ``HTTP(S)_PROXY`` /
  ``NO_PROXY`` (read once per endpoint); credentials in the URL are sent as basic auth.
* ``timeout`` is a deadline for the whole reply of one attempt, from connecting to its last
  byte (a server that trickles a byte a second is cut at ``timeout`` all the same); the turn's
  deadline (:class:`~subagents.types.CallScope`) bounds every attempt and every wait. A plain
  call's deadline is aiohttp's own total timeout (no timer of ours around it).
* Retried like the openai SDK retries: connection errors, timeouts, 408, 409, 429 and 5xx, up to
  ``max_retries`` times, waiting the endpoint's ``Retry-After`` (up to two minutes) or backing
  off; ``x-should-retry`` is obeyed. A stream is retried only until its reply starts.
* Every reply is capped before it is read: a plain reply at 16 MiB, a stream at 16 MiB of
  events; aiohttp caps header lines and decompresses in bounded steps.

Failures become :class:`~subagents.exceptions.LLMError` with a stable code: ``llm.auth`` (401),
``llm.http_<status>``, ``llm.timeout``, ``llm.deadline``, ``llm.connection``,
``llm.bad_response``. An error for a 429 carries ``retry_after`` (seconds) when the endpoint
said.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from multidict import CIMultiDict

from subagents.exceptions import LLMError
from subagents.retry import RetryPolicy, backoff, retry_call
from subagents.types import dump_json, load_json

if TYPE_CHECKING:
    import ssl

    from subagents.types import CallScope

MAX_REPLY_BYTES = 16 * 1024 * 1024
"""A plain reply, or the events of a stream, larger than this is a malformed reply."""
MAX_RETRY_AFTER = 120.0
"""Seconds: a ``Retry-After`` longer than this is not waited for (the error is raised)."""
_RETRY_STATUSES = frozenset({408, 409, 429})
_UNTIMED = aiohttp.ClientTimeout(total=None)
"""For a call whose deadline is a timer of ours (a stream, a server's description)."""
_UNPARSED_OUTPUT = re.compile(r"does not match the expected|failed to parse (the )?(model|tool)",
                              re.I)


class ModelCallError(LLMError):
    """A failed model call; ``retryable`` tells the retry policy whether to try again."""

    def __init__(self, message: str, *, code: str, retryable: bool = False,
                 retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message, code=code)
        self.retryable = retryable
        self.retry_after = retry_after
        """Seconds the endpoint asked to wait (``Retry-After``), if it said."""
        self.status = status
        """The HTTP status of an error reply."""


@dataclass(frozen=True)
class Timing:
    """How long one attempt may take."""

    seconds: float
    """The attempt's deadline in seconds from its start."""
    turn_bound: bool
    """True when the turn's deadline, not the model's ``timeout``, set it."""


class ModelEndpoint:
    """POSTs JSON to one model URL and reads the reply, plain or as server-sent events.

    Args:
        url: The endpoint, e.g. ``http://host/v1/chat/completions``.
        headers: Sent with every request (content type, key, extra headers).
        timeout: Seconds an attempt's whole reply may take.
        max_retries: Attempts after the first.
        model: The model's name, for messages.
    """

    def __init__(self, url: str, headers: dict[str, str], *, timeout: float, max_retries: int,
                 model: str) -> None:
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.max_retries = max_retries
        self.model = model
        self.proxy = _env_proxy(url)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_headers, self._content_type = _split_headers(headers)
        self._timeout = _total(timeout)
        self._unbounded_policy = retry_policy(max_retries, None)
        """The retry policy of every call without a turn deadline (built once)."""

    # ------------------------------------------------------------------ session
    def session(self) -> aiohttp.ClientSession:
        """The keep-alive session, created on the running event loop at first use (a session
        left on another loop, e.g. by an earlier ``asyncio.run``, is replaced)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            # one idle connection kept per concurrent call: no churn under load
            connector = aiohttp.TCPConnector(limit=1000, keepalive_timeout=30,
                                             ssl=_tls_context())
            # the headers and the model's timeout are the session's defaults: a call passes
            # neither (aiohttp would merge the headers and build the timeout every time)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._session_headers, timeout=self._timeout,
                read_bufsize=2 ** 20, auto_decompress=True)
            self._loop = loop
        return self._session

    async def close(self) -> None:
        """Close the session (when it belongs to the running loop; else just forget it)."""
        session, self._session = self._session, None
        if session is not None and not session.closed and self._loop is _running_loop():
            await session.close()
        self._loop = None

    # ------------------------------------------------------------------ calls
    async def post_json(self, body: dict[str, Any], scope: CallScope | None) -> Any:
        """The decoded JSON reply of a plain call, with retries."""
        data = dump_json(body)
        policy = self._unbounded_policy if scope is None or scope.deadline is None \
            else self._policy(scope)
        return await retry_call(lambda: self._attempt_json(data, scope), policy)

    async def stream_events(self, body: dict[str, Any], scope: CallScope | None,
                            ) -> AsyncIterator[Any]:
        """The decoded ``data:`` payloads of a streamed reply, in order; the request is retried
        until the reply starts, never after."""
        data = dump_json(body)
        timing = self._timing(scope)
        started = time.monotonic()
        response = await retry_call(lambda: self._open_stream(data, scope),
                                    self._policy(scope))
        left = max(0.01, timing.seconds - (time.monotonic() - started))
        try:
            async with asyncio.timeout(left):
                async for payload in _server_sent_data(response):
                    yield payload
        except TimeoutError as exc:
            error = self._timed_out(timing)
            error.retryable = False  # the reply had started: never attempted again
            raise error from exc
        except aiohttp.ClientError as exc:
            raise ModelCallError(f"the connection to the model endpoint broke mid-reply: "
                                 f"{_describe(exc)}", code="llm.connection") from exc
        finally:
            response.release()

    async def get_json(self, url: str, *, timeout: float) -> Any:
        """A GET of ``url`` on this endpoint's connections (a server's description of itself),
        its JSON, or None when it does not answer 200 with JSON in time; never retried."""
        try:
            async with asyncio.timeout(timeout):
                async with self.session().get(url, proxy=self.proxy,
                                              timeout=_UNTIMED) as response:
                    raw = await _read_capped(response)
                    if response.status != 200:
                        return None
            return json.loads(raw)
        except (TimeoutError, aiohttp.ClientError, ModelCallError, ValueError):
            return None

    # ------------------------------------------------------------------ one attempt
    async def _attempt_json(self, data: bytes, scope: CallScope | None) -> Any:
        timing = self._timing(scope)
        # aiohttp's total timeout bounds the attempt, from connecting to the reply's last byte
        timeout = _total(timing.seconds) if timing.turn_bound else self._timeout
        try:
            async with self.session().post(
                    self.url, data=aiohttp.BytesPayload(data, content_type=self._content_type),
                    proxy=self.proxy, timeout=timeout) as response:
                raw = await _read_capped(response)
                if response.status >= 400:
                    raise _status_error(response.status, response.headers, raw)
        except TimeoutError as exc:
            raise self._timed_out(timing) from exc
        except aiohttp.ClientError as exc:
            raise _connection_error(exc) from exc
        try:
            return load_json(raw)
        except ValueError as exc:
            raise ModelCallError("the model endpoint sent a reply that is not JSON",
                                 code="llm.bad_response") from exc

    async def _open_stream(self, data: bytes, scope: CallScope | None
                           ) -> aiohttp.ClientResponse:
        timing = self._timing(scope)
        response: aiohttp.ClientResponse | None = None
        try:
            async with asyncio.timeout(timing.seconds):
                response = await self.session().post(
                    self.url, data=aiohttp.BytesPayload(data, content_type=self._content_type),
                    proxy=self.proxy, timeout=_UNTIMED)
                if response.status >= 400:
                    raw = await _read_capped(response)
                    response.release()
                    raise _status_error(response.status, response.headers, raw)
        except TimeoutError as exc:
            if response is not None:
                response.release()
            raise self._timed_out(timing) from exc
        except aiohttp.ClientError as exc:
            raise _connection_error(exc) from exc
        return response

    # ------------------------------------------------------------------ policy
    def _timing(self, scope: CallScope | None) -> Timing:
        return attempt_timing(self.timeout, scope, self.model)

    def _timed_out(self, timing: Timing) -> ModelCallError:
        return timed_out(timing, self.timeout, self.model)

    def _policy(self, scope: CallScope | None) -> RetryPolicy:
        return retry_policy(self.max_retries, scope)


# ---------------------------------------------------------------------- the policy, shared
def attempt_timing(timeout: float, scope: CallScope | None, model: str) -> Timing:
    """How long one attempt at calling ``model`` may take: its ``timeout``, or what is left of
    the turn when that is less.

    Raises:
        ModelCallError: ``llm.deadline`` when the turn has no time left.
    """
    left = None if scope is None else scope.time_left()
    if left is not None and left <= 0:
        raise ModelCallError(f"no time was left in this turn to call the model {model!r}",
                             code="llm.deadline")
    if left is not None and left < timeout:
        return Timing(left, turn_bound=True)
    return Timing(timeout, turn_bound=False)


def timed_out(timing: Timing, timeout: float, model: str) -> ModelCallError:
    """The error of an attempt cut at ``timing``: the turn's deadline, or the model's
    ``timeout`` (retryable)."""
    if timing.turn_bound:
        return ModelCallError(f"the model {model!r} did not answer before the turn's deadline",
                              code="llm.deadline")
    return ModelCallError(f"the model {model!r} did not answer within {timeout:g}s",
                          code="llm.timeout", retryable=True)


def retry_policy(max_retries: int, scope: CallScope | None) -> RetryPolicy:
    """Up to ``max_retries`` more attempts after retryable failures, waiting what the endpoint
    asked (``retry_after``) or backing off, within the turn's deadline."""
    return RetryPolicy(attempts=max_retries + 1, retry_on=_retryable, delay=_retry_delay,
                       deadline=None if scope is None else scope.deadline)


def retryable_status(status: int, retry_after: float | None) -> bool:
    """Whether an error reply is worth another attempt, as the openai SDK decides (408, 409,
    429, 5xx), unless the wait it asks for is longer than :data:`MAX_RETRY_AFTER`."""
    if retry_after is not None and retry_after > MAX_RETRY_AFTER:
        return False
    return status in _RETRY_STATUSES or status >= 500


# ---------------------------------------------------------------------- helpers
def _split_headers(headers: dict[str, str]) -> tuple[CIMultiDict[str], str]:
    """The headers every request of an endpoint sends, and the content type of its bodies
    (sent with each body). Names differing only in case are one header: the last one given
    wins, as it does when aiohttp merges a request's headers."""
    merged: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        merged[name] = value
    content_type = merged.pop("Content-Type", "application/json")
    return merged, content_type


def _total(seconds: float) -> aiohttp.ClientTimeout:
    """aiohttp's timeout for a whole attempt of ``seconds``, never rounded up to a whole
    second (aiohttp rounds a timeout of 5 s or more by default); a timeout of 0 or less cuts
    the attempt at once, as a timer would (aiohttp would take it for none)."""
    return aiohttp.ClientTimeout(total=max(seconds, 0.001), ceil_threshold=math.inf)


def _retryable(error: BaseException) -> bool:
    return isinstance(error, ModelCallError) and error.retryable


def _retry_delay(attempt: int, error: BaseException) -> float:
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None and 0 < retry_after <= MAX_RETRY_AFTER:
        return float(retry_after)
    return backoff(attempt)


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    """The whole body, refused once it passes :data:`MAX_REPLY_BYTES`."""
    if response.content_length is not None and response.content_length > MAX_REPLY_BYTES:
        raise _too_large()
    body = b""
    while chunk := await response.content.readany():
        body += chunk
        if len(body) > MAX_REPLY_BYTES:
            raise _too_large()
    return body


def _too_large() -> ModelCallError:
    return ModelCallError(f"the model endpoint's reply is larger than "
                          f"{MAX_REPLY_BYTES // 2 ** 20} MiB", code="llm.bad_response")


async def _server_sent_data(response: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    """The JSON payloads of the stream's events (the ``data:`` lines of each event joined);
    ends at ``[DONE]`` or at the end of the body."""
    data: list[bytes] = []
    total = 0
    async for line in response.content:
        total += len(line)
        if total > MAX_REPLY_BYTES:
            raise _too_large()
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
            continue
        if line or not data:
            continue  # a comment, an event name or an id; or a blank line after nothing
        payload, data = b"\n".join(data), []
        if payload == b"[DONE]":
            return
        yield _event_json(payload)
    if data and (payload := b"\n".join(data)) != b"[DONE]":
        yield _event_json(payload)


def _event_json(payload: bytes) -> Any:
    try:
        value = load_json(payload)
    except ValueError as exc:
        raise ModelCallError("the model endpoint streamed an event that is not JSON",
                             code="llm.bad_response") from exc
    if isinstance(value, dict) and isinstance(value.get("error"), dict | str):
        error = value["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ModelCallError(f"the model endpoint reported an error mid-stream: {message}",
                             code="llm.bad_response")
    return value


def _connection_error(exc: aiohttp.ClientError) -> ModelCallError:
    return ModelCallError(f"connection to the model endpoint failed: {_describe(exc)}",
                          code="llm.connection", retryable=True)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _status_error(status: int, headers: Any, raw: bytes) -> ModelCallError:
    """The error for an HTTP error reply, retryable as the openai SDK decides."""
    detail = raw.decode("utf-8", "replace").strip()[:500]
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = json.loads(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            detail = message
    retry_after = parse_retry_after(headers)
    should = headers.get("x-should-retry")
    if should in ("true", "false") and (retry_after is None or retry_after <= MAX_RETRY_AFTER):
        retryable = should == "true"
    else:
        retryable = retryable_status(status, retry_after)
    code = "llm.auth" if status == 401 else f"llm.http_{status}"
    if status == 500 and _UNPARSED_OUTPUT.search(detail):
        # llama.cpp: the model's own output did not parse as the tool-call format it was
        # asked for; a greedy model would only repeat it
        code, retryable = "llm.bad_response", False
    return ModelCallError(f"the model endpoint answered HTTP {status}: {detail}", code=code,
                          retryable=retryable, retry_after=retry_after, status=status)


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (a number or an HTTP date)."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        return delay / divisor if math.isfinite(delay) else MAX_RETRY_AFTER + 1
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        parsed = email.utils.parsedate_tz(headers.get("retry-after"))
        if parsed is not None:
            return float(email.utils.mktime_tz(parsed) - time.time())
    return None


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's CA certificates and certifi's: one context for every model endpoint of the
    process (building one reads the certificate files, about 30 ms of CPU)."""
    import ssl

    context = ssl.create_default_context()
    with contextlib.suppress(ImportError):
        import certifi

        context.load_verify_locations(certifi.where())
    return context


def _env_proxy(url: str) -> str | None:
    """The proxy for ``url`` from HTTP(S)_PROXY / NO_PROXY (read once, not per request)."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
