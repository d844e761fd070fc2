"""The one LLM client: any OpenAI-compatible chat completions endpoint, streaming or not.

A non-streamed call posts plain JSON over keep-alive connections (:mod:`.llm_http`, or
aiohttp behind a proxy) and parses the reply itself (no SDK models on the hot path); a
streamed call goes through the openai SDK. Both retry alike: 408, 409, 429, 5xx and
connection errors, with exponential backoff or the endpoint's ``Retry-After`` (up to two
minutes); a stream that already started is never retried. Every failure becomes
:class:`~subagents.exceptions.LLMError` with a stable code (``llm.timeout``,
``llm.connection``, ``llm.http_<status>``, ``llm.auth``, ``llm.bad_response``,
``llm.deadline``).

Inside :func:`call_deadline` every call - its retries and their waits included - ends by the
deadline: the request timeout shrinks to the time left, and a call still running then fails
with ``llm.deadline``.

Providers: ``openai`` (and ``litellm_proxy``, ``ollama``, ``self-hosted``, ``rasa``: any
OpenAI-compatible server at ``api_base``) post to ``{api_base}/chat/completions`` with a bearer
key; ``azure`` posts to ``{api_base}/openai/deployments/{deployment}/chat/completions
?api-version={api_version}`` with an ``api-key`` header. A model group with a ``router:`` is
served by :class:`RoutedLLMClient`; build clients with :func:`make_llm_client`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import functools
import json
import math
import os
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import structlog

from subagents.config._base import resolve_env
from subagents.config.endpoints import (
    CLIENT_MODEL_KEYS,
    ROUTING_MODEL_KEYS,
    ROUTING_STRATEGIES,
    normalize_model_keys,
)
from subagents.exceptions import ConfigError, ConfigIssue, LLMError
from subagents.llm import usage as _usage_prices
from subagents.llm._http import HTTPConnectionError, HTTPTimeoutError, KeepAlivePool
from subagents.llm._http import available as llm_http_available
from subagents.llm.routing import Deployment, Router, RouterSettings
from subagents.observability import traced_model_call

if TYPE_CHECKING:
    import ssl

    import aiohttp
    from openai import AsyncOpenAI

    from subagents.config.endpoints import EndpointsConfig, ModelConfig, ModelGroup

log = structlog.get_logger("subagents.llm.client")

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
    model: str | None = None
    """The model (for azure, the deployment) that answered."""


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
    api_version: str | None = None
    """Azure: the ``api-version`` query parameter (else ``AZURE_API_VERSION``)."""
    deployment: str | None = None
    """Azure: the deployment that is called (``model`` only names it)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers (``extra_headers``, ``organization``)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Merged into the request body as is."""
    routing: dict[str, Any] = field(default_factory=dict)
    """What a group's router reads: weight, rpm, tpm, input/output_cost_per_token."""
    group: RoutedGroup | None = field(default=None, repr=False, compare=False)
    """Set when these are the first model of a group with a router: the whole group."""

    @property
    def called_model(self) -> str:
        """What the request names: the deployment for azure, else the model."""
        return (self.deployment or self.model) if self.provider == "azure" else self.model

    def members(self) -> list[ModelSettings]:
        """Every model a client built from these settings may call (the group's, or these)."""
        return list(self.group.models) if self.group is not None else [self]

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ModelSettings:
        """Settings from a model config mapping, over the defaults for the openai provider."""
        data = normalize_model_keys({k: v for k, v in data.items() if v is not None})
        merged = dict(DEFAULT_MODEL_SETTINGS) if data.get("provider", "openai") == "openai" else {}
        merged.update(data)
        known = {"provider", "model", "api_base", "api_key", "timeout", "max_retries",
                 "model_group", "api_type", "api_version", "deployment"} | CLIENT_MODEL_KEYS
        headers = {str(k): str(v) for k, v in (merged.get("extra_headers") or {}).items()}
        if merged.get("organization"):
            headers.setdefault("OpenAI-Organization", str(merged["organization"]))
        return cls(model=str(merged.get("model") or merged.get("deployment") or ""),
                   provider=str(merged.get("provider") or "openai"),
                   api_base=merged.get("api_base"), api_key=merged.get("api_key"),
                   timeout=float(merged.get("timeout") or 7.0),
                   max_retries=int(merged.get("max_retries", 2)),
                   options={k: v for k, v in merged.items()
                            if k not in known and k not in ROUTING_MODEL_KEYS},
                   api_version=merged.get("api_version"), deployment=merged.get("deployment"),
                   headers=headers, extra_body=dict(merged.get("extra_body") or {}),
                   routing={k: v for k, v in merged.items() if k in ROUTING_MODEL_KEYS})


