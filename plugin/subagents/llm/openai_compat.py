"""Every OpenAI-compatible chat completions endpoint: OpenAI, Azure OpenAI, vLLM, llama.cpp,
Ollama, LM Studio, a LiteLLM proxy, Rasa's self-hosted models, and the hosted OpenAI-compatible
providers (groq, mistral, cohere's compatibility API, ...; see
:data:`subagents.config.providers.HOSTED`).

The request body is plain JSON built here and posted through :mod:`subagents.llm.http`; the
reply is read straight from JSON (a plain call) or from the ``chat.completion.chunk`` events of
a stream, with text deltas handed to the caller as they arrive and tool calls merged by index.
"""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from subagents.config.providers import HOSTED
from subagents.exceptions import SubagentsError
from subagents.llm.http import ModelCallError, ModelEndpoint
from subagents.llm.model import LLMResponse, TextCallback, ToolCall, Usage
from subagents.llm.settings import ModelSettings, base_url, endpoint, model_name, resolved
from subagents.types import CallScope, ChatMessage, JsonObject

log = structlog.get_logger("subagents.llm")
_UNKNOWN = object()


class OpenAICompatibleModel:
    """A :class:`~subagents.llm.model.Model` for one OpenAI-compatible endpoint.

    Args:
        settings: The model's settings.
        name: Who calls it (spans, logs, recordings).
    """

    def __init__(self, settings: ModelSettings, *, name: str = "llm") -> None:
        self._settings = settings
        self.name = name
        self._chat: ModelEndpoint | None = None
        self._embeddings: ModelEndpoint | None = None
        self._props: object = _UNKNOWN
        """The server's ``/props`` (see :meth:`server_props`), once asked."""
        self._stale: list[ModelEndpoint] = []
        """Endpoints of replaced settings, closed by :meth:`close`."""
        self._body: JsonObject | None = None
        """What every request body starts with: the model and its options, resolved."""

    @property
    def settings(self) -> ModelSettings:
        """The model's settings; replacing them applies to the next call."""
        return self._settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        self._settings = value
        self._stale.extend(e for e in (self._chat, self._embeddings) if e is not None)
        self._chat = self._embeddings = None  # built again from the new settings
        self._body = None
        self._props = _UNKNOWN

    def _endpoint(self, path: str) -> ModelEndpoint:
        current = self._chat if path == "/chat/completions" else self._embeddings
        if current is None:
            url, headers = endpoint(self.settings, path)
            current = ModelEndpoint(url, headers, timeout=self.settings.timeout,
                                    max_retries=self.settings.max_retries,
                                    model=self.settings.model)
            if path == "/chat/completions":
                self._chat = current
            else:
                self._embeddings = current
        return current

    async def prepare(self) -> None:
        """Create the connection pool on the running event loop (connections open on use); a
        model without its key or address fails at its first call instead."""
        try:
            self._endpoint("/chat/completions").session()
        except SubagentsError as exc:  # a missing key or address: reported at the first call
            log.debug("llm.prepare.skipped", model=self.settings.model, error_code=exc.code)

    async def close(self) -> None:
        """Close the connection pools."""
        for current in (self._chat, self._embeddings, *self._stale):
            if current is not None:
                await current.close()
        self._chat = self._embeddings = None
        self._stale = []

    def request_body(self, messages: list[ChatMessage], tools: list[JsonObject] | None,
                     options: JsonObject | None = None) -> JsonObject:
        """The chat completions body: the model, the messages, its options, the tools (in the
        spelling of a hosted provider that differs from OpenAI's)."""
        if self._body is None:
            settings = self.settings
            self._body = {"model": model_name(settings),
                          **resolved(settings, settings.options, "option"),
                          **resolved(settings, settings.extra_body, "extra_body")}
        body: JsonObject = {**self._body, "messages": messages}
        if options:
            body.update(options)
        if tools:
            body["tools"] = tools
        hosted = HOSTED.get(self.settings.provider)
        if hosted is not None:
            for name, spelled in hosted.renamed.items():
                if name in body:
                    body[spelled] = body.pop(name)
        return body

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """One chat completion (see :class:`~subagents.llm.model.Model`)."""
        body = self.request_body(messages, tools, options)
        started = time.perf_counter()
        chat = self._endpoint("/chat/completions")
        if stream:
            body["stream"] = True
            hosted = HOSTED.get(self.settings.provider)
            if hosted is None or hosted.stream_usage:
                body["stream_options"] = {"include_usage": True}
            response = await _read_stream(chat, body, scope, on_text, started)
        else:
            response = _completion(await chat.post_json(body, scope))
        response.total_time_ms = (time.perf_counter() - started) * 1000
        response.model = body["model"]
        # log.bind().debug(...) is what log.debug(...) does through the lazy proxy, without the
        # failed attribute lookup first: a call filtered out costs a quarter
        log.bind().debug("llm.call.finished", model=self.settings.model, streamed=stream,
                         tool_calls=len(response.tool_calls),
                         duration_ms=round(response.total_time_ms, 1),
                         prompt_tokens=response.usage.prompt_tokens,
                         completion_tokens=response.usage.completion_tokens)
        return response

    @property
    def _hosted(self) -> bool:
        """Whether the endpoint is a hosted provider's (which is never asked what it is)."""
        return self.settings.provider in ("openai", "azure") or self.settings.provider in HOSTED

    async def server_props(self) -> JsonObject | None:
        """What the server says of itself at ``GET /props`` (llama.cpp's server does; asked
        once), or None: other servers have no such route, hosted providers are not asked."""
        if self._hosted:
            return None
        if self._props is _UNKNOWN:
            root = base_url(self.settings).removesuffix("/v1")
            props = await self._endpoint("/chat/completions").get_json(root + "/props",
                                                                       timeout=3.0)
            self._props = props if isinstance(props, dict) else None
        return self._props  # type: ignore[return-value]

    async def native_tools(self) -> bool | None:
        """Whether the server calls tools natively: False when it describes itself as a
        llama.cpp server whose chat template has no tools (it would drop them silently), None
        when it does not say (hosted providers are not asked)."""
        if self._hosted:
            return True
        props = await self.server_props()
        caps = props.get("chat_template_caps") if props is not None else None
        found = caps.get("supports_tool_calls") if isinstance(caps, dict) else None
        return found if isinstance(found, bool) else None

    async def embed(self, texts: list[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """Embeddings from the endpoint's ``/embeddings``, one vector per text, in order."""
        if not texts:
            return []
        reply = await self._endpoint("/embeddings").post_json(
            {"model": model_name(self.settings), "input": texts}, scope)
        try:
            items = sorted(reply["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in items]
        except (TypeError, KeyError, ValueError) as exc:
            raise ModelCallError("the embeddings endpoint sent a reply of the wrong shape",
                                 code="llm.bad_response") from exc
        if len(vectors) != len(texts):
            raise ModelCallError(f"the embeddings endpoint sent {len(vectors)} vectors for "
                                 f"{len(texts)} texts", code="llm.bad_response")
        if scope is not None and scope.usage is not None:
            usage = reply.get("usage") if isinstance(reply, dict) else None
            tokens = usage.get("prompt_tokens", 0) if isinstance(usage, dict) else 0
            scope.usage.add(self.settings.called_model, int(tokens or 0), 0)
        return vectors


async def _read_stream(chat: ModelEndpoint, body: JsonObject, scope: CallScope | None,
                       on_text: TextCallback | None, started: float) -> LLMResponse:
    """Merge a stream's chunks: text in order (each delta to ``on_text``), tool calls by index."""
    merger = StreamMerger(on_text, started)
    try:
        async for chunk in chat.stream_events(body, scope):
            await merger.add(chunk)
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise ModelCallError(f"the model endpoint streamed a malformed chunk "
                             f"({type(exc).__name__})", code="llm.bad_response") from exc
    return merger.response()


class StreamMerger:
    """Builds one reply from the ``chat.completion.chunk`` objects of a stream: text in order
    (each piece handed to ``on_text`` as it comes), tool calls merged by index, the usage of
    the chunk that reports it.

    Args:
        on_text: Receives each piece of text.
        started: ``time.perf_counter()`` when the call started (time to first token).
    """

    def __init__(self, on_text: TextCallback | None, started: float) -> None:
        self.on_text = on_text
        self.started = started
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage = Usage()
        self.finish: str | None = None
        self.first: float | None = None

    @property
    def delivered(self) -> bool:
        """Whether text was handed on (a failure now must not be retried elsewhere)."""
        return self.first is not None

    async def add(self, chunk: Any) -> None:
        """Take one chunk; a chunk of the wrong shape raises TypeError, KeyError, ..."""
        if not isinstance(chunk, dict):
            raise TypeError("a streamed chunk is not a JSON object")
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices")
        if not choices:
            return
        choice = choices[0]
        self.finish = choice.get("finish_reason") or self.finish
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content:
            if self.first is None:
                self.first = time.perf_counter()
            self.text.append(content)
            if self.on_text is not None:
                await self.on_text(content)
        for part in delta.get("tool_calls") or ():
            _merge_call(self.calls, part)

    def response(self) -> LLMResponse:
        """The reply so far."""
        tool_calls = [tool_call(c["id"], c["name"], c["args"], index)
                      for index, c in sorted(self.calls.items())]
        finish = self.finish
        return LLMResponse(text="".join(self.text) if self.text else None,
                           tool_calls=tool_calls, usage=self.usage,
                           finish_reason=finish if isinstance(finish, str) else None,
                           streamed=True,
                           time_to_first_token_ms=(self.first - self.started) * 1000
                           if self.first else None)


def _merge_call(calls: dict[int, dict[str, Any]], part: dict[str, Any]) -> None:
    slot = calls.setdefault(int(part.get("index") or 0), {"id": None, "name": "", "args": ""})
    slot["id"] = part.get("id") or slot["id"]
    function = part.get("function")
    if isinstance(function, dict):
        slot["name"] = slot["name"] or (function.get("name") or "")
        slot["args"] += function.get("arguments") or ""


def _completion(data: Any) -> LLMResponse:
    """An LLMResponse from a decoded chat completion; a wrong shape is ``llm.bad_response``."""
    try:
        return parse_completion(data)
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise ModelCallError(f"the model endpoint sent a malformed response "
                             f"({type(exc).__name__})", code="llm.bad_response") from exc


def parse_completion(data: Any) -> LLMResponse:
    """An LLMResponse from a decoded chat completion; a wrong shape raises TypeError."""
    if not isinstance(data, dict):
        raise TypeError("the completion is not a JSON object")
    choices = data.get("choices")
    usage = _usage(data.get("usage"))
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
        calls.append(tool_call(raw.get("id"), function.get("name"), function.get("arguments"),
                               index))
    finish = choice.get("finish_reason")
    return LLMResponse(text, calls, usage, finish if isinstance(finish, str) else None)


def tool_call(call_id: str | None, name: str | None, raw: Any, index: int) -> ToolCall:
    """A tool call from its parts; arguments that are not a JSON object are reported in
    ``parse_error``, never raised."""
    if isinstance(raw, dict):  # some servers send the arguments already decoded
        return ToolCall(call_id or f"call_{index}", name or "", json.dumps(raw), raw)
    raw = raw if isinstance(raw, str) else ""
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


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(prompt if isinstance(prompt, int) else 0,
                 completion if isinstance(completion, int) else 0)
