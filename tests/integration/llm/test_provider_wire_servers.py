"""LiteLLM against local stand-ins that speak each provider's own wire format.

Every provider is reached through its endpoint override (``api_base``, or
``aws_bedrock_runtime_endpoint`` for Bedrock) on 127.0.0.1, never the internet: a guard fails any
test whose process looks up another host. Each provider drives one conversation - a tool call,
then the answer to the tool result - plain and streamed, and the tests check the tools, messages
and tool results the server received in the provider's format, the text and tool call LiteLLM
returns in OpenAI shape, the usage, and which LiteLLM exception each error reply becomes.

Skipped when LiteLLM is not installed (it comes with the optional ``providers`` extra).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from subagents.testing import FakeModelServer

try:
    import openai  # comes with LiteLLM: the tests that use it take the litellm fixture
except ImportError:
    openai = None

from tests.servers.providers import (
    BAD_KEY,
    TOOL,
    AnthropicServer,
    BedrockServer,
    CohereServer,
    GeminiServer,
    MistralServer,
    VertexServer,
    WireRequest,
    WireServer,
    encode_event,
    encode_exception,
)

SYSTEM = "You answer weather questions."
QUESTION = "What is the weather in Paris?"
RESULT = "sunny, 21 C"
ANSWER = "It is sunny in Paris today, 21 degrees."
CALL = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"},
                        "id": "toolu_01abc"}]}
KEY = "test-key-not-real"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

pytestmark = [
    # LiteLLM's own types: pydantic warns when LiteLLM builds them lazily, mid-call
    pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning"),
    # LiteLLM reads pydantic attributes on instances while it streams (it silences this warning
    # itself, which pytest's filter "error" overrides)
    pytest.mark.filterwarnings("ignore:Accessing the .* attribute on the instance is "
                               "deprecated:DeprecationWarning:litellm"),
]


@pytest.fixture(scope="module")
def litellm() -> Iterator[ModuleType]:
    """LiteLLM imported offline: the bundled model map, no ``.env`` loading, no fetches of its
    own (model map, Anthropic beta headers, Hugging Face tokenizers)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        patch.setenv("LITELLM_MODE", "PRODUCTION")
        patch.setenv("LITELLM_OFFLINE_MODE", "true")
        module = pytest.importorskip("litellm", reason="LiteLLM is not installed (extra: "
                                                       "subagents[providers])")
        patch.setattr(module, "suppress_debug_info", True)
        yield module


@pytest.fixture(autouse=True)
async def close_litellm_clients(litellm: ModuleType) -> AsyncIterator[None]:
    """Close the HTTP clients LiteLLM cached for this test's event loop (it keys its client
    cache by loop and keeps them after the loop ends: their sockets would leak)."""
    yield
    await litellm.close_litellm_async_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()


@pytest.fixture(autouse=True)
def no_internet(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse, and remember, any host name lookup other than loopback."""
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in LOOPBACK:
            looked_up.append(str(host))
            raise OSError(f"test refused to look up {host}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)
    yield looked_up
    assert looked_up == [], f"the test tried to reach {sorted(set(looked_up))}"


# ---------------------------------------------------------------------------- providers
@dataclass(frozen=True)
class Case:
    """How LiteLLM reaches one provider's stand-in, and what that provider's errors become."""

    name: str
    server: Callable[[list[Any]], WireServer]
    settings: Callable[[Any], dict[str, Any]]
    """LiteLLM's model and settings for a running server (the endpoint override included)."""
    check_first: Callable[[WireServer, WireRequest], None]
    """Asserts on the first request: tools, system prompt, question, credentials."""
    check_second: Callable[[WireServer, WireRequest, str], None]
    """Asserts on the second request: the tool call and its result, given the call's id."""
    auth_status: int = 401
    auth_error: str = "AuthenticationError"
    retry_after: str | None = "header"
    """Where a 429's wait shows: ``header`` (``litellm_response_headers``), ``body``, or None."""
    malformed_error: tuple[str, int] = ("APIConnectionError", 500)
    malformed_stream_raises: bool = True
    streams: bool = True
    keeps_call_id: bool = True
    """Whether LiteLLM hands on the provider's tool-call id (Gemini sends none: LiteLLM makes
    one up)."""


def _anthropic_first(server: WireServer, request: WireRequest) -> None:
    body = request.body
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"]
    assert body["model"] == "claude-sonnet-4-5"
    assert [b["text"] for b in body["system"]] == [SYSTEM]
    assert body["tools"][0]["name"] == "get_weather"
    assert body["tools"][0]["input_schema"] == TOOL["function"]["parameters"]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]


