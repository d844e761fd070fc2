"""The OpenAI-compatible model against the fake model server, over real HTTP: plain and
streamed calls share one HTTP stack (aiohttp), one retry policy and one error mapping."""

from __future__ import annotations

import anyio
import pytest
from subagents.config.endpoints import EndpointsConfig
from subagents.exceptions import ConfigError, LLMError
from subagents.llm import LLMClient, ModelSettings, resolve_model_settings
from subagents.testing import FakeModelServer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
USER = [{"role": "user", "content": "weather in Berlin?"}]


def client(fake: FakeModelServer, caller: str = "default", **kw) -> LLMClient:
    settings = ModelSettings(model="m", api_base=fake.base_url(caller),
                             timeout=kw.pop("timeout", 5), max_retries=kw.pop("max_retries", 2),
                             options=kw)
    return LLMClient(settings)


async def test_text_reply_with_usage():
    async with FakeModelServer({"default": ["Sunny and warm."]}) as fake:
        llm = client(fake)
        response = await llm.complete(USER, None)
        await llm.close()
        fake.assert_done()
    assert response.text == "Sunny and warm."
    assert response.tool_calls == []
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens > 0


async def test_streamed_text_arrives_delta_by_delta_in_order():
    text = "The weather in Berlin is sunny with a light breeze."
    deltas: list[str] = []

    async def on_text(delta: str) -> None:
        deltas.append(delta)

    async with FakeModelServer({"default": [text]}) as fake:
        llm = client(fake)
        response = await llm.complete(USER, None, stream=True, on_text=on_text)
        await llm.close()
    assert len(deltas) > 3
    assert "".join(deltas) == text == response.text
    assert response.streamed
    assert response.time_to_first_token_ms is not None
    assert response.usage.total_tokens > 0


async def test_streamed_tool_calls_split_across_chunks_are_merged_by_index():
    reply = {"text": "Let me check.", "tool_calls": [
        {"get_weather": {"city": "Berlin"}},
        {"name": "get_weather", "arguments": {"city": "Paris, France"}, "id": "call_x"}]}
    async with FakeModelServer({"default": [reply]}) as fake:
        llm = client(fake)
        response = await llm.complete(USER, TOOLS, stream=True)
        await llm.close()
    assert response.text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_1", "get_weather", {"city": "Berlin"}),
        ("call_x", "get_weather", {"city": "Paris, France"})]
    assert fake.requests[0].body["stream"] is True
    assert fake.requests[0].tool_names == ["get_weather"]


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_tool_arguments_are_reported_not_raised(stream):
    reply = {"tool_calls": [{"name": "get_weather", "arguments": "{\"city\": Ber"}]}
    async with FakeModelServer({"default": [reply]}) as fake:
        llm = client(fake)
        response = await llm.complete(USER, TOOLS, stream=stream)
        await llm.close()
    call = response.tool_calls[0]
    assert call.arguments is None
    assert call.raw_arguments == "{\"city\": Ber"
    assert call.parse_error


@pytest.mark.parametrize("status", [500, 429])
async def test_retries_after_server_errors(status):
    async with FakeModelServer({"default": [{"error": {"status": status}}, "recovered"]}) as fake:
        llm = client(fake, max_retries=2)
        response = await llm.complete(USER, None)
        await llm.close()
        fake.assert_done()
    assert response.text == "recovered"
    assert len(fake.requests) == 2


async def test_persistent_errors_become_an_llm_error_with_the_status_code():
    script = [{"error": {"status": 503, "message": "overloaded"}}] * 2
    async with FakeModelServer({"default": script}) as fake:
        llm = client(fake, max_retries=1)
        with pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert info.value.code == "llm.http_503"
    assert "overloaded" in str(info.value)


async def test_a_timeout_of_zero_or_less_cuts_the_call_at_once():
    script = {"default": [{"text": "partial answer here", "stall": True}]}
    async with FakeModelServer(script) as fake:
        llm = client(fake, timeout=-1.0, max_retries=0)
        with anyio.fail_after(5), pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert info.value.code == "llm.timeout"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_stalled_model_times_out(stream):
    script = {"default": [{"text": "partial answer here", "stall": True}]}
    async with FakeModelServer(script) as fake:
        llm = client(fake, timeout=0.5, max_retries=0)
        with anyio.fail_after(5), pytest.raises(LLMError) as info:
            await llm.complete(USER, None, stream=stream)
        await llm.close()
    assert info.value.code == "llm.timeout"


