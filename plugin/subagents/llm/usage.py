"""Token usage (and, with prices, cost) per turn and per conversation.

Every model call of a turn adds its token counts to the turn's :class:`UsageTally`, which the
turn hands each call in its :class:`~subagents.types.CallScope` (the model wrapper
:class:`subagents.llm.wrappers.CountingModel` adds them). The processor stores the tally in the
metadata of the turn's closing ``action_listen`` event, so it lives with the tracker in any
store; :func:`conversation_usage` adds the tallies of a conversation up for the HTTP API.

Prices are optional: ``SUBAGENTS_MODEL_PRICES`` holds JSON mapping a model name to its price
in USD per million input and output tokens, e.g. ``{"gpt-4.1-mini": [0.4, 1.6]}``. Models
without a price count tokens only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import structlog

log = structlog.get_logger("subagents.llm.usage")

PRICES_ENV = "SUBAGENTS_MODEL_PRICES"

Tally = dict[str, dict[str, int]]
"""model -> {"calls", "input_tokens", "output_tokens"}."""

class UsageTally:
    """The token usage of one turn, per model."""

    __slots__ = ("models",)

    def __init__(self) -> None:
        self.models: Tally = {}

    def add(self, model: str, input_tokens: int, output_tokens: int) -> None:
        """Count one call of ``model``."""
        entry = self.models.get(model)
        if entry is None:
            entry = self.models[model] = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
        entry["calls"] += 1
        entry["input_tokens"] += max(0, int(input_tokens))
        entry["output_tokens"] += max(0, int(output_tokens))

    def metadata(self) -> dict[str, Any] | None:
        """``{"usage": {model: {...}}}`` for the turn's closing event, or None without calls."""
        if not self.models:
            return None
        return {"usage": {model: dict(counts) for model, counts in self.models.items()}}


def model_prices() -> dict[str, tuple[float, float]]:
    """Prices from ``SUBAGENTS_MODEL_PRICES``: model -> (input, output) USD per million tokens."""
    return _prices()


def _prices() -> dict[str, tuple[float, float]]:
    raw = os.environ.get(PRICES_ENV)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(model): (float(pair[0]), float(pair[1])) for model, pair in data.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        log.warning("usage.prices.invalid", variable=PRICES_ENV)
        return {}


def conversation_usage(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Totals over a conversation's events, per model and overall (with cost where priced)."""
    models: Tally = {}
    for event in events:
        usage = (event.get("metadata") or {}).get("usage") if event.get("event") == "action" \
            else None
        if not isinstance(usage, dict):
            continue
        for model, counts in usage.items():
            entry = models.setdefault(model, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
            for key in entry:
                entry[key] += int((counts or {}).get(key, 0))
    totals: dict[str, Any] = {key: sum(m[key] for m in models.values())
                              for key in ("calls", "input_tokens", "output_tokens")}
    per_model: dict[str, dict[str, Any]] = {model: dict(counts)
                                            for model, counts in models.items()}
    prices = _prices()
    if prices and models:
        cost = 0.0
        for model, counts in per_model.items():
            if model in prices:
                per_in, per_out = prices[model]
                counts["cost_usd"] = round((counts["input_tokens"] * per_in
                                            + counts["output_tokens"] * per_out) / 1e6, 6)
                cost += counts["cost_usd"]
        totals["cost_usd"] = round(cost, 6)
    return {**totals, "models": per_model}