def _anthropic_second(server: WireServer, request: WireRequest, call_id: str) -> None:
    assistant, result = request.body["messages"][1:]
    assert assistant["role"] == "assistant"
    assert {"type": "tool_use", "id": call_id, "name": "get_weather",
            "input": {"city": "Paris"}} in assistant["content"]
    block = next(b for b in result["content"] if b["type"] == "tool_result")
    assert result["role"] == "user"
    assert block["tool_use_id"] == call_id
    assert RESULT in json.dumps(block["content"])


def _gemini_first(server: WireServer, request: WireRequest) -> None:
    body = request.body
    assert isinstance(server, GeminiServer)
    assert server.model_of(request) == "gemini-2.5-flash"
    system = body.get("systemInstruction") or body["system_instruction"]
    assert [p["text"] for p in system["parts"]] == [SYSTEM]
    assert server.tool_names(request) == ["get_weather"]
    assert body["contents"] == [{"role": "user", "parts": [{"text": QUESTION}]}]
    if isinstance(server, VertexServer):
        assert request.headers["authorization"] == f"Bearer {server.token}"
        assert server.project_and_location(request) == ("weather-project", "europe-west4")
    else:
        assert request.headers["x-goog-api-key"] == KEY


def _gemini_second(server: WireServer, request: WireRequest, call_id: str) -> None:
    parts = [p for turn in request.body["contents"] for p in turn["parts"]]
    call = next(p for p in parts if "functionCall" in p or "function_call" in p)
    call = call.get("functionCall") or call["function_call"]
    assert call["name"] == "get_weather"
    assert call["args"] == {"city": "Paris"}
    reply = next(p for p in parts if "functionResponse" in p or "function_response" in p)
    reply = reply.get("functionResponse") or reply["function_response"]
    assert reply["name"] == "get_weather"
    assert RESULT in json.dumps(reply["response"])


def _bedrock_first(server: WireServer, request: WireRequest) -> None:
    body = request.body
    assert BedrockServer.model_of(request) == "anthropic.claude-3-5-sonnet-20240620-v1:0"
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDSTANDIN/")
    assert "/eu-central-1/bedrock/aws4_request" in request.headers["authorization"]
    assert body["system"] == [{"text": SYSTEM}]
    spec = body["toolConfig"]["tools"][0]["toolSpec"]
    assert spec["name"] == "get_weather"
    assert spec["inputSchema"]["json"] == TOOL["function"]["parameters"]
    assert body["messages"] == [{"role": "user", "content": [{"text": QUESTION}]}]


def _bedrock_second(server: WireServer, request: WireRequest, call_id: str) -> None:
    assistant, result = request.body["messages"][1:]
    assert {"toolUse": {"toolUseId": call_id, "name": "get_weather",
                        "input": {"city": "Paris"}}} in assistant["content"]
    block = next(b["toolResult"] for b in result["content"] if "toolResult" in b)
    assert result["role"] == "user"
    assert block["toolUseId"] == call_id
    assert RESULT in json.dumps(block["content"])


def _openai_like_first(server: WireServer, request: WireRequest) -> None:
    body = request.body
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert body["messages"][-1]["content"] == QUESTION
    assert body["tools"] == [TOOL]


def _openai_like_second(server: WireServer, request: WireRequest, call_id: str) -> None:
    assistant, result = request.body["messages"][-2:]
    assert [c["id"] for c in assistant["tool_calls"]] == [call_id]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert result["role"] == "tool"
    assert result["tool_call_id"] == call_id
    assert RESULT in json.dumps(result["content"])


