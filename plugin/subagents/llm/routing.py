"""Which model of a routed model group serves a call, and in what order the others take over.

A model group with a ``router:`` mapping spreads its calls over its models. The policy here
only decides; :class:`subagents.llm.fallback.FallbackModel` makes the calls and reports back what
happened (started, finished, failed, latency, tokens). The strategies, by their Rasa names:

- ``simple-shuffle`` (default): a random model, weighted by ``weight``, else ``rpm``, else
  ``tpm``, else uniform.
- ``least-busy``: the model with the fewest calls in flight (ties drawn at random).
- ``latency-based-routing``: the model with the lowest mean latency over its recent calls
  (time to first token when streamed); a model with no calls yet goes first, and with
  ``routing_strategy_args.lowest_latency_buffer`` any model within that fraction of the best
  may be drawn.
- ``usage-based-routing`` / ``usage-based-routing-v2``: the model with the fewest tokens this
  minute among those still under their ``rpm`` and ``tpm`` limits.
- ``cost-based-routing``: the cheapest model (``input_cost_per_token`` +
  ``output_cost_per_token``, else the ``SUBAGENTS_MODEL_PRICES`` price of its name; unpriced
  models last) among those under their limits.

A model whose calls fail is cooled down: after more than ``allowed_fails`` failures within a
minute (at once on 401, 404, 408 and 429) it is passed over for ``cooldown_time`` seconds,
unless every model is cooling down. All counters live in the process.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from subagents.config.endpoints import ROUTING_STRATEGIES

DEFAULT_ALLOWED_FAILS = 3
DEFAULT_COOLDOWN_TIME = 5.0
_LATENCY_SAMPLES = 10
_IMMEDIATE_COOLDOWN = frozenset({"llm.auth", "llm.http_401", "llm.http_404", "llm.http_408",
                                 "llm.http_429"})


@dataclass(frozen=True)
class RouterSettings:
    """A model group's ``router:`` mapping, parsed."""

    strategy: str = "simple-shuffle"
    num_retries: int | None = None
    """Further attempts after a failed one; None: each other model of the group once."""
    allowed_fails: int = DEFAULT_ALLOWED_FAILS
    cooldown_time: float = DEFAULT_COOLDOWN_TIME
    latency_buffer: float = 0.0
    latency_ttl: float = 3600.0

    @classmethod
    def from_mapping(cls, router: dict[str, Any]) -> RouterSettings:
        """Settings from the ``router:`` mapping; raises ValueError on an unknown strategy."""
        strategy = str(router.get("routing_strategy") or ROUTING_STRATEGIES[0])
        if strategy not in ROUTING_STRATEGIES:
            raise ValueError(f"unknown routing strategy {strategy!r}")
        args = router.get("routing_strategy_args")
        args = args if isinstance(args, dict) else {}
        retries = router.get("num_retries")
        return cls(strategy=strategy,
                   num_retries=None if retries is None else max(0, int(retries)),
                   allowed_fails=int(router.get("allowed_fails", DEFAULT_ALLOWED_FAILS)),
                   cooldown_time=float(router.get("cooldown_time", DEFAULT_COOLDOWN_TIME)),
                   latency_buffer=float(args.get("lowest_latency_buffer", 0.0)),
                   latency_ttl=float(args.get("ttl", 3600.0)))


@dataclass(frozen=True)
class Deployment:
    """What the router knows about one model of the group."""

    model: str
    weight: float | None = None
    rpm: int | None = None
    tpm: int | None = None
    cost_per_token: float | None = None
    """Input plus output price of one token, when known."""


@dataclass
class _Stats:
    in_flight: int = 0
    latencies: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=_LATENCY_SAMPLES))
    """(when, seconds) of recent calls."""
    failures: deque[float] = field(default_factory=deque)
    cooldown_until: float = 0.0
    minute: int = -1
    requests: int = 0
    tokens: int = 0


