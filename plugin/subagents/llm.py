"""The one LLM client: any OpenAI-compatible chat completions endpoint, streaming or not.

A non-streamed call posts plain JSON through one keep-alive aiohttp session per client and
parses the reply itself (no SDK models on the hot path); a streamed call goes through the
openai SDK. Both retry alike: 408, 409, 429, 5xx and connection errors, with exponential
backoff or the endpoint's ``Retry-After`` (up to two minutes); a stream that already started
is never retried. Every failure becomes :class:`~subagents.exceptions.LLMError` with a
stable code (``llm.timeout``, ``llm.connection``, ``llm.http_<status>``, ``llm.auth``,
``llm.bad_response``, ``llm.deadline``).

Inside :func:`call_deadline` every call - its retries and their waits included - ends by the
deadline: the request timeout shrinks to the time left, and a call still running then fails
with ``llm.deadline``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import json
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from .config._base import resolve_env
from .exceptions import ConfigError, ConfigIssue, LLMError
from .observability import traced_model_call

if TYPE_CHECKING:
    import aiohttp
    from openai import AsyncOpenAI

    from .config.endpoints import EndpointsConfig

log = structlog.get_logger("subagents.llm")

TextCallback = Callable[[str], Awaitable[None]]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "subagents_llm_deadline", default=None)


@contextlib.contextmanager
def call_deadline(seconds: float | None) -> Iterator[None]:
    """Model calls made inside (in this task and the tasks it starts) end within ``seconds``.

    A deadline already in force is only ever shortened.
    """
    if seconds is None:
        yield
        return
    deadline = time.monotonic() + seconds
    current = _DEADLINE.get()
    token = _DEADLINE.set(deadline if current is None else min(current, deadline))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _time_left() -> float | None:
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()

DEFAULT_MODEL_SETTINGS: dict[str, Any] = {
    "provider": "openai", "model": "gpt-4.1-mini", "temperature": 1.0,
    "max_completion_tokens": 256, "timeout": 7.0,
}


@dataclass
class ToolCall:
    """One tool call of a model response; ``arguments`` is None when the JSON did not parse."""

    id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None
    parse_error: str | None = None


@dataclass
class Usage:
    """Tokens used by model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        """Add ``other``'s token counts to these."""
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass
class LLMResponse:
    """One model reply: text and tool calls, token usage and timings."""

    text: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    streamed: bool = False
    time_to_first_token_ms: float | None = None
    total_time_ms: float = 0.0


@dataclass
class ModelSettings:
    """Resolved settings of one model (from a model group or an inline ``llm:`` mapping)."""

    model: str
    provider: str = "openai"
    api_base: str | None = None
    api_key: str | None = None
    """``${ENV}`` reference or None (then OPENAI_API_KEY); resolved when the client is built."""
    timeout: float = 7.0
    max_retries: int = 2
    options: dict[str, Any] = field(default_factory=dict)
    """Request-body options: temperature, max_completion_tokens, reasoning_effort, ..."""

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ModelSettings:
        """Settings from a model config mapping, over the defaults for the openai provider."""
        merged = dict(DEFAULT_MODEL_SETTINGS) if data.get("provider", "openai") == "openai" else {}
        merged.update({k: v for k, v in data.items() if v is not None})
        known = {"provider", "model", "api_base", "api_key", "timeout", "max_retries",
                 "model_group", "api_type", "api_version"}
        return cls(model=str(merged.get("model", "")), provider=str(merged.get("provider")),
                   api_base=merged.get("api_base"), api_key=merged.get("api_key"),
                   timeout=float(merged.get("timeout") or 7.0),
                   max_retries=int(merged.get("max_retries", 2)),
                   options={k: v for k, v in merged.items() if k not in known})


def resolve_model_settings(llm: dict[str, Any] | None, endpoints: EndpointsConfig | None,
                           *, where: str = "") -> ModelSettings:
    """``{model_group: id}`` -> the group's first model; inline mapping as is; None -> defaults."""
    llm = llm or {}
    if "model_group" in llm:
        group = endpoints.model_group(str(llm["model_group"])) if endpoints else None
        if group is None:
            raise ConfigError(ConfigIssue(
                "agent.validation.llm.unknown_model_group",
                f"model group {llm['model_group']!r} cannot be resolved", file=where or None,
                key="llm.model_group", hint="define it under model_groups in endpoints.yml"))
        first = group.models[0]
        data = first.model_dump(exclude_none=True)
        data.update(first.request_options())
        return ModelSettings.from_mapping(data)
    if not llm and endpoints and endpoints.model_groups:
        return resolve_model_settings({"model_group": endpoints.model_groups[0].id}, endpoints)
    return ModelSettings.from_mapping(dict(llm))


