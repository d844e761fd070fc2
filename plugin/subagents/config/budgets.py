"""``configuration.budgets`` of a sub agent: caps on what one run and one conversation may use."""

from __future__ import annotations

from pydantic import Field

from subagents.config._base import StrictModel


class BudgetCaps(StrictModel):
    """Caps of one scope; a cap left out is not enforced."""

    model_tokens: int | None = Field(default=None, gt=0)
    """Input plus output tokens of the model calls."""
    model_calls: int | None = Field(default=None, gt=0)
    """Model calls, the closing reply included."""
    tool_calls: int | None = Field(default=None, gt=0)
    """Executed tool calls (MCP, custom and built-in tools alike)."""
    cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Estimated cost in USD, from the model's price (see :attr:`Budgets.prices`)."""


class ModelPrice(StrictModel):
    """The price of a model in USD per million tokens."""

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)


class Budgets(StrictModel):
    """Caps per run (one invocation of the agent) and per conversation (everything the
    conversation used so far: earlier turns, other agents and the command generator included)."""

    per_run: BudgetCaps = Field(default_factory=BudgetCaps)
    per_conversation: BudgetCaps = Field(default_factory=BudgetCaps)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Model name -> price; models not listed fall back to ``SUBAGENTS_MODEL_PRICES``."""

    @property
    def enabled(self) -> bool:
        """Whether any cap is set."""
        return any(value is not None for caps in (self.per_run, self.per_conversation)
                   for value in caps.model_dump().values())