class Router:
    """Orders a group's models for each call and keeps the counters the strategies read.

    Args:
        settings: The parsed ``router:`` mapping.
        deployments: One entry per model, in the group's order.
        rng: Random source (seed it for reproducible shuffles).
        clock: Monotonic seconds (injectable for tests of cool-downs and usage windows).
    """

    def __init__(self, settings: RouterSettings, deployments: Sequence[Deployment], *,
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.deployments = list(deployments)
        self.rng = rng or random.Random()
        self.clock = clock
        self.stats = [_Stats() for _ in self.deployments]

    # ------------------------------------------------------------------ choosing
    def order(self) -> list[int]:
        """Model indices for one call: the strategy's choice first, then the failover order."""
        now = self.clock()
        indices = list(range(len(self.deployments)))
        ready = [i for i in indices if self.stats[i].cooldown_until <= now] or indices
        cooling = [i for i in indices if i not in ready]
        ranked = self._rank(ready, now)
        return ranked + sorted(cooling, key=lambda i: self.stats[i].cooldown_until)

    def attempts(self) -> int:
        """How many attempts one call may make."""
        retries = self.settings.num_retries
        return 1 + (len(self.deployments) - 1 if retries is None else retries)

    def _rank(self, ready: list[int], now: float) -> list[int]:
        strategy = self.settings.strategy
        if strategy == "least-busy":
            return self._by_key(ready, lambda i: self.stats[i].in_flight)
        if strategy == "latency-based-routing":
            return self._by_latency(ready, now)
        if strategy in ("usage-based-routing", "usage-based-routing-v2"):
            return self._within_limits(ready, now, lambda i: self._usage(i, now)[1])
        if strategy == "cost-based-routing":
            return self._within_limits(ready, now, self._cost)
        return self._shuffle(ready)

    def _by_key(self, indices: list[int], key: Callable[[int], float]) -> list[int]:
        """Ascending by ``key``, ties in random order."""
        shuffled = list(indices)
        self.rng.shuffle(shuffled)
        return sorted(shuffled, key=key)

    def _shuffle(self, indices: list[int]) -> list[int]:
        """A weighted random order (weight, else rpm, else tpm, else uniform)."""
        weights = self._weights(indices)
        left, order = list(indices), []
        while left:
            pick = self.rng.choices(range(len(left)), weights=[weights[i] for i in left])[0]
            order.append(left.pop(pick))
        return order

    def _weights(self, indices: list[int]) -> dict[int, float]:
        for name in ("weight", "rpm", "tpm"):
            values = {i: getattr(self.deployments[i], name) for i in indices}
            if any(v for v in values.values()):
                return {i: float(v or 0) or 1e-9 for i, v in values.items()}
        return dict.fromkeys(indices, 1.0)

    def _by_latency(self, ready: list[int], now: float) -> list[int]:
        means = {i: self._mean_latency(i, now) for i in ready}
        order = self._by_key(ready, lambda i: means[i])
        buffer = self.settings.latency_buffer
        if buffer > 0 and len(order) > 1:
            best = means[order[0]]
            near = [i for i in order if means[i] <= best * (1 + buffer)]
            first = self.rng.choice(near)
            order = [first, *[i for i in order if i != first]]
        return order

    def _mean_latency(self, index: int, now: float) -> float:
        samples = [s for when, s in self.stats[index].latencies
                   if now - when <= self.settings.latency_ttl]
        return sum(samples) / len(samples) if samples else 0.0

    def _within_limits(self, ready: list[int], now: float,
                       key: Callable[[int], float]) -> list[int]:
        under = [i for i in ready if self._under_limits(i, now)]
        over = [i for i in ready if i not in under]
        return self._by_key(under, key) + self._by_key(over, lambda i: self._usage(i, now)[1])

    def _under_limits(self, index: int, now: float) -> bool:
        requests, tokens = self._usage(index, now)
        deployment = self.deployments[index]
        return ((deployment.rpm is None or requests < deployment.rpm)
                and (deployment.tpm is None or tokens < deployment.tpm))

    def _usage(self, index: int, now: float) -> tuple[int, int]:
        stats = self.stats[index]
        if stats.minute != int(now // 60):
            return 0, 0
        return stats.requests, stats.tokens

    def _cost(self, index: int) -> float:
        cost = self.deployments[index].cost_per_token
        return float("inf") if cost is None else cost

    # ------------------------------------------------------------------ feedback
    def started(self, index: int) -> None:
        """A call to model ``index`` starts."""
        now = self.clock()
        stats = self.stats[index]
        stats.in_flight += 1
        minute = int(now // 60)
        if stats.minute != minute:
            stats.minute, stats.requests, stats.tokens = minute, 0, 0
        stats.requests += 1

    def finished(self, index: int) -> None:
        """A call to model ``index`` ended (successfully or not)."""
        self.stats[index].in_flight = max(0, self.stats[index].in_flight - 1)

    def succeeded(self, index: int, seconds: float, tokens: int) -> None:
        """A call to model ``index`` answered after ``seconds`` with ``tokens`` in all."""
        now = self.clock()
        stats = self.stats[index]
        stats.latencies.append((now, seconds))
        if stats.minute == int(now // 60):
            stats.tokens += tokens

    def failed(self, index: int, code: str, penalty: float) -> None:
        """A call to model ``index`` failed with ``code``; ``penalty`` seconds count as its
        latency (so a failing model also drops back under latency-based routing)."""
        now = self.clock()
        stats = self.stats[index]
        stats.latencies.append((now, penalty))
        while stats.failures and now - stats.failures[0] > 60:
            stats.failures.popleft()
        stats.failures.append(now)
        if code in _IMMEDIATE_COOLDOWN or len(stats.failures) > self.settings.allowed_fails:
            stats.cooldown_until = now + self.settings.cooldown_time
            stats.failures.clear()
