"""The one LLM client: any OpenAI-compatible chat completions endpoint, streaming or not.

Retries (429, 5xx, connection errors, with backoff) are the openai SDK's; a stream that already
started is never retried. Every failure becomes :class:`~subagents.exceptions.LLMError` with a
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
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from .config._base import resolve_env
from .exceptions import ConfigError, ConfigIssue, LLMError
from .observability import traced_model_call

if TYPE_CHECKING:
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
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class LLMResponse:
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

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

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
            return self._parse(await self._post(body, stream=False, left=left))
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

    def _parse(self, completion: Any) -> LLMResponse:
        if not completion.choices:
            return LLMResponse(text=None, usage=_usage(completion.usage))
        choice = completion.choices[0]
        calls = [_tool_call(tc.id, tc.function.name, tc.function.arguments, i)
                 for i, tc in enumerate(choice.message.tool_calls or [])]
        return LLMResponse(text=choice.message.content, tool_calls=calls,
                           usage=_usage(completion.usage), finish_reason=choice.finish_reason)

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
