"""Running tool calls: argument validation, timeouts, errors as results, parallel policy.

Read-only tools run concurrently (at most ``max_parallel`` at once); any other tool runs alone,
after the read-only calls before it finished and before the ones after it start. Outcomes come
back in call order.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import time
from typing import Any

import anyio
import structlog

from ..agents.schemas import AgentToolResult
from ..exceptions import ToolArgumentsError, ToolInvocationError, ToolTimeoutError
from ..observability import traced_tool_call
from .base import CallContext, PlannedCall, Tool, ToolOutcome

log = structlog.get_logger("subagents.tools")


@functools.lru_cache(maxsize=512)
def _validator_for(schema_json: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_json))


def _validator(tool: Tool) -> Any:
    """Validators are cached by the schema's content (never by object identity)."""
    schema = tool.schema.parameters or {"type": "object"}
    return _validator_for(json.dumps(schema, sort_keys=True))


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """Fill top-level defaults, then check against the schema; raise ToolArgumentsError."""
    schema = tool.schema.parameters
    if not schema or not tool.validate_arguments:
        return arguments
    filled = dict(arguments)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(prop, dict) and "default" in prop:
            filled[name] = prop["default"]
    errors = sorted(_validator(tool).iter_errors(filled), key=lambda e: list(e.path))
    if errors:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message}" for e in errors[:5])
        raise ToolArgumentsError(f"invalid arguments for {tool.name!r}: {problems}. "
                                 "The tool was not run; call it again with valid arguments")
    return filled


@traced_tool_call
async def invoke_tool(tool: Tool, arguments: dict[str, Any], ctx: CallContext) -> AgentToolResult:
    """Run one tool; every failure becomes an error result (never an exception)."""
    timeout = tool.timeout or ctx.timeout
    try:
        args = validate_arguments(tool, arguments)
        with anyio.fail_after(timeout + 1.0):  # the runner enforces `timeout`; this is a backstop
            outcome: Any = tool.run(args, CallContext(ctx.agent_input, ctx.tool_context, timeout))
            result = await outcome if inspect.isawaitable(outcome) else outcome
        if not isinstance(result, AgentToolResult):
            raise ToolInvocationError(f"tool {tool.name!r} returned {type(result).__name__}, "
                                      "not an AgentToolResult")
        return result
    except TimeoutError:
        return _error(tool.name, f"tool {tool.name!r} did not finish within {timeout:g}s",
                      "tool.timeout")
    except ToolInvocationError as exc:
        return _error(tool.name, str(exc), exc.code)
    except Exception as exc:  # noqa: BLE001 - a failing tool must not end the conversation
        log.warning("agent.tool.raised", tool=tool.name, error_type=type(exc).__name__)
        return _error(tool.name, f"tool {tool.name!r} failed: {type(exc).__name__}: {exc}",
                      "tool.failed")


def _error(name: str, message: str, code: str) -> AgentToolResult:
    log.info("agent.tool.error", tool=name, code=code)
    return AgentToolResult(tool_name=name, is_error=True, error_message=message)


async def _one(call: PlannedCall, ctx: CallContext) -> ToolOutcome:
    assert call.tool is not None
    started = time.monotonic()
    result = await invoke_tool(call.tool, call.arguments, ctx)
    return ToolOutcome(call=call, result=result, started=started, finished=time.monotonic())


async def execute_calls(calls: list[PlannedCall], ctx: CallContext, *,
                        max_parallel: int = 3) -> list[ToolOutcome]:
    """Execute ``calls`` (all with a tool) under the parallel policy; outcomes in call order."""
    outcomes: list[ToolOutcome] = []
    batch: list[PlannedCall] = []
    limiter = asyncio.Semaphore(max(1, max_parallel))

    async def limited(call: PlannedCall) -> ToolOutcome:
        async with limiter:
            return await _one(call, ctx)

    async def flush() -> None:
        if batch:
            outcomes.extend(await asyncio.gather(*(limited(c) for c in batch)))
            batch.clear()

    for call in calls:
        assert call.tool is not None
        if call.tool.read_only:
            batch.append(call)
            continue
        await flush()
        outcomes.append(await _one(call, ctx))
    await flush()
    return outcomes


__all__ = ["ToolTimeoutError", "execute_calls", "invoke_tool", "validate_arguments"]
