"""A model group with a router: calls spread by the strategy and fail over, over real HTTP to
the fake model server (one caller path per model of the group)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import anyio
import pytest
from subagents.config.endpoints import EndpointsConfig
from subagents.exceptions import LLMError
from subagents.llm import FallbackModel, build_model, resolve_model_settings
from subagents.llm.usage import UsageTally
from subagents.testing import FakeModelServer
from subagents.types import CallScope

USER = [{"role": "user", "content": "hi"}]


def routed(fake: FakeModelServer, router: dict, *models: dict, seed: int = 1,
           clock=None) -> FallbackModel:
    """A routed client over models ``a``, ``b``, ... each served at the fake's path of its
    name."""
    entries = [{"model": m["model"], "api_base": fake.base_url(m["model"]), "timeout": 5,
                **{k: v for k, v in m.items() if k != "model"}} for m in models]
    endpoints = EndpointsConfig.model_validate(
        {"model_groups": [{"id": "g", "models": entries, "router": router}]})
    settings = resolve_model_settings({"model_group": "g"}, endpoints)
    extra = {"clock": clock} if clock else {}
    return build_model(settings, name="tester", rng=random.Random(seed), **extra)


def served(fake: FakeModelServer) -> list[str]:
    return [r.caller for r in fake.requests]


async def shuffle_counts(seed: int, weights: tuple[int, int] | None) -> Counter[str]:
    models = [{"model": "a"}, {"model": "b"}]
    if weights:
        models = [{**m, "weight": w} for m, w in zip(models, weights, strict=True)]
    async with FakeModelServer({"a": ["A"] * 40, "b": ["B"] * 40}) as fake:
        llm = routed(fake, {"routing_strategy": "simple-shuffle"}, *models, seed=seed)
        for _ in range(40):
            await llm.complete(USER, None)
        await llm.close()
    return Counter(served(fake))


async def test_simple_shuffle_spreads_calls_reproducibly_with_a_seed():
    first = await shuffle_counts(3, None)
    assert first["a"] > 5
    assert first["b"] > 5
    assert await shuffle_counts(3, None) == first


async def test_simple_shuffle_follows_the_weights():
    counts = await shuffle_counts(5, (9, 1))
    assert counts["a"] > 3 * counts["b"]


@pytest.mark.parametrize("failure", [{"error": {"status": 500, "message": "down"}},
                                     {"error": {"status": 429, "message": "slow down"}},
                                     {"drop": True}],
                         ids=["http-500", "http-429", "dropped-connection"])
async def test_a_failed_call_fails_over_to_the_next_model(failure):
    async with FakeModelServer({"a": [failure], "b": ["from b"]}) as fake:
        llm = routed(fake, {}, {"model": "a", "weight": 1_000_000}, {"model": "b", "weight": 1})
        scope = CallScope(usage=UsageTally())
        response = await llm.complete(USER, None, scope=scope)
        tally = scope.usage.models
        await llm.close()
        fake.assert_done()
    assert served(fake) == ["a", "b"]
    assert response.text == "from b"
    assert response.model == "b"
    assert set(tally) == {"b"}  # usage names the model that answered


async def test_a_stream_that_failed_before_any_text_fails_over():
    seen: list[str] = []

    async def on_text(delta: str) -> None:
        seen.append(delta)

    async with FakeModelServer({"a": [{"error": {"status": 502, "message": "bad gateway"}}],
                                "b": ["streamed by b"]}) as fake:
        llm = routed(fake, {}, {"model": "a", "weight": 1_000_000}, {"model": "b", "weight": 1})
        response = await llm.complete(USER, None, stream=True, on_text=on_text)
        await llm.close()
        fake.assert_done()
    assert served(fake) == ["a", "b"]
    assert "".join(seen) == response.text == "streamed by b"


async def test_every_model_failing_raises_the_last_error():
    down = {"error": {"status": 503, "message": "down"}}
    async with FakeModelServer({"a": [down], "b": [down]}) as fake:
        llm = routed(fake, {}, {"model": "a"}, {"model": "b"})
        with pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert info.value.code == "llm.http_503"
    assert sorted(served(fake)) == ["a", "b"]


async def test_a_bad_request_does_not_fail_over():
    async with FakeModelServer({"a": [{"error": {"status": 400, "message": "bad"}}]}) as fake:
        llm = routed(fake, {}, {"model": "a", "weight": 1_000_000}, {"model": "b", "weight": 1})
        with pytest.raises(LLMError) as info:
            await llm.complete(USER, None)
        await llm.close()
    assert info.value.code == "llm.http_400"
    assert served(fake) == ["a"]


async def test_a_stream_that_reached_the_user_is_not_repeated_by_another_model():
    seen: list[str] = []

    async def on_text(delta: str) -> None:
        seen.append(delta)

    reply = {"text": "This reply breaks off half way.", "drop": True}
    async with FakeModelServer({"a": [reply], "b": ["never"]}, chunk_chars=4) as fake:
        llm = routed(fake, {}, {"model": "a", "weight": 1_000_000}, {"model": "b", "weight": 1})
        with pytest.raises(LLMError):
            await llm.complete(USER, None, stream=True, on_text=on_text)
        await llm.close()
    assert seen
    assert served(fake) == ["a"]


async def test_least_busy_sends_a_concurrent_call_to_the_idle_model():
    slow = {"text": "slow", "delay_ms": 300}
    async with FakeModelServer({"a": [slow, "a2"], "b": [slow, "b2"]}) as fake:
        llm = routed(fake, {"routing_strategy": "least-busy"}, {"model": "a"}, {"model": "b"})
        with anyio.fail_after(10):
            first = asyncio.create_task(llm.complete(USER, None))
            await fake.wait_for_requests(1)
            second = asyncio.create_task(llm.complete(USER, None))
            await fake.wait_for_requests(2)
            await asyncio.gather(first, second)
        await llm.close()
    assert sorted(served(fake)) == ["a", "b"]


async def test_latency_based_routing_prefers_the_faster_model():
    script = {"a": [{"text": "slow", "delay_ms": 400}] * 6, "b": ["fast"] * 6}
    async with FakeModelServer(script) as fake:
        llm = routed(fake, {"routing_strategy": "latency-based-routing"},
                     {"model": "a"}, {"model": "b"})
        for _ in range(6):
            await llm.complete(USER, None)
        await llm.close()
    counts = Counter(served(fake))
    assert counts == {"a": 1, "b": 5}  # each is measured once, then the faster one serves


async def test_cost_based_routing_takes_the_cheapest_model_under_its_limits():
    async with FakeModelServer({"a": ["A"] * 3, "b": ["B"] * 3}) as fake:
        llm = routed(fake, {"routing_strategy": "cost-based-routing"},
                     {"model": "a", "input_cost_per_token": 0.00001},
                     {"model": "b", "input_cost_per_token": 0.0000001, "rpm": 2},
                     clock=lambda: 1000.0)  # one minute throughout
        for _ in range(3):
            await llm.complete(USER, None)
        await llm.close()
    assert served(fake) == ["b", "b", "a"]


async def test_usage_based_routing_spreads_tokens_and_respects_rpm():
    async with FakeModelServer({"a": ["A"] * 4, "b": ["B"] * 4}) as fake:
        llm = routed(fake, {"routing_strategy": "usage-based-routing-v2"},
                     {"model": "a", "rpm": 1}, {"model": "b"}, clock=lambda: 1000.0)
        for _ in range(4):
            await llm.complete(USER, None)
        await llm.close()
    assert Counter(served(fake)) == {"a": 1, "b": 3}


async def test_a_model_that_answered_429_cools_down_then_serves_again():
    now = [1000.0]
    script = {"a": [{"error": {"status": 429, "message": "busy"}}, "A again"],
              "b": ["B", "B"]}
    async with FakeModelServer(script) as fake:
        llm = routed(fake, {"cooldown_time": 30}, {"model": "a", "weight": 1_000_000},
                     {"model": "b", "weight": 1}, clock=lambda: now[0])
        await llm.complete(USER, None)  # a fails, b answers
        await llm.complete(USER, None)  # a is cooling down
        now[0] += 31
        third = await llm.complete(USER, None)
        await llm.close()
        fake.assert_done()
    assert served(fake) == ["a", "b", "b", "a"]
    assert third.text == "A again"


async def test_a_conversation_runs_through_a_routed_group_with_failover(tmp_path, tools_url):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode
    from subagents import observability

    from tests.dialogue_harness import Conversation, assistant_for, write_project

    endpoints = f"""
        model_groups:
          - id: llm
            models:
              - {{provider: openai, model: gpt-east}}
              - {{provider: openai, model: gpt-west}}
            router: {{routing_strategy: least-busy}}
        mcp_servers:
          - name: tools
            type: http
            url: {tools_url}
        """
    project = write_project(tmp_path / "assistant", tools_url, {"endpoints.yml": endpoints})
    script = {"command_generator": [{"error": {"status": 500, "message": "down"}},
                                    "start flow opening_hours"]}
    exporter = InMemorySpanExporter()
    observability.enable_tracing(exporter=exporter)
    try:
        async with FakeModelServer(script) as fake, assistant_for(project, fake) as assistant:
            texts, events = await Conversation(assistant, "routed-1").say("when are you open?")
            fake.assert_done()
    finally:
        observability.disable()
    assert texts[0] == "We are open 9 to 5."
    failed, answered = (r.body["model"] for r in fake.requests)
    assert {failed, answered} == {"gpt-east", "gpt-west"}
    chats = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("chat ")}
    assert chats[f"chat {failed}"].status.status_code == StatusCode.ERROR
    assert chats[f"chat {answered}"].status.status_code != StatusCode.ERROR
    turn_usage = next(e["metadata"]["usage"] for e in events
                      if (e.get("metadata") or {}).get("usage"))
    assert set(turn_usage) == {answered}
