"""Per-step trace of a run for channels that ask for it (the inspector's SSE stream).

A channel opts in with a true ``wants_trace`` attribute and a
``send_trace(recipient_id, kind, data)`` coroutine; every other channel gets nothing and the
loop pays nothing. The records carry what the model saw and said and what the tools did; they
never carry tool-context metadata (it is not part of the model's messages or the call
arguments) nor credentials (model settings are not traced).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from subagents.agents.run import Run
from subagents.llm import LLMResponse
from subagents.tools.base import Deferral, ToolOutcome
from subagents.types import AgentOutput, ChatMessage, JsonObject, TrackerEvent

RAW_LIMIT = 20_000
"""Characters of a raw request or response kept in a trace record."""

_TEXT_KINDS = {"filler_message": "filler", "input_required": "question",
               "final_response": "final"}


def tracing(run: Run) -> bool:
    """Whether the run's channel wants trace records."""
    return run.tracing


async def _emit(run: Run, kind: str, data: JsonObject) -> None:
    assert run.channel is not None
    assert run.recipient_id is not None
    await run.channel.send_trace(run.recipient_id, kind, data)  # type: ignore[attr-defined]


def _capped(value: Any) -> Any:
    text = json.dumps(value, default=str)
    if len(text) <= RAW_LIMIT:
        return value
    return {"truncated": True, "chars": len(text), "head": text[:RAW_LIMIT]}


async def run_started(run: Run, agent: str) -> None:
    """The run begins: its agent and the tools it may call."""
    if tracing(run):
        await _emit(run, "agent_run_start", {"agent": agent, "tools": sorted(run.tools)})


async def model_call(run: Run, agent: str, messages: list[ChatMessage],
                     offered: list[JsonObject], response: LLMResponse) -> None:
    """One model call: duration, tokens, offered tools, what came back, and the raw exchange."""
    if not tracing(run):
        return
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments}
             for c in response.tool_calls]
    names = [str(t.get("function", {}).get("name", "")) for t in offered]
    await _emit(run, "agent_step", {
        "agent": agent, "step": run.steps,
        "duration_ms": round(response.total_time_ms, 1),
        "time_to_first_token_ms": response.time_to_first_token_ms,
        "prompt_tokens": response.usage.prompt_tokens,
        "completion_tokens": response.usage.completion_tokens,
        "offered_tools": names, "text": response.text or "", "tool_calls": calls,
        "finish_reason": response.finish_reason,
        "raw": {"request": _capped({"messages": messages, "tools": offered}),
                "response": _capped({"text": response.text, "tool_calls": calls,
                                     "finish_reason": response.finish_reason})}})


def _overlaps(one: ToolOutcome, others: list[ToolOutcome]) -> bool:
    return any(o is not one and o.started < one.finished and one.started < o.finished
               for o in others)


async def tool_calls(run: Run, agent: str, outcomes: list[ToolOutcome]) -> None:
    """Each call of a step: server, arguments, result or error, duration, parallel or alone;
    deferred calls become waits (approval, client tool)."""
    if not tracing(run):
        return
    ran = [o for o in outcomes if o.deferred is None]
    for outcome in outcomes:
        call, tool = outcome.call, outcome.call.tool
        source = tool.source if tool is not None else ""
        if outcome.deferred is not None:
            await _emit(run, "agent_wait", {
                "agent": agent, "step": run.steps, "tool": call.name,
                "arguments": call.arguments,
                "waiting_for": ("client_tool" if outcome.deferred == Deferral.CLIENT
                                else "approval")})
            continue
        result = outcome.result
        await _emit(run, "agent_tool_call", {
            "agent": agent, "step": run.steps, "id": call.id, "tool": call.name,
            "server": source.removeprefix("mcp:") if source.startswith("mcp:") else None,
            "source": source, "arguments": call.arguments,
            "result": None if result.is_error else result.result,
            "is_error": result.is_error, "error": result.error_message,
            "duration_ms": round(outcome.duration_ms, 1),
            "parallel": _overlaps(outcome, ran)})


async def resumed_calls(run: Run, agent: str, events: Sequence[TrackerEvent]) -> None:
    """Calls run when the run resumed (approved calls), before its first step (step 0)."""
    if not tracing(run):
        return
    for event in events:
        if event.get("event") != "mcp_tool_executed":
            continue
        name = str(event.get("tool_name"))
        tool = run.tools.get(name)
        source = tool.source if tool is not None else ""
        await _emit(run, "agent_tool_call", {
            "agent": agent, "step": 0, "id": None, "tool": name,
            "server": source.removeprefix("mcp:") if source.startswith("mcp:") else None,
            "source": source, "arguments": event.get("arguments"),
            "result": None if event.get("is_error") else event.get("result"),
            "is_error": bool(event.get("is_error")), "error": event.get("error_message"),
            "duration_ms": event.get("duration_ms"),
            "parallel": False, "resumed": True})


async def texts(run: Run, agent: str, events: Sequence[TrackerEvent]) -> None:
    """The texts a step recorded, each with its kind (filler, question, final)."""
    if not tracing(run):
        return
    for event in events:
        if event.get("event") != "bot":
            continue
        meta = event.get("metadata") or {}
        kind = str(meta.get("agent_message_type") or "")
        await _emit(run, "agent_text", {"agent": agent, "step": run.steps,
                                        "text": event.get("text"),
                                        "kind": _TEXT_KINDS.get(kind, kind or "text")})


async def run_finished(run: Run, agent: str, output: AgentOutput) -> None:
    """The run ends: status, exit reason, steps, calls, tokens."""
    if tracing(run):
        await _emit(run, "agent_run_end", {
            "agent": agent, "status": str(output.status.value), "exit_reason": output.exit_reason,
            "steps": output.steps, "tool_calls": output.tool_calls,
            "error": output.error_message, "usage": output.usage})