async def test_a_stream_that_trickles_is_cut_at_the_timeout():
    """Each chunk comes well within the timeout, the whole reply does not: ``timeout`` is a
    deadline for the whole reply, not for the wait between bytes."""
    text = "x" * 40  # 20 chunks of 2 characters, 0.25 s apart: 5 s in all
    script = {"default": [{"text": text, "delay_ms": 250}]}
    async with FakeModelServer(script, chunk_chars=2) as fake:
        llm = client(fake, timeout=1.0, max_retries=0)
        with anyio.fail_after(4), pytest.raises(LLMError) as info:
            await llm.complete(USER, None, stream=True)
        await llm.close()
    assert info.value.code == "llm.timeout"


async def test_a_plain_reply_that_trickles_is_cut_at_the_timeout():
    """A plain reply whose body arrives a few bytes at a time, each well within the timeout."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route
    from subagents.testing.mcp_http import serve_app

    body = ('{"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, '
            '"message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}')

    async def slowly():
        for start in range(0, len(body), 8):  # about 20 pieces, 0.25 s apart
            yield body[start:start + 8].encode()
            await anyio.sleep(0.25)

    async def completions(request: Request) -> StreamingResponse:
        return StreamingResponse(slowly(), media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with serve_app(app) as base:
        llm = LLMClient(ModelSettings(model="m", api_base=f"{base}/v1", timeout=1.0,
                                      max_retries=0))
        with anyio.fail_after(4), pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert info.value.code == "llm.timeout"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_dropped_connection_is_a_connection_error(stream):
    script = {"default": [{"text": "partial answer here", "drop": True}]}
    async with FakeModelServer(script) as fake:
        llm = client(fake, max_retries=0)
        with anyio.fail_after(5), pytest.raises(LLMError) as info:
            await llm.complete(USER, None, stream=stream)
        await llm.close()
    assert info.value.code == "llm.connection"


async def test_request_body_carries_model_options_and_tools():
    async with FakeModelServer({"default": ["ok"]}) as fake:
        llm = client(fake, temperature=0.2, max_completion_tokens=99)
        await llm.complete(USER, TOOLS)
        await llm.close()
    body = fake.requests[0].body
    assert body["model"] == "m"
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 99
    assert body["tools"] == TOOLS
    assert body["messages"] == USER


def test_model_group_resolution_uses_the_first_model():
    endpoints = EndpointsConfig.model_validate({"model_groups": [{"id": "g", "models": [
        {"model": "first", "api_base": "http://127.0.0.1:1/v1", "timeout": 3,
         "reasoning_effort": "low"},
        {"model": "second"}]}]})
    settings = resolve_model_settings({"model_group": "g"}, endpoints)
    assert (settings.model, settings.timeout) == ("first", 3.0)
    assert settings.options["reasoning_effort"] == "low"
    with pytest.raises(ConfigError) as info:
        resolve_model_settings({"model_group": "nope"}, endpoints)
    assert info.value.code == "agent.validation.llm.unknown_model_group"


async def test_a_missing_api_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        await LLMClient(ModelSettings(model="m")).complete(USER, None)
    assert info.value.code == "llm.api_key_missing"
    monkeypatch.delenv("MY_LLM_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        await LLMClient(ModelSettings(model="m", api_key="${MY_LLM_KEY}")).complete(USER, None)
    assert info.value.code == "config.env_var_missing"
    assert "MY_LLM_KEY" in str(info.value)


async def test_the_api_key_from_the_environment_is_sent(monkeypatch):
    monkeypatch.setenv("MY_LLM_KEY", "sk-test-123")
    async with FakeModelServer({"default": ["ok"]}) as fake:
        llm = LLMClient(ModelSettings(model="m", api_base=fake.base_url(), api_key="${MY_LLM_KEY}"))
        await llm.complete(USER, None)
        await llm.close()
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test-123"


@pytest.mark.parametrize("headers", [{"x-should-retry": "false"}, {"retry-after": "500"}],
                         ids=["should-retry-false", "retry-after-too-long"])
async def test_an_error_the_endpoint_says_not_to_retry_is_not_retried(headers):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from subagents.testing.mcp_http import serve_app

    calls = []

    async def completions(request):
        calls.append(request.headers.get("authorization"))
        return JSONResponse({"error": {"message": "busy"}}, status_code=503, headers=headers)

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with serve_app(app) as base:
        llm = LLMClient(ModelSettings(model="m", api_base=f"{base}/v1", api_key="sk-test",
                                      max_retries=3))
        with anyio.fail_after(10), pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert info.value.code == "llm.http_503"
    assert calls == ["Bearer sk-test"]


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_post_json(stream):
    async with FakeModelServer({"default": ["ok"]}) as fake:
        llm = client(fake)
        await llm.complete(USER, None, stream=stream)
        await llm.close()
    assert fake.requests[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_proxy_from_the_environment_carries_plain_and_streamed_calls(monkeypatch,
                                                                             stream):
    """HTTP_PROXY applies to every call: the request goes to the proxy with the endpoint's
    absolute URL (a proxy that answers as the model here)."""
    import asyncio
    import json

    seen: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        seen.append(lines[0])
        length = next(int(line.split(":", 1)[1]) for line in lines
                      if line.lower().startswith("content-length:"))
        request = json.loads(await reader.readexactly(length))
        if request.get("stream"):
            chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "via the proxy"},
                                             "finish_reason": "stop"}]})
            body = f"data: {chunk}\n\ndata: [DONE]\n\n".encode()
            kind = b"text/event-stream"
        else:
            body = json.dumps({"choices": [{"index": 0, "message": {
                "role": "assistant", "content": "via the proxy"},
                "finish_reason": "stop"}]}).encode()
            kind = b"application/json"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: %b\r\n"
                     b"content-length: %d\r\nconnection: close\r\n\r\n%b"
                     % (kind, len(body), body))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    llm = LLMClient(ModelSettings(model="m", api_base="http://model.invalid:8000/v1",
                                  api_key="sk-test", max_retries=0))
    try:
        with anyio.fail_after(10):
            response = await llm.complete(USER, None, stream=stream)
    finally:
        await llm.close()
        server.close()
        await server.wait_closed()
    assert response.text == "via the proxy"
    assert seen == ["POST http://model.invalid:8000/v1/chat/completions HTTP/1.1"]


def test_plain_calls_work_on_uvloop():
    """``serve`` runs on uvloop when it is installed (uvicorn's default), whose transports
    are not asyncio's own classes."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> tuple[str | None, str | None]:
        async with FakeModelServer({"default": ["first", "second"]}) as fake:
            llm = client(fake)
            first = await llm.complete(USER, None)
            second = await llm.complete(USER, None)  # on the kept connection
            await llm.close()
            fake.assert_done()
        return first.text, second.text

    assert uvloop.run(main()) == ("first", "second")


async def test_a_header_with_a_line_break_is_a_settings_error_not_a_bad_reply():
    llm = LLMClient(ModelSettings(model="m", api_base="http://127.0.0.1:9/v1",
                                  headers={"X-Team": "a\r\nInjected: 1"}, max_retries=0))
    with pytest.raises(LLMError) as info:
        await llm.complete(USER, None)
    await llm.close()
    assert info.value.code == "llm.header_invalid"
    assert "X-Team" in str(info.value)


async def test_an_error_reply_with_an_empty_compressed_body_keeps_its_status():
    """A 401 with `Content-Encoding: gzip` and no body is the auth error, not a connection
    error retried three times."""
    import asyncio

    seen: list[bytes] = []

    async def model(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            seen.append(head)
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Encoding: gzip\r\n"
                         b"Content-Length: 0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(model, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    llm = LLMClient(ModelSettings(model="m", api_base=f"http://127.0.0.1:{port}/v1",
                                  api_key="sk-test", max_retries=2))
    try:
        with anyio.fail_after(10), pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
    finally:
        await llm.close()
        server.close()
        await server.wait_closed()
    assert info.value.code == "llm.auth"
    assert len(seen) == 1


async def test_an_endpoint_that_is_not_http_is_a_settings_error():
    llm = LLMClient(ModelSettings(model="m", api_base="ftp://127.0.0.1:9/v1", max_retries=0))
    with pytest.raises(LLMError) as info:
        await llm.complete(USER, None)
    await llm.close()
    assert info.value.code == "llm.api_base_invalid"