class LLMClient:
    """Async chat-completions client for one model."""

    def __init__(self, settings: ModelSettings, *, name: str = "llm") -> None:
        self.settings = settings
        self.name = name
        self._client: AsyncOpenAI | None = None
        self._json: _JsonTransport | None = None

    def _api_key(self) -> str:
        key = self.settings.api_key
        if key:
            return resolve_env(key, what=f"the api_key of model {self.settings.model!r}")
        if os.environ.get("OPENAI_API_KEY"):
            return os.environ["OPENAI_API_KEY"]
        if self.settings.api_base:
            return "not-needed"  # local OpenAI-compatible servers often need no key
        raise ConfigError(ConfigIssue(
            "llm.api_key_missing", f"no API key for model {self.settings.model!r}",
            hint="export OPENAI_API_KEY, or set api_key: ${MY_KEY} / api_base on the model"))

    @property
    def client(self) -> AsyncOpenAI:
        """The OpenAI-compatible client, created on first use."""
        if self._client is None:
            import httpx2
            from openai import AsyncOpenAI, DefaultAsyncHttpxClient

            # keep as many idle connections as the pool may open: under many concurrent
            # conversations the SDK default (100) makes the pool churn connections
            http = DefaultAsyncHttpxClient(limits=httpx2.Limits(
                max_connections=1000, max_keepalive_connections=1000, keepalive_expiry=30))
            self._client = AsyncOpenAI(api_key=self._api_key(), base_url=self.settings.api_base,
                                       timeout=self.settings.timeout,
                                       max_retries=self.settings.max_retries, http_client=http)
        return self._client

    def _transport(self) -> _JsonTransport:
        if self._json is None or not self._json.usable():
            base = (self.settings.api_base or os.environ.get("OPENAI_BASE_URL")
                    or "https://api.openai.com/v1")
            self._json = _JsonTransport(base, self._api_key(), self.settings.timeout,
                                        self.settings.max_retries)
        return self._json

    async def close(self) -> None:
        """Close the underlying client if one was created."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._json is not None:
            await self._json.close()
            self._json = None

    @traced_model_call
    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       *, stream: bool = False, on_text: TextCallback | None = None
                       ) -> LLMResponse:
        """One model call. With ``stream``, ``on_text`` receives each text delta as it arrives."""
        body: dict[str, Any] = {"model": self.settings.model, "messages": messages,
                                **self.settings.options}
        if tools:
            body["tools"] = tools
        started = time.perf_counter()
        left = _time_left()
        if left is not None and left <= 0:
            raise LLMError(f"no time was left in this turn to call the model "
                           f"{self.settings.model!r}", code="llm.deadline")
        try:
            async with asyncio.timeout(left):
                response = await self._call(body, stream, on_text, started, left)
        except TimeoutError as exc:
            raise LLMError(f"the model {self.settings.model!r} did not answer before the turn's "
                           f"deadline", code="llm.deadline") from exc
        response.total_time_ms = (time.perf_counter() - started) * 1000
        log.debug("llm.call.finished", model=self.settings.model, streamed=stream,
                  tool_calls=len(response.tool_calls), duration_ms=round(response.total_time_ms, 1),
                  prompt_tokens=response.usage.prompt_tokens,
                  completion_tokens=response.usage.completion_tokens)
        return response

    async def _call(self, body: dict[str, Any], stream: bool, on_text: TextCallback | None,
                    started: float, left: float | None) -> LLMResponse:
        """One call with its retries; every failure becomes LLMError."""
        import openai

        try:
            if stream:
                return await self._stream(body, on_text, started, left)
            return _parse_completion(await self._transport().post(body, left))
        except _HTTPStatusError as exc:
            raise LLMError(f"the model endpoint answered HTTP {exc.status}: {exc.detail}",
                           code="llm.auth" if exc.status == 401 else f"llm.http_{exc.status}"
                           ) from exc
        except _TimedOutError as exc:
            raise LLMError(f"the model {self.settings.model!r} did not answer within "
                           f"{self.settings.timeout:g}s", code="llm.timeout") from exc
        except _ConnectionFailedError as exc:
            raise LLMError(f"connection to the model endpoint failed: {exc}",
                           code="llm.connection") from exc
        except openai.APITimeoutError as exc:
            raise LLMError(f"the model {self.settings.model!r} did not answer within "
                           f"{self.settings.timeout:g}s", code="llm.timeout") from exc
        except openai.APIConnectionError as exc:
            raise LLMError(f"connection to the model endpoint failed: {exc.__cause__ or exc}",
                           code="llm.connection") from exc
        except openai.AuthenticationError as exc:
            raise LLMError(f"the model endpoint refused the credentials: {exc.message}",
                           code="llm.auth") from exc
        except openai.APIStatusError as exc:
            raise LLMError(f"the model endpoint answered HTTP {exc.status_code}: {exc.message}",
                           code=f"llm.http_{exc.status_code}") from exc
        except openai.OpenAIError as exc:
            raise LLMError(f"model call failed: {exc}") from exc
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
            # a body that is not JSON, or JSON of the wrong shape
            raise LLMError(f"the model endpoint sent a malformed response "
                           f"({type(exc).__name__})", code="llm.bad_response") from exc

    async def _post(self, body: dict[str, Any], *, stream: bool,
                    left: float | None = None) -> Any:
        """POST the (already plain-JSON) body; skips the SDK's per-request TypedDict transform,
        which costs tens of milliseconds per call on long conversations, and keeps its retry,
        timeout and error handling."""
        from openai import AsyncStream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        if stream:
            body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        from openai._types import RequestOptions

        options: RequestOptions = {}
        if left is not None:  # never wait past the deadline for one attempt
            options["timeout"] = max(0.01, min(self.settings.timeout, left))
        return await self.client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                      options=options, stream=stream,
                                      stream_cls=AsyncStream[ChatCompletionChunk])

    async def _stream(self, body: dict[str, Any], on_text: TextCallback | None,
                      started: float, left: float | None) -> LLMResponse:
        stream = await self._post(body, stream=True, left=left)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage = Usage()
        finish: str | None = None
        first: float | None = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = _usage(chunk.usage)
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            delta = choice.delta
            if delta.content:
                if first is None:
                    first = time.perf_counter()
                text.append(delta.content)
                if on_text is not None:
                    await on_text(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] = slot["name"] or (tc.function.name or "")
                    slot["args"] += tc.function.arguments or ""
        tool_calls = [_tool_call(c["id"], c["name"], c["args"], index)
                      for index, c in sorted(calls.items())]
        return LLMResponse(text="".join(text) if text else None, tool_calls=tool_calls,
                           usage=usage, finish_reason=finish, streamed=True,
                           time_to_first_token_ms=(first - started) * 1000 if first else None)


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    return Usage(prompt_tokens=raw.prompt_tokens or 0, completion_tokens=raw.completion_tokens or 0)


def _tool_call(call_id: str | None, name: str | None, raw: str | None, index: int) -> ToolCall:
    raw = raw or ""
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(call_id or f"call_{index}", name or "", raw, None, str(exc))
    if not isinstance(parsed, dict):
        return ToolCall(call_id or f"call_{index}", name or "", raw, None,
                        "the arguments must be a JSON object")
    return ToolCall(call_id or f"call_{index}", name or "", raw, parsed)


_RETRY_STATUSES = frozenset({408, 409, 429})
_MAX_RETRY_AFTER = 120.0


class _HTTPStatusError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class _ConnectionFailedError(Exception):
    pass


class _TimedOutError(Exception):
    pass


class _JsonTransport:
    """POSTs chat-completion bodies as plain JSON over one keep-alive aiohttp session.

    aiohttp's pool hands out an idle connection without probing every pooled socket, and the
    reply is parsed straight from JSON; both matter once hundreds of conversations share one
    process.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}",
                        "Content-Type": "application/json", "Accept": "application/json"}
        for variable, header in (("OPENAI_ORG_ID", "OpenAI-Organization"),
                                 ("OPENAI_PROJECT_ID", "OpenAI-Project")):
            if os.environ.get(variable):
                self.headers[header] = os.environ[variable]
        self.timeout = timeout
        self.max_retries = max_retries
        self.proxy = _env_proxy(self.url)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def usable(self) -> bool:
        """False once the session belongs to another (or a closed) event loop."""
        return self._loop is None or self._loop is _running_loop()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            import ssl

            import aiohttp

            context = ssl.create_default_context()
            with contextlib.suppress(ImportError):
                import certifi

                context.load_verify_locations(certifi.where())
            self._loop = asyncio.get_running_loop()
            # one idle connection kept per concurrent call: no connection churn under load
            connector = aiohttp.TCPConnector(limit=1000, keepalive_timeout=30, ssl=context)
            # the proxy comes from the environment once (trust_env would re-read it and
            # ~/.netrc in a worker thread on every request)
            self._session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
        return self._session

    async def post(self, body: dict[str, Any], left: float | None) -> Any:
        """The decoded JSON reply; retries like the openai SDK; raises the errors above."""
        data = json.dumps(body).encode()
        attempt = 0
        while True:
            try:
                return await self._attempt(data, left)
            except (_HTTPStatusError, _ConnectionFailedError, _TimedOutError) as exc:
                retry_after = (exc.retry_after if isinstance(exc, _RetryableStatusError)
                               else None)
                if attempt >= self.max_retries or (
                        isinstance(exc, _HTTPStatusError)
                        and not isinstance(exc, _RetryableStatusError)):
                    raise
            await asyncio.sleep(_retry_delay(retry_after, attempt))
            attempt += 1
            left = _time_left()

    async def _attempt(self, data: bytes, left: float | None) -> Any:
        import aiohttp

        seconds = self.timeout if left is None else max(0.01, min(self.timeout, left))
        timeout = aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)
        try:
            async with self._open().post(self.url, data=data, headers=self.headers,
                                         timeout=timeout, proxy=self.proxy) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise _status_error(response.status, response.headers, raw)
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise _TimedOutError(str(exc) or "timed out") from exc
        except aiohttp.ClientError as exc:
            raise _ConnectionFailedError(str(exc) or type(exc).__name__) from exc
        return json.loads(raw)

    async def close(self) -> None:
        if self._session is not None and self.usable():
            await self._session.close()
        self._session = None


