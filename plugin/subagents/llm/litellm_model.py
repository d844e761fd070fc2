"""Providers with an API of their own (Anthropic Messages, Gemini and Vertex AI
``generateContent``, Bedrock Converse, ...), reached through LiteLLM - the library Rasa uses for
them - as a :class:`~subagents.llm.model.Model`.

LiteLLM is an optional dependency (``pip install 'subagents[providers]'``), imported the first
time such a model is prepared or called, never before: a project with OpenAI-compatible models
only does not pay for it (its import costs about 4 s of CPU and 200 MB). Before that import its
side effects are switched off: no ``.env`` loading (``LITELLM_MODE=PRODUCTION``), no fetch of
its model map or of tokenizers (``LITELLM_LOCAL_MODEL_COST_MAP``, ``LITELLM_OFFLINE_MODE``), no
help banners on errors, no log lines printed twice.

The call is Rasa's: ``<provider>/<model>`` with every other key of the model passed as is
(``vertex_project``, ``aws_region_name``, ...) and ``drop_params: false``; ``max_tokens`` is
always sent (:data:`~subagents.config.providers.DEFAULT_MAX_TOKENS` unless the model sets it).
What LiteLLM would do on its own is ours instead: retries (none in LiteLLM; ours as for every
model), the model's ``timeout`` as the deadline of the whole reply within the turn's deadline,
and errors mapped to our codes (:func:`model_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import re
import time
from types import ModuleType
from typing import Any

import structlog

from subagents.config import providers
from subagents.config._base import resolve_env
from subagents.config.endpoints import REQUEST_OPTIONS
from subagents.exceptions import LLMError
from subagents.llm.http import (
    ModelCallError,
    Timing,
    attempt_timing,
    parse_retry_after,
    retry_policy,
    retryable_status,
    timed_out,
)
from subagents.llm.model import LLMResponse, TextCallback
from subagents.llm.openai_compat import StreamMerger, parse_completion
from subagents.llm.settings import ModelSettings, model_name, resolved
from subagents.retry import retry_call
from subagents.types import CallScope, ChatMessage, JsonObject

log = structlog.get_logger("subagents.llm")

OFFLINE_ENVIRONMENT = {"LITELLM_MODE": "PRODUCTION", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                       "LITELLM_OFFLINE_MODE": "true"}
"""Set (unless already set) before LiteLLM is imported: no ``.env`` loading, no downloads."""
_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
_BROKEN_STREAM = re.compile(r"stream ended before|error parsing chunk", re.I)
_AWS_AUTH = re.compile(r"UnrecognizedClientException|InvalidSignatureException|"
                       r"ExpiredToken|security token included in the request is invalid", re.I)
_RETRY_DELAY = re.compile(r"\"?retryDelay\"?\s*:\s*\"?(\d+(?:\.\d+)?)s")
_MAX_DETAIL = 400
_REPORT_MARGIN = 2.0
"""Seconds past an attempt's time that LiteLLM gets to report its own timeout of a request."""


class _Loaded:
    """The imported LiteLLM module, and the models that use its shared HTTP clients."""

    module: ModuleType | None = None
    users: set[int] = set()


def _import_litellm() -> ModuleType:
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    module: Any = importlib.import_module("litellm")
    module.suppress_debug_info = True  # no "Give Feedback / Get Help" banner on errors
    for name in _LOGGERS:  # its own stderr handlers would print every line twice
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        if not os.environ.get("LITELLM_LOG"):  # its own switch; else a line per call at INFO
            logger.setLevel(logging.WARNING)
    return module  # type: ignore[no-any-return]