@dataclass
class RoutedGroup:
    """A model group whose calls a router spreads over its models."""

    id: str
    router: RouterSettings
    models: list[ModelSettings]


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
        return _group_settings(group, where)
    if not llm and endpoints and endpoints.model_groups:
        return resolve_model_settings({"model_group": endpoints.model_groups[0].id}, endpoints)
    return ModelSettings.from_mapping(dict(llm))


def _model_data(model: ModelConfig) -> dict[str, Any]:
    data = model.model_dump(exclude_none=True)
    if model.deployment:
        data["deployment"] = model.deployment
    data.update(model.request_options())
    return data


def _group_settings(group: ModelGroup, where: str) -> ModelSettings:
    """The first model without a router (as Rasa does); with one, every model, routed."""
    if group.router is None or len(group.models) == 1:
        return ModelSettings.from_mapping(_model_data(group.models[0]))
    try:
        router = RouterSettings.from_mapping(group.router)
    except (ValueError, TypeError) as exc:
        strategy = group.router.get("routing_strategy")
        code = "llm.router.unknown_strategy" if strategy is not None and \
            strategy not in ROUTING_STRATEGIES else "llm.router.invalid"
        raise ConfigError(ConfigIssue(
            code, f"model group {group.id!r}: {exc}",
            file=where or None, key="router.routing_strategy",
            hint="use simple-shuffle, least-busy, latency-based-routing, usage-based-routing "
                 "or cost-based-routing")) from exc
    models = []
    for model in group.models:
        data = _model_data(model)
        data.setdefault("max_retries", 0)  # the next model is the retry
        models.append(ModelSettings.from_mapping(data))
    models[0].group = RoutedGroup(group.id, router, models)
    return models[0]


