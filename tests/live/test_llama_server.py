"""The project's model client against a real model server: llama.cpp on SmolLM2-135M.

A ``self-hosted`` model group pointing at the server of :func:`tests.live.conftest.live_model`;
plain and streamed completions, the reply-length cap and the client's timeout, a reply under
a JSON schema through constrained output (``structured_output``; tool calls through it are in
``test_example_assistant.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import jsonschema
import pytest
from subagents.exceptions import LLMError
from subagents.llm import LLMClient, build_model, schema_format

from tests.live.conftest import MAX_TOKENS, LiveModel

pytestmark = pytest.mark.xdist_group("live_model")

MESSAGES = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "Name three colours."}]
LONG_REPLY = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]


@pytest.fixture
async def client(live_model: LiveModel) -> AsyncIterator[LLMClient]:
    """The project's model client on the live server, capped at MAX_TOKENS."""
    llm = LLMClient(live_model.settings(), name="live")
    try:
        yield llm
    finally:
        await llm.close()


async def test_plain_completion(client: LLMClient) -> None:
    with anyio.fail_after(60):
        response = await client.complete(MESSAGES, None)
    assert response.text is not None
    assert response.text.strip()
    assert response.tool_calls == []
    assert not response.streamed
    assert response.finish_reason in ("stop", "length")
    assert response.usage.prompt_tokens > 0
    assert 0 < response.usage.completion_tokens <= MAX_TOKENS


async def test_streamed_completion(client: LLMClient) -> None:
    deltas: list[str] = []

    async def on_text(delta: str) -> None:
        deltas.append(delta)

    with anyio.fail_after(60):
        response = await client.complete(MESSAGES, None, stream=True, on_text=on_text)
    assert len(deltas) > 1  # token by token, not one block
    assert "".join(deltas) == response.text
    assert response.streamed
    assert response.time_to_first_token_ms is not None
    assert response.time_to_first_token_ms <= response.total_time_ms
    # the usage chunk at the end of the stream (stream_options.include_usage)
    assert 0 < response.usage.completion_tokens <= MAX_TOKENS


async def test_reply_length_cap_holds(live_model: LiveModel) -> None:
    llm = LLMClient(live_model.settings(max_tokens=4), name="live")
    try:
        with anyio.fail_after(60):
            response = await llm.complete(LONG_REPLY, None)
    finally:
        await llm.close()
    assert response.usage.completion_tokens == 4
    assert response.finish_reason == "length"


async def test_slow_reply_is_a_timeout_error(live_model: LiveModel) -> None:
    # 48 tokens take the model over a second on one thread: a 50 ms timeout always expires
    llm = LLMClient(live_model.settings(timeout=0.05), name="live")
    try:
        with anyio.fail_after(60), pytest.raises(LLMError) as caught:
            await llm.complete(LONG_REPLY, None)
    finally:
        await llm.close()
    assert caught.value.code == "llm.timeout"


COMMANDS = {"type": "object", "additionalProperties": False, "required": ["commands"],
            "properties": {"commands": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
                "type": "object", "additionalProperties": False, "required": ["flow"],
                "properties": {"flow": {"enum": ["check_weather", "book_table"]}}}}}}


async def test_a_reply_under_a_json_schema_is_compact_valid_json(live_model: LiveModel) -> None:
    llm = build_model(live_model.settings(structured_output="json_schema", max_tokens=96),
                      name="live")
    messages = [{"role": "user", "content": "Which flow fits 'is it raining in Oslo?' "
                 "Answer with JSON."}]
    try:
        with anyio.fail_after(60):
            response = await llm.complete(
                messages, None, options={"response_format": schema_format("commands", COMMANDS)})
    finally:
        await llm.close()
    assert response.finish_reason == "stop"
    jsonschema.validate(json.loads(response.text or ""), COMMANDS)
    assert "\n" not in (response.text or "")  # llama.cpp was told: no line breaks
