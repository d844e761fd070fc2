"""The model call of a step and the delivery of text and events to the output channel."""

from __future__ import annotations

from subagents.agents._plan import AgentRun
from subagents.llm import LLMResponse, Model
from subagents.types import ChatMessage, JsonObject, OutputChannel, TrackerEvent


async def generate(llm: Model, run: AgentRun, messages: list[ChatMessage],
                   tools: list[JsonObject]) -> LLMResponse:
    """Call the model once (streamed to the channel when it streams); count the step."""
    channel, recipient = run.channel, run.recipient_id
    run.steps += 1
    if channel is None or recipient is None or not channel.wants_streaming():
        response = await llm.complete(messages, tools or None, scope=run.scope)
    else:
        response = await _stream(llm, channel, recipient, messages, tools, run)
    run.add_usage(response.usage, response.model)
    return response


async def _stream(llm: Model, channel: OutputChannel, recipient: str,
                  messages: list[ChatMessage], tools: list[JsonObject], run: AgentRun
                  ) -> LLMResponse:
    started = False
    leading = ""

    async def on_text(delta: str) -> None:
        # leading whitespace is held back, so a whitespace-only reply is never sent
        nonlocal started, leading
        if not started:
            leading += delta
            if not leading.strip():
                return
            started, delta = True, leading
            await channel.send_response_chunk_start(recipient)
        await channel.send_response_chunk(recipient, delta)

    try:
        response = await llm.complete(messages, tools or None, stream=True, on_text=on_text,
                                      scope=run.scope)
    except BaseException:
        if started:
            await channel.send_response_chunk_end(recipient, interrupted=True)
        raise
    if started:
        await channel.send_response_chunk_end(recipient)
    return response


async def deliver(run: AgentRun, text: str) -> None:
    """Send one whole message to the user (no-op without a channel)."""
    if run.channel is not None and run.recipient_id is not None:
        await run.channel.send_text_message(run.recipient_id, text)


async def send_event(run: AgentRun, event: TrackerEvent) -> None:
    """Show an event on channels that show them (no-op without a channel)."""
    if run.channel is not None and run.recipient_id is not None:
        await run.channel.send_event(run.recipient_id, event)