async def load_litellm() -> ModuleType:
    """LiteLLM, imported once per process in a worker thread (the event loop keeps serving).

    Raises:
        ModelCallError: ``llm.provider.extra_missing`` when it is not installed.
    """
    if _Loaded.module is not None:
        return _Loaded.module
    if not providers.litellm_installed():
        raise ModelCallError(f"this provider is reached through LiteLLM, which is not "
                             f"installed: {providers.EXTRA_INSTALL}",
                             code="llm.provider.extra_missing")
    try:
        _Loaded.module = await asyncio.to_thread(_import_litellm)
    except ImportError as exc:
        raise ModelCallError(f"LiteLLM could not be imported ({exc}): reinstall it with "
                             f"{providers.EXTRA_INSTALL}",
                             code="llm.provider.extra_missing") from exc
    return _Loaded.module


class LiteLLMModel:
    """A :class:`~subagents.llm.model.Model` for a provider reached through LiteLLM.

    Args:
        settings: The model's settings; ``provider`` is LiteLLM's name for the provider.
        name: Who calls it (spans, logs, recordings).
    """

    def __init__(self, settings: ModelSettings, *, name: str = "llm") -> None:
        self._settings = settings
        self.name = name
        self._kwargs: dict[str, Any] | None = None

    @property
    def settings(self) -> ModelSettings:
        """The model's settings; replacing them applies to the next call."""
        return self._settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        self._settings = value
        self._kwargs = None

    @property
    def streams(self) -> bool:
        """Whether LiteLLM can stream this provider's replies (else a streamed call is made
        plain and its whole text handed on at once)."""
        return self.settings.provider not in providers.LITELLM_NO_STREAMING

    def call_kwargs(self) -> dict[str, Any]:
        """What every call passes to LiteLLM besides the messages (``${VAR}`` resolved; the
        key is LiteLLM's to read from the provider's variable when the model names none)."""
        if self._kwargs is None:
            settings = self.settings
            what = f"model {settings.model!r}"
            kwargs: dict[str, Any] = {
                "drop_params": False, **resolved(settings, settings.options, "option"),
                "model": providers.litellm_model(settings.provider, model_name(settings)),
                "num_retries": 0, "max_retries": 0}
            for key in ("api_base", "api_key", "api_version"):
                value = getattr(settings, key)
                if value:
                    kwargs[key] = resolve_env(value, what=f"the {key} of {what}")
            if settings.headers:
                kwargs["extra_headers"] = {
                    k: resolve_env(v, what=f"the header {k} of {what}")
                    for k, v in settings.headers.items()}
            if settings.extra_body:
                kwargs["extra_body"] = resolved(settings, settings.extra_body, "extra_body")
            if "max_tokens" not in kwargs and "max_completion_tokens" not in kwargs:
                kwargs["max_tokens"] = providers.DEFAULT_MAX_TOKENS
            self._kwargs = kwargs
        return self._kwargs

    async def prepare(self) -> None:
        """Import LiteLLM now rather than at the first call; a missing extra is reported by the
        first call instead."""
        try:
            await load_litellm()
        except LLMError as exc:
            log.debug("llm.prepare.skipped", model=self.settings.model, error_code=exc.code)
            return
        _Loaded.users.add(id(self))

    async def close(self) -> None:
        """Close LiteLLM's HTTP clients once no other LiteLLM model uses them (they are shared
        by every LiteLLM model of the event loop)."""
        _Loaded.users.discard(id(self))
        module = _Loaded.module
        if module is None or _Loaded.users:
            return
        await module.close_litellm_async_clients()
        module.in_memory_llm_clients_cache.flush_cache()

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """One chat completion (see :class:`~subagents.llm.model.Model`)."""
        litellm = await load_litellm()
        _Loaded.users.add(id(self))
        request = {**self.call_kwargs(), "messages": messages}
        if options:
            if "max_completion_tokens" in options:
                request.pop("max_tokens", None)
            request.update(options)
        if tools:
            request["tools"] = tools
        streamed = stream and self.streams
        if streamed:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}
        started = time.perf_counter()
        response = await retry_call(
            lambda: self._attempt(litellm, request, on_text if streamed else None, scope,
                                  started),
            retry_policy(self.settings.max_retries, scope))
        if stream and not streamed and response.text and on_text is not None:
            await on_text(response.text)  # the provider's stream cannot be read: all at once
            response.streamed = True
        response.total_time_ms = (time.perf_counter() - started) * 1000
        response.model = model_name(self.settings)
        log.bind().debug("llm.call.finished", model=self.settings.model, streamed=stream,
                         via="litellm", tool_calls=len(response.tool_calls),
                         duration_ms=round(response.total_time_ms, 1),
                         prompt_tokens=response.usage.prompt_tokens,
                         completion_tokens=response.usage.completion_tokens)
        return response

    async def _attempt(self, litellm: ModuleType, request: dict[str, Any],
                       on_text: TextCallback | None, scope: CallScope | None,
                       started: float) -> LLMResponse:
        """One attempt: the call and, streamed, its whole stream, within the attempt's time.

        The request itself is bounded by LiteLLM's own ``timeout`` (ours gives it
        :data:`_REPORT_MARGIN` more to report it: cancelling LiteLLM while it still prepares the
        request in a worker thread would drop that request unawaited); a stream is cut exactly
        when the attempt's time is up."""
        timing = attempt_timing(self.settings.timeout, scope, self.settings.model)
        merger = StreamMerger(on_text, started) if request.get("stream") else None
        began = time.monotonic()
        reply: Any = None
        try:
            async with asyncio.timeout(timing.seconds + _REPORT_MARGIN):
                reply = await litellm.acompletion(**request, timeout=timing.seconds)
            if merger is None:
                return _plain(reply)
            async with asyncio.timeout(max(0.01, timing.seconds - (time.monotonic() - began))):
                async for chunk in reply:
                    await merger.add(chunk.model_dump(exclude_none=True))
        except TimeoutError as exc:
            raise self._failed(timed_out(timing, self.settings.timeout, self.settings.model),
                               merger) from exc
        except Exception as exc:
            error = model_error(exc, self.settings.model, timing, self.settings.timeout)
            if error is None:
                raise
            raise self._failed(error, merger) from exc
        finally:
            if merger is not None and reply is not None:
                with contextlib.suppress(Exception):
                    await reply.aclose()
        return merger.response()

    @staticmethod
    def _failed(error: ModelCallError, merger: StreamMerger | None) -> ModelCallError:
        if merger is not None and merger.delivered:
            error.retryable = False  # text reached the user: another attempt would repeat it
        return error

    async def embed(self, texts: list[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """Embeddings through LiteLLM, one vector per text, in order."""
        if not texts:
            return []
        litellm = await load_litellm()
        _Loaded.users.add(id(self))
        request = {k: v for k, v in self.call_kwargs().items()
                   if k not in REQUEST_OPTIONS and k not in ("drop_params", "num_retries")}
        request["input"] = texts

        async def attempt() -> Any:
            timing = attempt_timing(self.settings.timeout, scope, self.settings.model)
            try:
                async with asyncio.timeout(timing.seconds + _REPORT_MARGIN):
                    return await litellm.aembedding(**request, timeout=timing.seconds)
            except TimeoutError as exc:
                raise timed_out(timing, self.settings.timeout, self.settings.model) from exc
            except Exception as exc:
                error = model_error(exc, self.settings.model, timing, self.settings.timeout)
                if error is None:
                    raise
                raise error from exc

        reply = await retry_call(attempt, retry_policy(self.settings.max_retries, scope))
        vectors, tokens = _embeddings(reply, len(texts))
        if scope is not None and scope.usage is not None:
            scope.usage.add(model_name(self.settings), tokens, 0)
        return vectors


def _plain(reply: Any) -> LLMResponse:
    try:
        return parse_completion(reply.model_dump())
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise ModelCallError(f"the provider sent a reply of the wrong shape "
                             f"({type(exc).__name__})", code="llm.bad_response") from exc


def _embeddings(reply: Any, count: int) -> tuple[list[list[float]], int]:
    try:
        data = reply.model_dump()
        items = sorted(data["data"], key=lambda item: item["index"])
        vectors = [[float(x) for x in item["embedding"]] for item in items]
        usage = data.get("usage") or {}
        tokens = int(usage.get("prompt_tokens") or 0)
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise ModelCallError("the provider sent embeddings of the wrong shape",
                             code="llm.bad_response") from exc
    if len(vectors) != count:
        raise ModelCallError(f"the provider sent {len(vectors)} vectors for {count} texts",
                             code="llm.bad_response")
    return vectors, tokens


# ---------------------------------------------------------------------------- errors
def model_error(exc: BaseException, model: str, timing: Timing, timeout: float
                ) -> ModelCallError | None:
    """Our error for what a LiteLLM call raised (None when it is not LiteLLM's).

    LiteLLM's classes do not say the same thing for every provider (a refused connection is an
    ``InternalServerError`` for Anthropic, an ``APIConnectionError`` for Gemini, a 503 for a
    Bedrock stream; a body that is not JSON a 422 for Gemini), so the cause chain decides first:
    a timeout, then a refused or broken connection, then a reply that does not parse; then
    refused credentials (a 401, or Bedrock's 403 for a bad signature or token); then the HTTP
    status. A 429 carries the wait the provider asked for (``Retry-After``, or Google's
    ``retryDelay``)."""
    import openai  # loaded with LiteLLM already

    if not isinstance(exc, openai.OpenAIError):
        return None
    error: BaseException = getattr(exc, "original_exception", None) or exc  # a mid-stream error
    chain = _causes(error)
    text = str(error)
    detail = " ".join(text.split())[:_MAX_DETAIL]
    if isinstance(error, openai.APITimeoutError):
        return timed_out(timing, timeout, model)
    if any(isinstance(e, ConnectionError) for e in chain):
        return ModelCallError(f"connection to the model provider failed: {detail}",
                              code="llm.connection", retryable=True)
    if any(isinstance(e, json.JSONDecodeError) for e in chain) or (
            isinstance(error, openai.APIConnectionError) and _BROKEN_STREAM.search(text)):
        return ModelCallError(f"the model provider sent a malformed reply: {detail}",
                              code="llm.bad_response")
    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) else None
    if isinstance(error, openai.AuthenticationError) or (status == 403 and (
            _AWS_AUTH.search(text) or _AWS_AUTH.search(_header(error, exc, "x-amzn-errortype")))):
        return ModelCallError(f"the model provider refused the credentials: {detail}",
                              code="llm.auth", status=status)
    if isinstance(error, openai.APIStatusError) and status is not None:
        wait = _retry_after(error, exc, text)
        return ModelCallError(f"the model provider answered HTTP {status}: {detail}",
                              code=f"llm.http_{status}", retryable=retryable_status(status, wait),
                              retry_after=wait, status=status)
    if isinstance(error, openai.APIConnectionError):
        return ModelCallError(f"the call to the model provider failed: {detail}",
                              code="llm.connection", retryable=True)
    return ModelCallError(f"the call to the model provider failed: {detail}",
                          code="llm.request_failed")


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and what it wraps (``original_exception``, ``__cause__``,
    ``__context__``), at most 20 deep."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 20 and current not in chain:
        chain.append(current)
        current = (getattr(current, "original_exception", None) or current.__cause__
                   or current.__context__)
    return chain


def _header(error: BaseException, raised: BaseException, name: str) -> str:
    """A header of the provider's error reply (LiteLLM keeps them on the exception)."""
    for source in (error, raised):
        headers = getattr(source, "litellm_response_headers", None)
        if headers is not None and headers.get(name):
            return str(headers.get(name))
    return ""


def _retry_after(error: BaseException, raised: BaseException, text: str) -> float | None:
    """Seconds the provider asked to wait: its ``Retry-After`` header, or Google's
    ``retryDelay`` in the error's body."""
    for source in (error, raised):
        headers = getattr(source, "litellm_response_headers", None)
        if headers is not None:
            wait = parse_retry_after(headers)
            if wait is not None:
                return wait
    match = _RETRY_DELAY.search(text)
    return float(match.group(1)) if match else None
