"""Providers with their own wire format, called through our Model: LiteLLM for Anthropic,
Gemini, Vertex AI, Bedrock and Cohere's native API, the direct way for Mistral; each against its
stand-in on 127.0.0.1. Their failures become our error codes (auth, a 429 with its wait, a
timeout, a malformed reply, a refused connection); our retry policy and the turn's deadline
apply; text that reached the user is never retried.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio
import pytest
from subagents.config.endpoints import EndpointsConfig
from subagents.exceptions import LLMError
from subagents.llm import build_model, resolve_model_settings
from subagents.llm.litellm_model import LiteLLMModel
from subagents.llm.openai_compat import OpenAICompatibleModel
from subagents.types import CallScope

from tests.provider_cases import (
    CASES,
    KEY,
    LITELLM_WARNINGS,
    NEEDS_LITELLM,
    ProviderCase,
    case_params,
    chat_requests,
    no_internet,  # noqa: F401 - the fixture
    tool_names,
)
from tests.servers.providers import TOOL

pytestmark = [*LITELLM_WARNINGS, pytest.mark.usefixtures("no_internet")]

SYSTEM = "You answer weather questions."
QUESTION = "What is the weather in Paris?"
RESULT = "sunny, 21 C"
ANSWER = "It is sunny in Paris today, 21 degrees."
CALL = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"},
                        "id": "toolu_01abc"}]}


def by_name(name: str) -> ProviderCase:
    return next(c for c in CASES if c.name == name)


def model_for(case: ProviderCase, server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
              **more: Any) -> Any:
    """Our model for the case's endpoints.yml entry (loaded as a project loads it)."""
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    entry = {**case.entry(server, tmp_path), "max_retries": 0, **more}
    endpoints = EndpointsConfig.model_validate({"model_groups": [{"id": "g", "models": [entry]}]})
    return build_model(resolve_model_settings({"model_group": "g"}, endpoints), name="agent")


def inner(model: Any) -> Any:
    while hasattr(model, "inner"):
        model = model.inner
    return model


