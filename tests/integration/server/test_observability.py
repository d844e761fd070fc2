"""Traces (in-memory OpenTelemetry exporter) and Prometheus metrics over real HTTP."""

from __future__ import annotations

import httpx2
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families
from subagents import observability
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for, write_project

WEATHER = {
    "command_generator": ["start flow weather_flow"],
    "weather_agent": [
        {"text": "Checking.", "tool_calls": [{"echo": {"text": "Riga"}}, {"echo": {}}]},
        {"text": "Sunny in Riga.", "tool_calls": [{"task_completed": {}}]},
    ],
}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@pytest.fixture(autouse=True)
def _switched_off_afterwards():
    yield
    observability.disable()


async def test_spans_form_a_tree_per_turn_with_genai_attributes(project):
    exporter = InMemorySpanExporter()
    observability.enable_tracing(exporter=exporter)
    async with FakeModelServer(WEATHER) as fake, assistant_for(project, fake) as assistant:
        await Conversation(assistant, "trace-1").say("weather?")
        fake.assert_done()
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def parent(span):
        return by_id[span.parent.span_id].name if span.parent else None

    turn = next(s for s in spans if s.name == "subagents.turn")
    assert turn.parent is None
    assert turn.attributes["subagents.conversation.id"] == "trace-1"
    generation = next(s for s in spans if s.name == "subagents.command_generation")
    assert parent(generation) == "subagents.turn"
    agent = next(s for s in spans if s.name == "invoke_agent weather_agent")
    assert parent(agent) == "subagents.turn"
    assert agent.attributes["gen_ai.agent.name"] == "weather_agent"

    chats = [s for s in spans if s.name == "chat gpt-test"]
    assert sorted(parent(s) for s in chats) == [
        "invoke_agent weather_agent", "invoke_agent weather_agent",
        "subagents.command_generation"]
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "gpt-test"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] >= 0

    tools = [s for s in spans if s.name == "execute_tool echo"]
    assert [parent(s) for s in tools] == ["invoke_agent weather_agent"] * 2
    assert {s.attributes["subagents.mcp.server"] for s in tools} == {"tools"}
    # the call without `text` is an error result
    assert sorted(s.status.status_code.name for s in tools) == ["ERROR", "UNSET"]
    for span in spans:  # names and numbers only: no message text, arguments or results
        assert "Riga" not in str(dict(span.attributes or {}))


async def test_a_failed_model_call_is_an_error_span(project):
    exporter = InMemorySpanExporter()
    observability.enable_tracing(exporter=exporter)
    script = {"command_generator": [{"error": {"status": 500, "message": "boom"}}]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
        await Conversation(assistant).say("hello")
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat "))
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["error.type"] == "llm.http_500"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_metrics_are_served_in_the_prometheus_format(project):
    observability.enable_metrics()
    async with FakeModelServer(WEATHER) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant, token="tok")) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        auth = {"authorization": "Bearer tok"}
        await client.post("/webhooks/rest/webhook", headers=auth,
                          json={"sender": "m1", "message": "weather?"})
        refused = await client.get("/metrics")
        response = await client.get("/metrics", headers=auth)
        fake.assert_done()
    assert refused.status_code == 401
    assert response.headers["content-type"].startswith("text/plain")
    values = samples(response.text)
    assert values[("subagents_turns_total", (("outcome", "ok"),))] == 1
    assert values[("subagents_turn_duration_seconds_count", ())] == 1
    assert values[("subagents_active_conversations", ())] == 1
    assert values[("subagents_turns_in_progress", ())] == 0
    assert values[("subagents_model_calls_total",
                   (("caller", "weather_agent"), ("model", "gpt-test")))] == 2
    assert values[("subagents_model_calls_total",
                   (("caller", "command_generator"), ("model", "gpt-test")))] == 1
    assert values[("subagents_model_tokens_total", (("caller", "weather_agent"),
                                                    ("kind", "input"), ("model", "gpt-test")))] > 0
    assert values[("subagents_tool_calls_total", (("server", "tools"), ("tool", "echo")))] == 2
    assert values[("subagents_tool_call_errors_total",
                   (("server", "tools"), ("tool", "echo")))] == 1
    assert values[("subagents_agent_runs_total",
                   (("agent", "weather_agent"), ("status", "completed")))] == 1


async def test_without_metrics_there_is_no_metrics_route(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        response = await client.get("/metrics")
    assert response.status_code == 404


async def test_serve_exports_traces_over_otlp_and_serves_metrics(tmp_path):
    """`subagents serve --metrics --otlp-endpoint URL` as a process, with an OTLP receiver."""
    import asyncio
    import signal
    import socket
    import sys

    import anyio
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tests.integration.cli.test_shell_and_demo import shell_project

    received: list[str] = []
    got_spans = asyncio.Event()

    async def collect(request: Request) -> Response:
        export = ExportTraceServiceRequest.FromString(await request.body())
        received.extend(span.name for rs in export.resource_spans for ss in rs.scope_spans
                        for span in ss.spans)
        got_spans.set()
        return Response(ExportTraceServiceRequest().SerializeToString(),
                        media_type="application/x-protobuf")

    receiver = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = {"command_generator": ["start flow hours"]}
    async with FakeModelServer(script) as fake, serve_app(receiver) as otlp:
        root = shell_project(tmp_path / "p", fake)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root), "--port",
            str(port), "--metrics", "--otlp-endpoint", f"{otlp}/v1/traces",
            stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            with anyio.fail_after(60):
                while b"subagents: serving on" not in (line := await proc.stderr.readline()):
                    assert line, "the server exited before it was ready"
                answer = await client.post("/webhooks/rest/webhook",
                                           json={"sender": "o1", "message": "hours?"})
                metrics = await client.get("/metrics")
                proc.send_signal(signal.SIGTERM)
                assert await proc.wait() == 0
                await got_spans.wait()  # the batch is flushed when the server stops
        fake.assert_done()
    assert answer.json()[0]["text"] == "Open 9 to 5."
    assert samples(metrics.text)[("subagents_turns_total", (("outcome", "ok"),))] == 1
    assert "subagents.turn" in received
    assert "chat fake" in received


async def test_token_usage_and_cost_are_stored_per_conversation(project, monkeypatch):
    """Always on (no extra needed): the tracker keeps each turn's usage; the API sums it."""
    monkeypatch.setenv("SUBAGENTS_MODEL_PRICES", '{"gpt-test": [1000000, 2000000]}')
    script = {**WEATHER, "command_generator": ["start flow weather_flow",
                                               "start flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant, \
            serve_app(create_app(assistant)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        for text in ("weather?", "hours?", "/opening_hours"):
            await client.post("/webhooks/rest/webhook", json={"sender": "u1", "message": text})
        state = (await client.get("/conversations/u1/tracker")).json()
        other = (await client.get("/conversations/nobody/tracker")).json()
        requests = list(fake.requests)
        fake.assert_done()
    usage = state["usage"]
    assert usage["calls"] == len(requests) == 4  # the slash command needs no model
    listens = [e for e in state["events"] if e["event"] == "action"
               and e["name"] == "action_listen"]
    # the first is the listen of the session start, before the first message
    assert [bool((e.get("metadata") or {}).get("usage")) for e in listens] == \
        [False, True, True, False]
    per_model = usage["models"]["gpt-test"]
    assert per_model["input_tokens"] == usage["input_tokens"] > 0
    assert usage["cost_usd"] == usage["input_tokens"] + 2 * usage["output_tokens"]
    assert other["usage"] == {"calls": 0, "input_tokens": 0, "output_tokens": 0, "models": {}}
