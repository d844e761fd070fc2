"""Running one tool call: argument validation, the per-tool timeout, errors as results.

The timeout is the tool's own (``configuration.tools.<name>.timeout``) or the agent's
``tool_timeout``; each progress report of a running call restarts it, up to ten times the timeout
in all. Every failure becomes an error result the model reads; nothing raises.
How several calls of one response share time is in :mod:`subagents.tools.concurrency`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import time
from collections.abc import Awaitable
from typing import Any

import structlog

from subagents.exceptions import ToolArgumentsError, ToolInvocationError, ToolTimeoutError
from subagents.mcp.connection import PROGRESS_MAX_FACTOR
from subagents.observability import traced_tool_call
from subagents.tools.base import CallContext, PlannedCall, ProgressSink, Tool, ToolOutcome
from subagents.types import AgentToolResult, JsonObject

log = structlog.get_logger("subagents.tools")


@functools.lru_cache(maxsize=512)
def _validator_for(schema_json: str) -> Any:
    """A validator of the draft the schema names in ``$schema`` (2020-12 when it names none);
    None when the schema is not valid under that draft, so the server alone checks arguments."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        log.warning("agent.tool.schema_invalid", draft=cls.__name__, error=exc.message)
        return None
    return cls(schema)


def _validator(tool: Tool) -> Any:
    """Validators are cached by the schema's content (never by object identity)."""
    schema = tool.schema.parameters or {"type": "object"}
    return _validator_for(json.dumps(schema, sort_keys=True))


_PLAIN_OBJECT_KEYS = frozenset({"type", "properties", "required", "title", "description",
                                "$schema", "additionalProperties"})


def _cannot_reject(schema: JsonObject, arguments: JsonObject) -> bool:
    """Whether ``schema`` surely accepts ``arguments`` (a JSON object) as they are: it declares
    no properties and requires none, and either the arguments are empty or it allows any extra
    property. The common tool without arguments then needs no validator."""
    if schema.get("type") != "object" or not _PLAIN_OBJECT_KEYS.issuperset(schema) \
            or schema.get("properties") or schema.get("required"):
        return False
    return not arguments or schema.get("additionalProperties", True) is True


def validate_arguments(tool: Tool, arguments: JsonObject) -> JsonObject:
    """Fill top-level defaults, then check against the schema; raise ToolArgumentsError."""
    schema = tool.schema.parameters
    if not schema or not tool.validate_arguments:
        return arguments
    if _cannot_reject(schema, arguments):
        return dict(arguments)
    filled = dict(arguments)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(prop, dict) and "default" in prop:
            filled[name] = prop["default"]
    validator = _validator(tool)
    if validator is None:
        return filled
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.path))
    if errors:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message}" for e in errors[:5])
        raise ToolArgumentsError(f"invalid arguments for {tool.name!r}: {problems}. "
                                 "The tool was not run; call it again with valid arguments")
    return filled


BACKSTOP_GRACE = 1.0
"""Seconds the backstop gives a runner beyond its own timeout (the runner reports it first)."""


class _Backstop:
    """The executor's own limit on an awaited call: ``timeout`` (plus a grace) from the start,
    restarted by each progress report the call makes, up to ``PROGRESS_MAX_FACTOR`` times the
    timeout in all: the rule the MCP connection applies to the call itself. Its timer starts
    when the call is awaited: a call answered at once never needs one."""

    def __init__(self, timeout: float, sink: ProgressSink | None) -> None:
        self._timeout, self._sink = timeout, sink
        self._timer: asyncio.Timeout | None = None
        self._limit = 0.0

    async def run(self, outcome: Awaitable[Any]) -> Any:
        """Await ``outcome`` within the limit (TimeoutError when it is reached)."""
        now = asyncio.get_running_loop().time()
        self._limit = now + self._timeout * PROGRESS_MAX_FACTOR + BACKSTOP_GRACE
        self._timer = asyncio.timeout_at(now + self._timeout + BACKSTOP_GRACE)
        try:
            async with self._timer:
                return await outcome
        finally:
            self._timer = None

    async def on_progress(self, tool: str, progress: float, total: float | None,
                          message: str | None) -> None:
        """A progress report: the call has ``timeout`` again (within the limit)."""
        if self._timer is not None:
            self._timer.reschedule(min(asyncio.get_running_loop().time() + self._timeout
                                       + BACKSTOP_GRACE, self._limit))
        if self._sink is not None:
            await self._sink(tool, progress, total, message)


async def invoke_tool(tool: Tool, arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
    """Run one tool; every failure becomes an error result (never an exception). A recorded
    turn records the call and its result."""
    result = await _invoke(tool, arguments, ctx)
    recorder = None if ctx.scope is None else ctx.scope.recorder
    if recorder is not None:
        recorder.record_tool_call(tool, arguments, result)
    return result


@traced_tool_call
async def _invoke(tool: Tool, arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
    timeout = tool.timeout or ctx.timeout
    try:
        args = validate_arguments(tool, arguments)
        # the runner enforces `timeout`; this is a backstop. Only an awaitable can overrun it:
        # a runner that answers at once (a synchronous custom tool) needs no timer
        backstop = _Backstop(timeout, ctx.on_progress)
        ctx = CallContext(ctx.agent_input, ctx.tool_context, timeout, ctx.effects,
                          backstop.on_progress, ctx.scope)
        outcome: Any = tool.run(args, ctx)
        if type(outcome) is AgentToolResult:  # answered at once (a plain result never awaits)
            result = outcome
        elif inspect.isawaitable(outcome):
            result = await backstop.run(outcome)
        else:
            result = outcome
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


class FunctionToolset:
    """Plain tools, run with argument validation, timeouts and errors as results."""

    def __init__(self, tools: list[Tool], *, max_result_chars: int | None = None) -> None:
        self.max_result_chars = max_result_chars
        """Longer results are cut and marked (a safety cap; the tracker keeps the cut text)."""
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self._tools.setdefault(tool.name, tool)

    def tools(self) -> list[Tool]:
        """The tools, first of each name kept."""
        return list(self._tools.values())

    async def call(self, call: PlannedCall, ctx: CallContext) -> ToolOutcome:
        """Run the call's tool and time it."""
        assert call.tool is not None
        call_ctx = ctx.for_call()
        started = time.monotonic()
        result = await invoke_tool(call.tool, call.arguments, call_ctx)
        text, cap = result.result, self.max_result_chars
        if cap is not None and text is not None and len(text) > cap:
            log.warning("agent.tool.result_capped", tool=call.name, chars=len(text), cap=cap)
            result = result.model_copy(update={"result": text[:cap] + (
                f"\n[Result cut: {len(text)} characters in all, the first {cap} are shown.]")})
        return ToolOutcome(call=call, result=result, started=started, finished=time.monotonic(),
                           effects=list(call_ctx.effects))


__all__ = ["FunctionToolset", "ToolTimeoutError", "invoke_tool", "validate_arguments"]