def make_llm_client(settings: ModelSettings, *, name: str = "llm") -> LLMClient:
    """The client for ``settings``: a :class:`RoutedLLMClient` for a routed model group, else
    an :class:`LLMClient`."""
    if settings.group is not None and len(settings.group.models) > 1:
        return RoutedLLMClient(settings, name=name)
    return LLMClient(settings, name=name)


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
        variable = _KEY_VARIABLES.get(self.settings.provider)
        if variable and os.environ.get(variable):
            return os.environ[variable]
        if self.settings.provider == "ollama" or (self.settings.api_base
                                                  and self.settings.provider != "azure"):
            return "not-needed"  # local OpenAI-compatible servers often need no key
        variable = variable or "OPENAI_API_KEY"
        raise ConfigError(ConfigIssue(
            "llm.api_key_missing", f"no API key for model {self.settings.model!r}",
            hint=f"export {variable}, or set api_key: ${{MY_KEY}} / api_base on the model"))

    def _base_url(self) -> str:
        """Where ``/chat/completions`` lives (not used for azure)."""
        provider, base = self.settings.provider, self.settings.api_base
        if not base and provider == "openai":
            base = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if not base and provider == "ollama":
            base = "http://localhost:11434"
        if not base:
            raise ConfigError(ConfigIssue(
                "llm.api_base_missing", f"the {provider} model {self.settings.model!r} has no "
                "api_base", hint="set api_base to the server's address, e.g. "
                "http://localhost:8000/v1"))
        base = base.rstrip("/")
        if provider == "ollama" and not base.endswith("/v1"):
            base += "/v1"  # Ollama's OpenAI-compatible API
        return base

    def _azure(self) -> tuple[str, str, str]:
        """(endpoint, deployment, api version) of an azure model, with the env fallbacks."""
        settings = self.settings
        base = settings.api_base or os.environ.get("AZURE_API_BASE")
        version = settings.api_version or os.environ.get("AZURE_API_VERSION")
        for value, key, variable in ((base, "api_base", "AZURE_API_BASE"),
                                     (version, "api_version", "AZURE_API_VERSION")):
            if not value:
                raise ConfigError(ConfigIssue(
                    f"llm.azure.{key}_missing", f"the azure model {settings.called_model!r} "
                    f"has no {key}", hint=f"set {key} on the model or export {variable}"))
        assert base is not None
        assert version is not None
        return base.rstrip("/"), settings.called_model, version

    def _endpoint(self) -> tuple[str, dict[str, str]]:
        """The chat completions URL and the request headers."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.settings.provider == "azure":
            base, deployment, version = self._azure()
            url = (f"{base}/openai/deployments/{urllib.parse.quote(deployment, safe='')}"
                   f"/chat/completions?{urllib.parse.urlencode({'api-version': version})}")
            headers["api-key"] = self._api_key()
        else:
            url = self._base_url() + "/chat/completions"
            headers["Authorization"] = f"Bearer {self._api_key()}"
            if self.settings.provider == "openai":
                for variable, header in (("OPENAI_ORG_ID", "OpenAI-Organization"),
                                         ("OPENAI_PROJECT_ID", "OpenAI-Project")):
                    if os.environ.get(variable):
                        headers[header] = os.environ[variable]
        headers.update(self.settings.headers)
        return url, headers

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
            common: dict[str, Any] = {
                "api_key": self._api_key(), "timeout": self.settings.timeout,
                "max_retries": self.settings.max_retries, "http_client": http,
                "default_headers": self.settings.headers or None}
            if self.settings.provider == "azure":
                from openai import AsyncAzureOpenAI

                base, deployment, version = self._azure()
                self._client = AsyncAzureOpenAI(azure_endpoint=base, azure_deployment=deployment,
                                                api_version=version, **common)
            else:
                self._client = AsyncOpenAI(base_url=self._base_url(), **common)
        return self._client

    def _transport(self) -> _JsonTransport:
        if self._json is None or not self._json.usable():
            url, headers = self._endpoint()
            self._json = _JsonTransport(url, headers, self.settings.timeout,
                                        self.settings.max_retries)
        return self._json

    async def prepare(self) -> None:
        """Open the connection pool of plain (non-streamed) calls now, on the running event
        loop: the first turn then does not import the HTTP client or build the TLS context,
        and a server can count those objects as start-up state (see ``serve``). A model
        without its key or address still fails at its first call, with that error."""
        with contextlib.suppress(ConfigError):
            self._transport().open()

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
        body: dict[str, Any] = {"model": self.settings.called_model, "messages": messages,
                                **self.settings.options, **self.settings.extra_body}
        if tools:
            body["tools"] = tools
        started = time.perf_counter()
        left = _time_left()
        if left is not None and left <= 0:
            raise LLMError(f"no time was left in this turn to call the model "
                           f"{self.settings.model!r}", code="llm.deadline")
        try:
            if left is None:
                response = await self._call(body, stream, on_text, started, left)
            else:
                async with asyncio.timeout(left):
                    response = await self._call(body, stream, on_text, started, left)
        except TimeoutError as exc:
            raise LLMError(f"the model {self.settings.model!r} did not answer before the turn's "
                           f"deadline", code="llm.deadline") from exc
        response.total_time_ms = (time.perf_counter() - started) * 1000
        response.model = self.settings.called_model
        # log.bind().debug(...) is what log.debug(...) does through the lazy proxy, without the
        # failed attribute lookup first: a call filtered out costs a quarter
        log.bind().debug("llm.call.finished", model=self.settings.model, streamed=stream,
                         tool_calls=len(response.tool_calls),
                         duration_ms=round(response.total_time_ms, 1),
                         prompt_tokens=response.usage.prompt_tokens,
                         completion_tokens=response.usage.completion_tokens)
        return response

    async def _call(self, body: dict[str, Any], stream: bool, on_text: TextCallback | None,
                    started: float, left: float | None) -> LLMResponse:
        """One call with its retries; every failure becomes LLMError."""
        # the transport's own errors (bad settings) are not the reply's: made before the try
        transport = None if stream else self._transport()
        try:
            if transport is None:
                return await self._sdk_stream(body, on_text, started, left)
            return _parse_completion(await transport.post(body, left))
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
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
            # a body that is not JSON, or JSON of the wrong shape
            raise LLMError(f"the model endpoint sent a malformed response "
                           f"({type(exc).__name__})", code="llm.bad_response") from exc

    async def _sdk_stream(self, body: dict[str, Any], on_text: TextCallback | None,
                          started: float, left: float | None) -> LLMResponse:
        """A streamed call through the openai SDK, its errors as LLMError. Only streamed calls
        import the SDK (a third of a second of CPU): plain calls never need it."""
        import openai

        try:
            return await self._stream(body, on_text, started, left)
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


_NO_FAILOVER = frozenset({"llm.deadline", "llm.http_400", "llm.http_413", "llm.http_422"})
"""Failures another model of the group would not fix: no time left, or the request is at
fault."""


class RoutedLLMClient(LLMClient):
    """A client for a model group with a ``router:``: each call goes to the model the group's
    routing strategy picks; a failed call (connection error, timeout, 429, 5xx, ...) moves on
    to the next model within the same call, unless the streamed reply already reached the
    user. Spans, usage and logs name the model that was actually called.

    Args:
        settings: The group's first model, with :attr:`ModelSettings.group` set.
        name: The caller's name (spans, logs, recordings).
        rng: Random source of the strategies (seed it for reproducible routing).
        clock: Monotonic seconds for cool-downs and usage windows.
    """

    def __init__(self, settings: ModelSettings, *, name: str = "llm",
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        group = settings.group
        if group is None:
            raise ValueError("RoutedLLMClient needs the settings of a routed model group")
        self.name = name
        self.group_id = group.id
        self.members = [LLMClient(model, name=name) for model in group.models]
        self.router = Router(group.router, [_deployment(m) for m in group.models], rng=rng,
                             clock=clock)

    @property
    def settings(self) -> ModelSettings:
        """The group's first model (carrying the group); ``model`` names that one."""
        return self.members[0].settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        """Apply the request options changed on ``value`` to every model of the group."""
        old = self.members[0].settings.options
        changed = {k: v for k, v in value.options.items() if k not in old or old[k] != v}
        removed = set(old) - set(value.options)
        for member in self.members:
            kept = {k: v for k, v in member.settings.options.items() if k not in removed}
            member.settings = replace(member.settings, options={**kept, **changed})

    @property
    def client(self) -> AsyncOpenAI:
        """The SDK client of the group's first model."""
        return self.members[0].client

    async def prepare(self) -> None:
        """Open every model's connection pool (see :meth:`LLMClient.prepare`)."""
        for member in self.members:
            await member.prepare()

    async def close(self) -> None:
        """Close every model's client."""
        for member in self.members:
            await member.close()

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       *, stream: bool = False, on_text: TextCallback | None = None
                       ) -> LLMResponse:
        """One model call, routed; fails over to the group's next model on failure."""
        order = self.router.order()
        delivered = False

        async def relay(delta: str) -> None:
            nonlocal delivered
            delivered = True
            if on_text is not None:
                await on_text(delta)

        last: LLMError | None = None
        for attempt in range(self.router.attempts()):
            index = order[attempt % len(order)]
            if attempt and attempt % len(order) == 0 and not await _pause(attempt // len(order)):
                break
            member = self.members[index]
            self.router.started(index)
            started = time.perf_counter()
            try:
                response = await member.complete(messages, tools, stream=stream,
                                                 on_text=relay if stream else None)
            except LLMError as exc:
                code = str(getattr(exc, "code", "llm.request_failed"))
                self.router.failed(index, code, member.settings.timeout)
                if delivered or code in _NO_FAILOVER:
                    raise
                log.warning("llm.route.failover", group=self.group_id,
                            model=member.settings.called_model, code=code, attempt=attempt + 1)
                last = exc
                continue
            finally:
                self.router.finished(index)
            seconds = (response.time_to_first_token_ms if stream and
                       response.time_to_first_token_ms is not None
                       else (time.perf_counter() - started) * 1000) / 1000
            self.router.succeeded(index, seconds, response.usage.total_tokens)
            return response
        assert last is not None
        try:
            raise last
        finally:
            last = None  # the raised error's traceback holds this frame: no cycle through it


async def _pause(round_: int) -> bool:
    """Back off before trying the group's models again; False when the turn has no time."""
    delay = _retry_delay(None, round_ - 1)
    left = _time_left()
    if left is not None and left <= delay:
        return False
    await asyncio.sleep(delay)
    return True


def _deployment(settings: ModelSettings) -> Deployment:
    routing = settings.routing
    cost: float | None = None
    if "input_cost_per_token" in routing or "output_cost_per_token" in routing:
        cost = float(routing.get("input_cost_per_token") or 0) + float(
            routing.get("output_cost_per_token") or 0)
    elif settings.model in (prices := _usage_prices.model_prices()):
        cost = sum(prices[settings.model]) / 1_000_000

    def number(key: str) -> Any:
        value = routing.get(key)
        return None if value is None else float(value) if key == "weight" else int(value)

    return Deployment(model=settings.called_model, weight=number("weight"), rpm=number("rpm"),
                      tpm=number("tpm"), cost_per_token=cost)

def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    return Usage(prompt_tokens=raw.prompt_tokens or 0, completion_tokens=raw.completion_tokens or 0)


def _tool_call(call_id: str | None, name: str | None, raw: str | None, index: int) -> ToolCall:
    raw = raw or ""
    if raw == "{}":  # the common call without arguments: no decoder needed
        return ToolCall(call_id or f"call_{index}", name or "", raw, {})
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(call_id or f"call_{index}", name or "", raw, None, str(exc))
    if not isinstance(parsed, dict):
        return ToolCall(call_id or f"call_{index}", name or "", raw, None,
                        "the arguments must be a JSON object")
    return ToolCall(call_id or f"call_{index}", name or "", raw, parsed)


_KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "azure": "AZURE_API_KEY",
                  "litellm_proxy": "LITELLM_PROXY_API_KEY"}
