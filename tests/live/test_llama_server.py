"""The project's model client against a real model server: llama.cpp on SmolLM2-135M.

A ``self-hosted`` model group pointing at the server of :func:`tests.live.conftest.live_model`;
plain and streamed completions, the reply-length cap and the client's timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from subagents.exceptions import LLMError
from subagents.llm import LLMClient

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