CASES = [
    Case("anthropic", AnthropicServer,
         lambda s: {"model": "anthropic/claude-sonnet-4-5", "api_base": s.base_url,
                    "api_key": KEY},
         _anthropic_first, _anthropic_second),
    Case("gemini", GeminiServer,
         lambda s: {"model": "gemini/gemini-2.5-flash", "api_base": f"{s.base_url}/v1beta",
                    "api_key": KEY},
         _gemini_first, _gemini_second, retry_after="body", keeps_call_id=False,
         malformed_error=("BadRequestError", 422), malformed_stream_raises=False),
    Case("vertex_ai", VertexServer,
         lambda s: {"model": "vertex_ai/gemini-2.5-flash", "api_base": s.base_url,
                    "vertex_project": "weather-project", "vertex_location": "europe-west4",
                    "vertex_credentials": s.credentials("weather-project")},
         _gemini_first, _gemini_second, retry_after="body", keeps_call_id=False,
         malformed_error=("BadRequestError", 422), malformed_stream_raises=False),
    Case("bedrock", BedrockServer,
         lambda s: {"model": "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0",
                    "aws_bedrock_runtime_endpoint": s.base_url,
                    "aws_access_key_id": "AKIDSTANDIN", "aws_secret_access_key": KEY,
                    "aws_region_name": "eu-central-1"},
         _bedrock_first, _bedrock_second, auth_status=403, auth_error="PermissionDeniedError",
         retry_after=None, malformed_error=("BadRequestError", 422)),
    Case("mistral", MistralServer,
         lambda s: {"model": "mistral/mistral-large-latest", "api_base": f"{s.base_url}/v1",
                    "api_key": KEY},
         _openai_like_first, _openai_like_second),
    Case("cohere", CohereServer,
         lambda s: {"model": "cohere_chat/command-r-plus", "api_base": f"{s.base_url}/v2/chat",
                    "api_key": KEY},
         _openai_like_first, _openai_like_second, retry_after=None, streams=False),
]