def messages(call: Any = None) -> list[dict[str, Any]]:
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    if call is None:
        return first
    return [*first, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function",
         "function": {"name": call.name, "arguments": call.raw_arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": RESULT}]


async def failure(model: Any, *, stream: bool = False, scope: CallScope | None = None,
                  on_text: Any = None) -> LLMError:
    with anyio.fail_after(30), pytest.raises(LLMError) as info:
        await model.complete(messages(), [TOOL], stream=stream, on_text=on_text, scope=scope)
    await model.close()
    return info.value


# ---------------------------------------------------------------------------- a conversation
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("case", case_params())
async def test_a_tool_call_and_its_answer_through_our_model(case, stream, tmp_path, monkeypatch):
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    async with case.server([CALL, ANSWER]) as server:
        model = model_for(case, server, tmp_path, monkeypatch)
        assert type(inner(model)) is (LiteLLMModel if case.via == "litellm"
                                      else OpenAICompatibleModel)
        with anyio.fail_after(30):
            first = await model.complete(messages(), [TOOL], stream=stream, on_text=on_text)
            (call,) = first.tool_calls
            second = await model.complete(messages(call), [TOOL], stream=stream,
                                          on_text=on_text)
        await model.close()
        server.assert_done()
    requests = chat_requests(server)
    assert [r.stream for r in requests] == [stream and case.streams] * 2
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert tool_names(server, requests[0]) == ["get_weather"]
    assert RESULT in json.dumps(requests[1].body)
    assert second.text == ANSWER
    assert second.tool_calls == []
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == requests[1].usage
    if stream:  # streamed as the provider streamed it (all at once where it cannot stream)
        assert pieces == (server.pieces(ANSWER) if case.streams else [ANSWER])
        assert second.streamed
    else:
        assert pieces == []


@NEEDS_LITELLM
async def test_anthropic_gets_max_tokens_and_the_rasa_keys_pass_through(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE", "")  # set below, once the server runs
    case = by_name("anthropic")
    async with case.server(["Hi.", "Hi."]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE", server.base_url)
        default = model_for(case, server, tmp_path, monkeypatch, api_base="${ANTHROPIC_BASE}")
        await default.complete(messages(), None)
        await default.close()
        given = model_for(case, server, tmp_path, monkeypatch, max_tokens=300,
                          top_k=5)  # top_k: a key only Anthropic knows, passed as is
        await given.complete(messages(), None)
        await given.close()
    first, second = chat_requests(server)
    assert first.body["max_tokens"] == 4096  # not the model's 64,000
    assert first.headers["x-api-key"] == KEY  # from ANTHROPIC_API_KEY
    assert (second.body["max_tokens"], second.body["top_k"]) == (300, 5)


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("case", case_params())
async def test_refused_credentials_are_an_auth_error(case, tmp_path, monkeypatch):
    error = {"error": {"status": case.auth_status, "message": "The key is not valid."}}
    async with case.server([error]) as server:
        exc = await failure(model_for(case, server, tmp_path, monkeypatch))
    assert exc.code == "llm.auth"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("case", case_params())
async def test_a_rate_limit_carries_the_wait_the_provider_asked_for(case, stream, tmp_path,
                                                                     monkeypatch):
    error = {"error": {"status": 429, "message": "Too many requests.", "retry_after": 7}}
    async with case.server([error]) as server:
        exc = await failure(model_for(case, server, tmp_path, monkeypatch), stream=stream)
    assert exc.code == "llm.http_429"
    assert exc.retry_after == case.retry_after  # type: ignore[attr-defined]
    assert exc.retryable  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", case_params())
async def test_a_rate_limit_is_retried_after_its_wait(case, tmp_path, monkeypatch):
    error = {"error": {"status": 429, "message": "Slow down.", "retry_after": 0}}
    async with case.server([error, ANSWER]) as server:
        model = model_for(case, server, tmp_path, monkeypatch, max_retries=1)
        with anyio.fail_after(30):
            reply = await model.complete(messages(), None)
        await model.close()
        server.assert_done()
    assert reply.text == ANSWER
    assert len(chat_requests(server)) == 2


@pytest.mark.parametrize("case", case_params())
async def test_a_provider_that_does_not_answer_times_out(case, tmp_path, monkeypatch):
    async with case.server([{"stall": True}]) as server:
        model = model_for(case, server, tmp_path, monkeypatch, timeout=0.5)
        started = time.monotonic()
        exc = await failure(model)
    assert exc.code == "llm.timeout"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("case", case_params())
async def test_the_turn_s_deadline_cuts_a_slow_provider(case, tmp_path, monkeypatch):
    async with case.server([{"stall": True}]) as server:
        model = model_for(case, server, tmp_path, monkeypatch, timeout=30)
        exc = await failure(model, scope=CallScope(deadline=time.monotonic() + 0.5))
    assert exc.code == "llm.deadline"


@pytest.mark.parametrize("case", case_params())
async def test_a_reply_that_is_not_json_is_a_malformed_reply(case, tmp_path, monkeypatch):
    async with case.server([{"malformed": True}]) as server:
        exc = await failure(model_for(case, server, tmp_path, monkeypatch))
    assert exc.code == "llm.bad_response"


def _cut_stream_cases() -> list[Any]:
    params = []
    for case in CASES:
        marks = list(case.marks)
        if not case.streams:
            marks.append(pytest.mark.skip(reason="LiteLLM cannot read Cohere's stream: the "
                                                 "call is made plain"))
        elif not case.cut_stream_raises:
            marks.append(pytest.mark.xfail(strict=True, reason=(
                "LiteLLM skips a Gemini stream event that is not JSON and reports the cut "
                "stream as finished")))
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


@pytest.mark.parametrize("case", _cut_stream_cases())
async def test_a_stream_cut_after_text_reached_the_user_fails_once_without_a_retry(
        case, tmp_path, monkeypatch):
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    async with case.server([{"malformed": True}, ANSWER]) as server:
        model = model_for(case, server, tmp_path, monkeypatch, max_retries=2)
        exc = await failure(model, stream=True, on_text=on_text)
        requests = len(chat_requests(server))
    assert exc.code in ("llm.bad_response", "llm.connection")
    assert not exc.retryable  # type: ignore[attr-defined]
    assert requests == 1  # "Hel" reached the user: no second attempt repeats it
    assert "".join(pieces) == "Hel"


@pytest.mark.parametrize("case", case_params([c for c in CASES if c.streams]))
async def test_a_stream_that_stops_after_text_reached_the_user_times_out_without_a_retry(
        case, tmp_path, monkeypatch):
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    async with case.server([{"stall_after_text": True}, ANSWER]) as server:
        model = model_for(case, server, tmp_path, monkeypatch, max_retries=2, timeout=1)
        exc = await failure(model, stream=True, on_text=on_text)
        requests = len(chat_requests(server))
    assert exc.code == "llm.timeout"
    assert not exc.retryable  # type: ignore[attr-defined]  # a timeout before text would be
    assert requests == 1
    assert pieces == ["Hel"]


@pytest.mark.parametrize("case", case_params())
async def test_a_timeout_before_any_text_is_retried(case, tmp_path, monkeypatch):
    async with case.server([{"stall": True}, ANSWER]) as server:
        model = model_for(case, server, tmp_path, monkeypatch, max_retries=1, timeout=1)
        with anyio.fail_after(30):
            reply = await model.complete(messages(), None, stream=True)
        await model.close()
    assert reply.text == ANSWER
    assert len(chat_requests(server)) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("case", case_params())
async def test_a_refused_connection_is_a_connection_error(case, stream, tmp_path, monkeypatch):
    async with case.server([]) as server:
        model = model_for(case, server, tmp_path, monkeypatch)
    exc = await failure(model, stream=stream)  # the server is gone: its port refuses
    assert exc.code == "llm.connection"


# ---------------------------------------------------------------------------- LiteLLM itself
@NEEDS_LITELLM
async def test_without_litellm_a_call_names_the_extra_to_install(monkeypatch):
    from subagents.llm import litellm_model

    monkeypatch.setitem(sys.modules, "litellm", None)  # as if it were not installed
    monkeypatch.setattr(litellm_model._Loaded, "module", None)
    model = build_model(resolve_model_settings(
        {"provider": "anthropic", "model": "claude-sonnet-4-5"}, None))
    with pytest.raises(LLMError) as info:
        await model.complete(messages(), None)
    assert info.value.code == "llm.provider.extra_missing"
    assert "pip install 'subagents[providers]'" in str(info.value)


@NEEDS_LITELLM
async def test_embeddings_go_through_litellm_too(monkeypatch):
    from subagents.testing import FakeModelServer

    async with FakeModelServer() as fake:
        model = build_model(resolve_model_settings(
            {"provider": "openai_like", "model": "embedder", "api_base": fake.base_url(),
             "api_key": "${EMBED_KEY}"}, None))
        monkeypatch.setenv("EMBED_KEY", KEY)
        vectors = await model.embed(["one", "two"])
        await model.close()
    assert len(vectors) == 2
    assert vectors[0] != vectors[1]
    assert fake.embedding_inputs == [["one", "two"]]