class _RetryableStatusError(_HTTPStatusError):
    def __init__(self, status: int, detail: str, retry_after: float | None) -> None:
        super().__init__(status, detail)
        self.retry_after = retry_after


def _env_proxy(url: str) -> str | None:
    """The proxy for ``url`` from HTTP(S)_PROXY / NO_PROXY, as the openai SDK would use."""
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _status_error(status: int, headers: Any, raw: bytes) -> _HTTPStatusError:
    """The error for an HTTP error reply, retryable as the openai SDK decides."""
    detail = raw.decode("utf-8", "replace").strip()[:500]
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = json.loads(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            detail = message
    retry_after = _retry_after(headers)
    should = headers.get("x-should-retry")
    if retry_after is not None and retry_after > _MAX_RETRY_AFTER:
        retryable = False
    elif should in ("true", "false"):
        retryable = should == "true"
    else:
        retryable = status in _RETRY_STATUSES or status >= 500
    if retryable:
        return _RetryableStatusError(status, detail, retry_after)
    return _HTTPStatusError(status, detail)


def _retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (a number or an HTTP date)."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        return delay / divisor if math.isfinite(delay) else _MAX_RETRY_AFTER + 1
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        parsed = email.utils.parsedate_tz(headers.get("retry-after"))
        if parsed is not None:
            return float(email.utils.mktime_tz(parsed) - time.time())
    return None


def _retry_delay(retry_after: float | None, attempt: int) -> float:
    if retry_after is not None and 0 < retry_after <= _MAX_RETRY_AFTER:
        return retry_after
    return min(0.5 * 2.0 ** min(attempt, 1000), 8.0) * (1 - 0.25 * random.random())


def _parse_completion(data: Any) -> LLMResponse:
    """An LLMResponse from a decoded chat completion; a wrong shape raises TypeError."""
    if not isinstance(data, dict):
        raise TypeError("the completion is not a JSON object")
    choices = data.get("choices")
    usage = _usage_json(data.get("usage"))
    if not choices:
        return LLMResponse(text=None, usage=usage)
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise TypeError("choices is not a list of objects")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise TypeError("the message is not an object")
    text = message.get("content")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(text, str | None) or not isinstance(raw_calls, list):
        raise TypeError("the message has a content or tool_calls of the wrong type")
    calls = []
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            raise TypeError("a tool call has no function object")
        calls.append(_tool_call(raw.get("id"), function.get("name"), function.get("arguments"),
                                index))
    finish = choices[0].get("finish_reason")
    return LLMResponse(text=text, tool_calls=calls, usage=usage,
                       finish_reason=finish if isinstance(finish, str) else None)


def _usage_json(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(prompt_tokens=prompt if isinstance(prompt, int) else 0,
                 completion_tokens=completion if isinstance(completion, int) else 0)
