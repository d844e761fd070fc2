"""Metrics (Prometheus) and traces (OpenTelemetry), both optional and off by default.

A leaf: it imports nothing of the package. The rest of the package marks the interesting calls
with the decorators below: a turn (:func:`traced_turn`), command generation
(:func:`traced_command_generation`), an agent run (:func:`traced_agent_run`) and a tool call
(:func:`traced_tool_call`); model calls run through :func:`observe_model_call` (the model
wrapper :class:`subagents.llm.wrappers.InstrumentedModel` calls it). While nothing is enabled
each costs one attribute check. Token usage and recordings are not kept here: they travel with
the turn (:class:`subagents.types.CallScope`).

* :func:`enable_metrics` (extra ``metrics``: prometheus-client) records counters and latency
  histograms in a registry of their own; :func:`metrics_payload` renders it for ``GET /metrics``.
* :func:`enable_tracing` (extra ``tracing``: opentelemetry-sdk, and the OTLP/HTTP exporter when
  an endpoint is given) records one span per call, nested as the calls are: turn -> command
  generation, turn -> agent run -> model call / tool call. Model calls follow the OpenTelemetry
  GenAI semantic conventions (``gen_ai.*`` attributes: operation, provider, model, tokens).

Spans and metrics carry names (agent, model, tool, MCP server), counts and durations only:
never message text, tool arguments or results, or metadata.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

ACTIVE_WINDOW_SECONDS = 15 * 60
"""A conversation counts as active while its last message is at most this old."""


@dataclass
class _Metrics:
    registry: Any
    turns: Any
    turn_seconds: Any
    turns_in_progress: Any
    active_conversations: Any
    command_generation_seconds: Any
    agent_runs: Any
    agent_run_seconds: Any
    model_calls: Any
    model_errors: Any
    model_seconds: Any
    tokens: Any
    tool_calls: Any
    tool_errors: Any
    tool_seconds: Any
    last_seen: dict[str, float] = field(default_factory=dict)


@dataclass
class _State:
    metrics: _Metrics | None = None
    tracer: Any = None
    provider: Any = None

    @property
    def on(self) -> bool:
        return self.metrics is not None or self.tracer is not None


_state = _State()


# ---------------------------------------------------------------------- switching on and off
def enable_metrics() -> None:
    """Start recording Prometheus metrics (needs the ``metrics`` extra)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    registry = CollectorRegistry()
    seconds = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60)

    def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
        return Counter(name, doc, labels, registry=registry)

    def histogram(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
        return Histogram(name, doc, labels, registry=registry, buckets=seconds)

    _state.metrics = _Metrics(
        registry=registry,
        turns=counter("subagents_turns", "Handled user messages", ("outcome",)),
        turn_seconds=histogram("subagents_turn_duration_seconds", "Time to handle a message"),
        turns_in_progress=Gauge("subagents_turns_in_progress", "Messages being handled",
                                registry=registry),
        active_conversations=Gauge(
            "subagents_active_conversations",
            f"Conversations with a message in the last {ACTIVE_WINDOW_SECONDS // 60} minutes",
            registry=registry),
        command_generation_seconds=histogram(
            "subagents_command_generation_duration_seconds", "Time to understand a message"),
        agent_runs=counter("subagents_agent_runs", "Sub agent runs", ("agent", "status")),
        agent_run_seconds=histogram("subagents_agent_run_duration_seconds",
                                    "Time of one sub agent run", ("agent",)),
        model_calls=counter("subagents_model_calls", "Model calls", ("caller", "model")),
        model_errors=counter("subagents_model_call_errors", "Failed model calls",
                             ("caller", "model", "code")),
        model_seconds=histogram("subagents_model_call_duration_seconds", "Time of a model call",
                                ("caller", "model")),
        tokens=counter("subagents_model_tokens", "Tokens used by model calls",
                       ("caller", "model", "kind")),
        tool_calls=counter("subagents_tool_calls", "Tool calls", ("server", "tool")),
        tool_errors=counter("subagents_tool_call_errors", "Tool calls that returned an error",
                            ("server", "tool")),
        tool_seconds=histogram("subagents_tool_call_duration_seconds", "Time of a tool call",
                               ("server", "tool")),
    )


def enable_tracing(*, endpoint: str | None = None, exporter: Any = None,
                   service_name: str = "subagents") -> None:
    """Start recording spans (needs the ``tracing`` extra).

    Args:
        endpoint: OTLP/HTTP traces endpoint, e.g. ``http://127.0.0.1:4318/v1/traces``.
        exporter: Any OpenTelemetry span exporter instead (tests use the in-memory one); it
            is flushed span by span.
        service_name: The ``service.name`` resource attribute.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _state.provider = provider
    _state.tracer = provider.get_tracer("subagents")


def disable() -> None:
    """Stop recording; pending spans are flushed."""
    if _state.provider is not None:
        _state.provider.shutdown()
    _state.metrics = _state.tracer = _state.provider = None


def metrics_enabled() -> bool:
    """Whether :func:`enable_metrics` was called."""
    return _state.metrics is not None


def metrics_payload() -> tuple[bytes, str]:
    """The Prometheus text exposition of every metric, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    if _state.metrics is None:
        raise RuntimeError("metrics are not enabled")
    return generate_latest(_state.metrics.registry), CONTENT_TYPE_LATEST


# ---------------------------------------------------------------------- spans
@contextlib.contextmanager
def _span(name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    if _state.tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    kind = SpanKind.CLIENT if name.startswith(("chat", "execute_tool")) else SpanKind.INTERNAL
    with _state.tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        yield span


def _fail(span: Any, exc: BaseException) -> None:
    if span is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", getattr(exc, "code", None) or type(exc).__name__)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else args[index] if len(args) > index else None


# ---------------------------------------------------------------------- decorators
def traced_turn(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """For ``handle_message(self, sender_id, text, ...)``: one span and metrics per turn."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not _state.on:
            return await fn(*args, **kwargs)
        return await _observed_turn(fn, args, kwargs)

    return wrapper


async def _observed_turn(fn: Callable[..., Awaitable[R]], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> R:
    sender = str(_arg(args, kwargs, 1, "sender_id"))
    metrics = _state.metrics
    if metrics is not None:
        now = time.monotonic()
        metrics.last_seen[sender] = now
        for key in [k for k, seen in metrics.last_seen.items()
                    if now - seen > ACTIVE_WINDOW_SECONDS]:
            del metrics.last_seen[key]
        metrics.active_conversations.set(len(metrics.last_seen))
        metrics.turns_in_progress.inc()
    started, outcome = time.perf_counter(), "error"
    try:
        with _span("subagents.turn", {"subagents.conversation.id": sender}) as span:
            try:
                result = await fn(*args, **kwargs)
            except Exception as exc:
                _fail(span, exc)
                raise
        outcome = "ok"
        return result
    finally:
        if metrics is not None:
            metrics.turns_in_progress.dec()
            metrics.turns.labels(outcome).inc()
            metrics.turn_seconds.observe(time.perf_counter() - started)


def traced_command_generation(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """For the method that turns a user message into commands."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not _state.on:
            return await fn(*args, **kwargs)
        started = time.perf_counter()
        try:
            with _span("subagents.command_generation", {}) as span:
                result = await fn(*args, **kwargs)
                if span is not None and isinstance(result, list):
                    span.set_attribute("subagents.commands",
                                       [type(c).__name__ for c in result])
                return result
        finally:
            if _state.metrics is not None:
                _state.metrics.command_generation_seconds.observe(time.perf_counter() - started)

    return wrapper


def traced_agent_run(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """For ``MCPBaseAgent.run(self, input, ...)``: the agent's name and its final status."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not _state.on:
            return await fn(*args, **kwargs)
        agent = args[0]
        name = str(getattr(agent, "name", type(agent).__name__))
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                      "subagents.agent.protocol": str(getattr(agent, "protocol_type", ""))}
        started, status = time.perf_counter(), "error"
        try:
            with _span(f"invoke_agent {name}", attributes) as span:
                try:
                    result = await fn(*args, **kwargs)
                except Exception as exc:
                    _fail(span, exc)
                    raise
                status = str(getattr(getattr(result, "status", None), "value",
                                     getattr(result, "status", "unknown")))
                if span is not None:
                    span.set_attribute("subagents.agent.status", status)
                return result
        finally:
            if _state.metrics is not None:
                _state.metrics.agent_runs.labels(name, status).inc()
                _state.metrics.agent_run_seconds.labels(name).observe(
                    time.perf_counter() - started)

    return wrapper


def _tokens(response: Any) -> tuple[int, int]:
    counts = getattr(response, "usage", None)
    return (int(getattr(counts, "prompt_tokens", 0) or 0),
            int(getattr(counts, "completion_tokens", 0) or 0))


def enabled() -> bool:
    """Whether spans or metrics are being recorded (callers skip the work when not)."""
    return _state.on


async def observe_model_call(caller: str, model: str, provider: str, stream: bool,
                             call: Callable[[], Awaitable[R]]) -> R:
    """Run one model call inside a GenAI ``chat`` span, counting it in the metrics."""
    if not _state.on:
        return await call()
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                  "gen_ai.system": provider, "gen_ai.request.model": model,
                  "subagents.caller": caller, "subagents.stream": stream}
    metrics = _state.metrics
    started = time.perf_counter()
    try:
        with _span(f"chat {model}", attributes) as span:
            try:
                result = await call()
            except Exception as exc:
                _fail(span, exc)
                if metrics is not None:
                    code = str(getattr(exc, "code", None) or type(exc).__name__)
                    metrics.model_errors.labels(caller, model, code).inc()
                raise
            prompt, completion = _tokens(result)
            if span is not None:
                span.set_attribute("gen_ai.usage.input_tokens", prompt)
                span.set_attribute("gen_ai.usage.output_tokens", completion)
                reason = getattr(result, "finish_reason", None)
                if reason:
                    span.set_attribute("gen_ai.response.finish_reasons", [str(reason)])
            if metrics is not None:
                metrics.tokens.labels(caller, model, "input").inc(prompt)
                metrics.tokens.labels(caller, model, "output").inc(completion)
            return result
    finally:
        if metrics is not None:
            metrics.model_calls.labels(caller, model).inc()
            metrics.model_seconds.labels(caller, model).observe(time.perf_counter() - started)


def traced_tool_call(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """For ``invoke_tool(tool, arguments, ctx)``: tool, MCP server, duration, error."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not _state.on:
            return await fn(*args, **kwargs)
        return await _tool_call(fn, args, kwargs)

    return wrapper


async def _tool_call(fn: Callable[..., Awaitable[R]], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> R:
    if not _state.on:
        return await fn(*args, **kwargs)
    tool = _arg(args, kwargs, 0, "tool")
    name = str(getattr(tool, "name", "unknown"))
    source = str(getattr(tool, "source", ""))
    server = source.split(":", 1)[1] if source.startswith("mcp:") else source
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                  "subagents.tool.source": source, "subagents.mcp.server": server}
    metrics = _state.metrics
    started, failed = time.perf_counter(), True
    try:
        with _span(f"execute_tool {name}", attributes) as span:
            result = await fn(*args, **kwargs)
            failed = bool(getattr(result, "is_error", False))
            if failed and span is not None:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, "the tool returned an error"))
            return result
    finally:
        if metrics is not None:
            metrics.tool_calls.labels(server, name).inc()
            if failed:
                metrics.tool_errors.labels(server, name).inc()
            metrics.tool_seconds.labels(server, name).observe(time.perf_counter() - started)