"""The environment variable a provider's key comes from when the model sets no api_key."""
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
    """POSTs chat-completion bodies as plain JSON over keep-alive connections.

    The connections are :mod:`subagents.llm._http`'s lean HTTP/1.1 pool (half aiohttp's CPU
    per call), or one aiohttp session when a proxy applies to the endpoint, httptools is
    missing, or ``SUBAGENTS_MODEL_HTTP_CLIENT=aiohttp`` is set. Neither probes every pooled
    socket per request, and the reply is parsed straight from JSON; both matter once hundreds
    of conversations share one process.
    """

    def __init__(self, url: str, headers: dict[str, str], timeout: float,
                 max_retries: int) -> None:
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.max_retries = max_retries
        self.proxy = _env_proxy(self.url)
        self._session: aiohttp.ClientSession | None = None
        self._pool: KeepAlivePool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeout: aiohttp.ClientTimeout | None = None
        """The timeouts of a call without a deadline (built once)."""
        for name, value in headers.items():
            if any(c in name or c in str(value) for c in "\r\n\0"):
                raise LLMError(f"the model's request header {name!r} has a line break or a "
                               "NUL character: fix extra_headers (or the key) in its "
                               "settings", code="llm.header_invalid")
        # credentials in the URL (user:password@host) are aiohttp's to send
        self.lean = self.proxy is None and "@" not in urllib.parse.urlsplit(url).netloc \
            and model_http_client() == "lean"
        """Whether the calls go through the lean pool (else through aiohttp)."""
        if self.lean:
            try:
                self._pool = KeepAlivePool(url, headers, ssl_context=_tls_context(),
                                           limit=1000, idle_timeout=30)
            except ValueError as exc:
                raise LLMError(f"the model endpoint {url!r} is not an http(s) URL: fix "
                               "api_base in its settings", code="llm.api_base_invalid") from exc

    def usable(self) -> bool:
        """False once the connections belong to another (or a closed) event loop."""
        return self._loop is None or self._loop is _running_loop()

    def open(self) -> None:
        """Create the connection pool on the running event loop (connections open on use)."""
        if self.lean:
            self._open_pool()
        else:
            self._open_session()

    def _open_pool(self) -> KeepAlivePool:
        assert self._pool is not None
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._pool

    def _open_session(self) -> aiohttp.ClientSession:
        """The keep-alive aiohttp session, created on first use on the running event loop."""
        if self._session is None:
            import aiohttp

            self._loop = asyncio.get_running_loop()
            # one idle connection kept per concurrent call: no connection churn under load
            connector = aiohttp.TCPConnector(limit=1000, keepalive_timeout=30,
                                             ssl=_tls_context())
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
                if self.lean:
                    return await self._lean_attempt(data, left)
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

    async def _lean_attempt(self, data: bytes, left: float | None) -> Any:
        seconds = self.timeout if left is None else max(0.01, min(self.timeout, left))
        try:
            response = await self._open_pool().post(data, seconds)
        except HTTPTimeoutError as exc:
            raise _TimedOutError(str(exc)) from exc
        except HTTPConnectionError as exc:
            raise _ConnectionFailedError(str(exc)) from exc
        if response.status >= 400:
            raise _status_error(response.status, response.headers, response.body)
        return json.loads(response.body)

    async def _attempt(self, data: bytes, left: float | None) -> Any:
        import aiohttp

        if left is None:
            if self._timeout is None:
                self._timeout = aiohttp.ClientTimeout(total=None, connect=self.timeout,
                                                      sock_read=self.timeout)
            timeout = self._timeout
        else:
            seconds = max(0.01, min(self.timeout, left))
            timeout = aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)
        try:
            async with self._open_session().post(self.url, data=data, headers=self.headers,
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
        if self._pool is not None and self.usable():
            await self._pool.close()
        self._pool = None


HTTP_CLIENT_VARIABLE = "SUBAGENTS_MODEL_HTTP_CLIENT"


def model_http_client() -> str:
    """The HTTP client of plain model calls: ``lean`` (:mod:`.llm_http`) unless
    ``SUBAGENTS_MODEL_HTTP_CLIENT=aiohttp`` or httptools is missing, then ``aiohttp``.

    Raises:
        LLMError: the variable names no client (``llm.http_client_invalid``), or asks for
            ``lean`` without httptools (``llm.http_client_unavailable``).
    """
    choice = os.environ.get(HTTP_CLIENT_VARIABLE, "").strip().lower()
    if choice == "aiohttp":
        return "aiohttp"
    if choice not in ("", "auto", "lean"):
        raise LLMError(f"{HTTP_CLIENT_VARIABLE}={choice!r} names no HTTP client: set it to "
                       "auto (the default), lean or aiohttp, or unset it",
                       code="llm.http_client_invalid")
    if not llm_http_available():
        if choice == "lean":
            raise LLMError(f"{HTTP_CLIENT_VARIABLE}=lean needs httptools: pip install "
                           "'subagents[fast]', or unset it", code="llm.http_client_unavailable")
        return "aiohttp"
    return "lean"


class _RetryableStatusError(_HTTPStatusError):
    def __init__(self, status: int, detail: str, retry_after: float | None) -> None:
        super().__init__(status, detail)
        self.retry_after = retry_after


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's CA certificates and certifi's: one context for every model client of the
    process (building one reads the certificate files, about 30 ms of CPU)."""
    import ssl

    context = ssl.create_default_context()
    with contextlib.suppress(ImportError):
        import certifi

        context.load_verify_locations(certifi.where())
    return context


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
        return LLMResponse(None, [], usage)
    if not isinstance(choices, list) or not isinstance(choice := choices[0], dict):
        raise TypeError("choices is not a list of objects")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise TypeError("the message is not an object")
    text = message.get("content")
    raw_calls = message.get("tool_calls") or []
    if (text is not None and not isinstance(text, str)) or not isinstance(raw_calls, list):
        raise TypeError("the message has a content or tool_calls of the wrong type")
    calls = []
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            raise TypeError("a tool call has no function object")
        calls.append(_tool_call(raw.get("id"), function.get("name"), function.get("arguments"),
                                index))
    finish = choice.get("finish_reason")
    return LLMResponse(text, calls, usage, finish if isinstance(finish, str) else None)


def _usage_json(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(prompt if isinstance(prompt, int) else 0,
                 completion if isinstance(completion, int) else 0)