def by_name(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


# ---------------------------------------------------------------------------- calling LiteLLM
@dataclass
class Answer:
    """What one LiteLLM call returned, in OpenAI shape."""

    text: str
    calls: list[tuple[str, str, Any]]
    """(id, name, arguments decoded from their JSON text) per tool call."""
    usage: tuple[int, int]
    finish_reason: str | None
    text_chunks: int = 0


def conversation(first: Answer | None = None) -> list[dict[str, Any]]:
    """The messages of the first call, or of the second after ``first``'s tool call."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": QUESTION}]
    if first is None:
        return messages
    call_id, name, arguments = first.calls[0]
    return [*messages,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": RESULT}]


async def ask(litellm: ModuleType, settings: dict[str, Any], messages: list[dict[str, Any]],
              *, stream: bool, timeout: float = 10) -> Answer:
    """One ``litellm.acompletion`` with the weather tool, no retries, read to the end."""
    options = {"stream_options": {"include_usage": True}} if stream else {}
    response = await litellm.acompletion(messages=messages, tools=[TOOL], stream=stream,
                                         num_retries=0, max_retries=0, timeout=timeout,
                                         **options, **settings)
    if not stream:
        message = response.choices[0].message
        return Answer(message.content or "",
                      [(c.id, c.function.name, json.loads(c.function.arguments))
                       for c in message.tool_calls or []],
                      (response.usage.prompt_tokens, response.usage.completion_tokens),
                      response.choices[0].finish_reason)
    return await _read_stream(response)


async def _read_stream(response: Any) -> Answer:
    texts: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage, finish = (0, 0), None
    async for chunk in response:
        if getattr(chunk, "usage", None):
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        if choice.delta.content:
            texts.append(choice.delta.content)
        for delta in choice.delta.tool_calls or []:
            slot = calls.setdefault(delta.index or 0, {"id": "", "name": "", "arguments": ""})
            slot["id"] = slot["id"] or (delta.id or "")
            slot["name"] = slot["name"] or (delta.function.name or "")
            slot["arguments"] += delta.function.arguments or ""
    return Answer("".join(texts), [(c["id"], c["name"], json.loads(c["arguments"]))
                                   for _, c in sorted(calls.items())], usage, finish, len(texts))


def chat_requests(server: WireServer) -> list[WireRequest]:
    """The chat calls a server received (a Vertex token exchange is not one)."""
    return [r for r in server.requests if server.classify(r) is not None]


async def raised(call: Awaitable[Any]) -> Any:
    """The error ``call`` raised (the test fails if it returned)."""
    with pytest.raises(openai.OpenAIError) as info:  # every LiteLLM call error is one
        await call
    return info.value


def causes(exc: BaseException | None) -> list[type[BaseException]]:
    """The classes along an exception's chain: LiteLLM's wrapped error, ``__cause__``,
    ``__context__``."""
    chain: list[type[BaseException]] = []
    while exc is not None and len(chain) < 10:
        chain.append(type(exc))
        exc = getattr(exc, "original_exception", None) or exc.__cause__ or exc.__context__
    return chain


# ---------------------------------------------------------------------------- the tests
def test_the_event_stream_encoder_is_read_back_by_botocore():
    eventstream = pytest.importorskip("botocore.eventstream", reason="botocore comes with LiteLLM")
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(encode_event("contentBlockDelta", {"contentBlockIndex": 0,
                                                       "delta": {"text": "Hé"}}))
    buffer.add_data(encode_exception("throttlingException", "slow down"))
    first, second = list(buffer)
    assert first.headers == {":event-type": "contentBlockDelta",
                             ":content-type": "application/json", ":message-type": "event"}
    assert json.loads(first.payload) == {"contentBlockIndex": 0, "delta": {"text": "Hé"}}
    assert second.headers[":exception-type"] == "throttlingException"
    assert json.loads(second.payload) == {"message": "slow down"}


def _conversation_cases() -> list[Any]:
    params = []
    for case in CASES:
        for stream in (False, True):
            marks = []
            if stream and not case.streams:
                marks.append(pytest.mark.xfail(strict=True, reason=(
                    "LiteLLM's cohere_chat route reads each stream line as bare JSON, so it "
                    "fails on Cohere v2's server-sent events (event:/data: lines)")))
            params.append(pytest.param(case, stream, marks=marks,
                                       id=f"{case.name}-{'stream' if stream else 'plain'}"))
    return params


@pytest.mark.parametrize(("case", "stream"), _conversation_cases())
async def test_a_conversation_calls_a_tool_and_answers(litellm, case, stream):
    async with case.server([CALL, ANSWER]) as server:
        settings = case.settings(server)
        first = await ask(litellm, settings, conversation(), stream=stream)
        second = await ask(litellm, settings, conversation(first), stream=stream)
        server.assert_done()
    requests = chat_requests(server)
    assert [r.stream for r in requests] == [stream, stream]
    (call_id, name, arguments), = first.calls
    assert call_id == "toolu_01abc" if case.keeps_call_id else call_id.startswith("call_")
    assert name == "get_weather"
    assert arguments == {"city": "Paris"}
    assert first.text == ""
    assert first.finish_reason == "tool_calls"
    assert second.text == ANSWER
    assert second.calls == []
    assert second.finish_reason == "stop"
    if stream:
        assert second.text_chunks == len(server.pieces(ANSWER)) > 1
    assert [first.usage, second.usage] == [r.usage for r in requests]
    case.check_first(server, requests[0])
    case.check_second(server, requests[1], call_id)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_refused_credentials_raise_an_authentication_error(litellm, case):
    error = {"error": {"status": case.auth_status, "message": "The key is not valid."}}
    async with case.server([error]) as server:
        exc = await raised(ask(litellm, case.settings(server), conversation(), stream=False))
    assert type(exc).__name__ == case.auth_error
    assert exc.status_code == case.auth_status
    assert isinstance(exc, openai.APIStatusError)  # LiteLLM's errors subclass openai's


async def test_gemini_answers_a_wrong_key_with_a_400_that_litellm_calls_authentication(litellm):
    case = by_name("gemini")
    async with case.server([{"error": {"status": 400, "message": BAD_KEY}}]) as server:
        exc = await raised(ask(litellm, case.settings(server), conversation(), stream=False))
    assert isinstance(exc, litellm.AuthenticationError)
    assert exc.status_code == 401


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_a_rate_limit_raises_a_rate_limit_error_with_its_wait(litellm, case, stream):
    error = {"error": {"status": 429, "message": "Too many requests.", "retry_after": 7}}
    async with case.server([error]) as server:
        exc = await raised(ask(litellm, case.settings(server), conversation(), stream=stream))
    if isinstance(exc, litellm.exceptions.MidStreamFallbackError):  # read from an opened stream
        assert exc.is_pre_first_chunk
        assert exc.generated_content == ""
        exc = exc.original_exception
    assert isinstance(exc, litellm.RateLimitError)
    assert exc.status_code == 429
    headers = getattr(exc, "litellm_response_headers", None)
    if case.retry_after == "header":
        assert headers["retry-after"] == "7"
    elif case.retry_after == "body":  # Google: a google.rpc.RetryInfo detail in the message
        assert '"retryDelay":"7s"' in str(exc)
    else:
        assert headers is None or "retry-after" not in headers


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_a_reply_that_is_not_json_raises(litellm, case):
    async with case.server([{"malformed": True}]) as server:
        exc = await raised(ask(litellm, case.settings(server), conversation(), stream=False))
    assert (type(exc).__name__, exc.status_code) == case.malformed_error
    assert json.JSONDecodeError in causes(exc)


def _broken_stream_cases() -> list[Any]:
    params = []
    for case in CASES:
        marks = []
        if not case.streams:
            marks.append(pytest.mark.skip(reason="LiteLLM cannot read Cohere v2 streams at all"))
        elif not case.malformed_stream_raises:
            marks.append(pytest.mark.xfail(strict=True, reason=(
                "LiteLLM skips a Gemini stream event that is not JSON and reports the cut "
                "stream as finished (finish_reason stop)")))
        params.append(pytest.param(case, marks=marks, id=case.name))
    return params


@pytest.mark.parametrize("case", _broken_stream_cases())
async def test_a_stream_cut_by_a_broken_event_raises_mid_stream(litellm, case):
    async with case.server([{"malformed": True}]) as server:
        exc = await raised(ask(litellm, case.settings(server), conversation(), stream=True))
    assert isinstance(exc, litellm.exceptions.MidStreamFallbackError)
    assert isinstance(exc.original_exception, litellm.APIConnectionError)
    # text had been streamed: no other model may take over the answer now
    assert not exc.is_pre_first_chunk
    assert exc.generated_content == "Hel"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_a_server_that_does_not_answer_raises_a_timeout(litellm, case):
    async with case.server([{"stall": True}]) as server:
        exc = await raised(ask(litellm, case.settings(server), conversation(), stream=False,
                               timeout=0.5))
    assert isinstance(exc, litellm.Timeout)
    # openai's timeout class derives from openai's connection error: map the timeout first
    assert isinstance(exc, openai.APITimeoutError | openai.APIConnectionError)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_a_refused_connection_shows_in_the_error_s_causes(litellm, case, stream):
    async with case.server([]) as server:
        settings = case.settings(server)
    exc = await raised(ask(litellm, settings, conversation(), stream=stream))
    # the class varies (APIConnectionError, InternalServerError 500, ServiceUnavailableError
    # 503, MidStreamFallbackError): only the chain says the connection was refused
    assert isinstance(exc, openai.APIError)
    assert ConnectionRefusedError in causes(exc)


GROQ_PLAIN = pytest.mark.xfail(strict=True, reason=(
    "LiteLLM's groq route reads `service_tier` from every plain reply; Groq sends one, the "
    "fake OpenAI-compatible server does not"))


@pytest.mark.parametrize(("model", "stream"), [
    pytest.param("groq/llama-3.3-70b-versatile", False, marks=GROQ_PLAIN, id="groq-plain"),
    pytest.param("groq/llama-3.3-70b-versatile", True, id="groq-stream"),
    pytest.param("deepinfra/meta-llama/Llama-3.3-70B-Instruct", False, id="deepinfra-plain"),
    pytest.param("deepinfra/meta-llama/Llama-3.3-70B-Instruct", True, id="deepinfra-stream")])
async def test_openai_compatible_providers_reach_the_fake_server(litellm, model, stream):
    provider, called = model.split("/", 1)
    async with FakeModelServer({provider: [
            {"tool_calls": [{"get_weather": {"city": "Paris"}}]}, ANSWER]}) as fake:
        settings = {"model": model, "api_base": fake.base_url(provider), "api_key": KEY}
        first = await ask(litellm, settings, conversation(), stream=stream)
        second = await ask(litellm, settings, conversation(first), stream=stream)
        fake.assert_done()
    assert [(n, a) for _, n, a in first.calls] == [("get_weather", {"city": "Paris"})]
    assert second.text == ANSWER
    assert [r.path for r in fake.requests] == [f"/{provider}/v1/chat/completions"] * 2
    assert {r.body["model"] for r in fake.requests} == {called}
    assert fake.requests[1].messages[-1] == {"role": "tool", "tool_call_id": first.calls[0][0],
                                             "content": RESULT}
