"""A routed model group as one model: each call goes to the member the group's router picks,
and a failed call moves on to the next member (pydantic-ai's ``FallbackModel``, with Rasa's
routing strategies)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import structlog

from subagents.exceptions import LLMError
from subagents.llm import usage as usage_prices
from subagents.llm.model import LLMResponse, Model, TextCallback
from subagents.llm.routing import Deployment, Router, RouterSettings
from subagents.llm.settings import ModelSettings
from subagents.retry import RetryPolicy, backoff, retry_call
from subagents.types import CallScope, ChatMessage, JsonObject

log = structlog.get_logger("subagents.llm")

NO_FAILOVER = frozenset({"llm.deadline", "llm.http_400", "llm.http_413", "llm.http_422"})
"""Failures another model of the group would not fix: no time left, or the request is at
fault."""


class FallbackModel:
    """A model group with a ``router:``: each call goes to the member the routing strategy
    picks; a failed call (connection error, timeout, 429, 5xx, ...) moves on to the next member
    within the same call, unless the streamed reply already reached the user. Each member is
    a whole model of its own (its spans, usage and logs name the model actually called).

    Args:
        members: One model per model of the group, in the group's order.
        router: The group's routing settings.
        group_id: The group's id (logs).
        name: The caller's name.
        rng: Random source of the strategies (seed it for reproducible routing).
        clock: Monotonic seconds for cool-downs and usage windows.
    """

    def __init__(self, members: Sequence[Model], router: RouterSettings, *, group_id: str,
                 name: str = "llm", rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.group_id = group_id
        self.members = list(members)
        self.router = Router(router, [_deployment(m.settings) for m in self.members], rng=rng,
                             clock=clock)

    @property
    def settings(self) -> ModelSettings:
        """The group's first model (carrying the group); ``model`` names that one."""
        return self.members[0].settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        """Apply the request options changed on ``value`` to every model of the group."""
        old = self.members[0].settings.options
        changed = {k: v for k, v in value.options.items() if k not in old or old[k] != v}
        removed = set(old) - set(value.options)
        for member in self.members:
            kept = {k: v for k, v in member.settings.options.items() if k not in removed}
            member.settings = replace(member.settings, options={**kept, **changed})  # type: ignore[misc]

    async def prepare(self) -> None:
        """Prepare every member."""
        for member in self.members:
            await member.prepare()

    async def close(self) -> None:
        """Close every member."""
        for member in self.members:
            await member.close()

    async def embed(self, texts: list[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """Embeddings from the first member that answers, in the router's order."""
        order = self.router.order()
        members = iter(self.members[index] for index in order)

        async def attempt() -> list[list[float]]:
            return await next(members).embed(texts, scope=scope)

        return await retry_call(attempt, RetryPolicy(
            attempts=len(order), retry_on=_fails_over, delay=lambda _n, _error: 0.0))

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """One call, routed; fails over to the group's next model on failure."""
        order = self.router.order()
        delivered = False

        async def relay(delta: str) -> None:
            nonlocal delivered
            delivered = True
            if on_text is not None:
                await on_text(delta)

        tried = 0
        pause = 0.0
        """The wait before the next attempt: none within a round of the group's models,
        backing off between rounds."""

        async def attempt() -> LLMResponse:
            nonlocal tried, pause
            index = order[tried % len(order)]
            tried += 1
            member = self.members[index]
            self.router.started(index)
            started = time.perf_counter()
            try:
                response = await member.complete(messages, tools, stream=stream,
                                                 on_text=relay if stream else None,
                                                 scope=scope, options=options)
            except LLMError as exc:
                self.router.failed(index, exc.code, member.settings.timeout)
                if not delivered and _fails_over(exc):
                    log.warning("llm.route.failover", group=self.group_id,
                                model=member.settings.called_model, code=exc.code,
                                attempt=tried)
                    pause = 0.0 if tried % len(order) else backoff(tried // len(order))
                raise
            finally:
                self.router.finished(index)
            seconds = (response.time_to_first_token_ms if stream and
                       response.time_to_first_token_ms is not None
                       else (time.perf_counter() - started) * 1000) / 1000
            self.router.succeeded(index, seconds, response.usage.total_tokens)
            return response

        def worth_another(error: BaseException) -> bool:
            """Fail over unless the reply reached the caller, another model would not help,
            or the turn has no time left for the pause before the next round."""
            left = None if scope is None else scope.time_left()
            return not delivered and _fails_over(error) and (
                pause == 0.0 or left is None or left > pause)

        return await retry_call(attempt, RetryPolicy(
            attempts=self.router.attempts(), retry_on=worth_another,
            delay=lambda _n, _error: pause))


def _fails_over(error: BaseException) -> bool:
    """Whether another model of the group may succeed where ``error`` failed."""
    return isinstance(error, LLMError) and error.code not in NO_FAILOVER


def _deployment(settings: ModelSettings) -> Deployment:
    routing = settings.routing
    cost: float | None = None
    if "input_cost_per_token" in routing or "output_cost_per_token" in routing:
        cost = float(routing.get("input_cost_per_token") or 0) + float(
            routing.get("output_cost_per_token") or 0)
    elif settings.model in (prices := usage_prices.model_prices()):
        cost = sum(prices[settings.model]) / 1_000_000

    def number(key: str) -> Any:
        value = routing.get(key)
        return None if value is None else float(value) if key == "weight" else int(value)

    return Deployment(model=settings.called_model, weight=number("weight"), rpm=number("rpm"),
                      tpm=number("tpm"), cost_per_token=cost)
