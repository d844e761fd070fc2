"""Budgets: caps on model tokens, model calls, tool calls and estimated cost, per run and per
conversation (``configuration.budgets`` of the agent's ``config.yml``).

A :class:`BudgetGuard` is made per run. Before each model call the loop asks :meth:`before_model`
and before running a step's tool calls :meth:`before_tools`; a :class:`CapHit` says which cap
stops the run and how the run closes: with one last model call without tools, or (when the
token or cost cap itself is spent) with a fixed sentence.

The conversation's usage so far is read from its events: the token tallies stored on the turns'
closing ``action_listen`` events, the current turn's tally (or this run's usage outside a turn)
and the ``mcp_tool_executed`` events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import structlog

from subagents.config.budgets import BudgetCaps, Budgets
from subagents.llm import Usage
from subagents.llm import usage as usage_tally
from subagents.llm.usage import UsageTally
from subagents.types import AgentInput, CallScope

log = structlog.get_logger("subagents.agent.budget")

BUDGET_EVENT = "agent_budget_exceeded"
"""The event that records which cap ended a run."""
_TOOL_EVENT = "mcp_tool_executed"



def caps_set(budgets: Budgets) -> bool:
    """Whether any cap is set: what :attr:`Budgets.enabled` says, read from the fields as they
    are instead of dumping both models (every run asks)."""
    return any(value is not None for caps in (budgets.per_run, budgets.per_conversation)
               for value in vars(caps).values())


class RunUsage(Protocol):
    """What a guard reads of a run (:class:`subagents.agents.run.Run` has it)."""

    usage: Usage
    model_usage: dict[str, Usage]
    steps: int
    tool_counts: dict[str, int]
    scope: CallScope


@dataclass(frozen=True)
class CapHit:
    """A cap that stops the run."""

    scope: str
    """``per_run`` or ``per_conversation``."""
    measure: str
    """``model_tokens``, ``model_calls``, ``tool_calls`` or ``cost_usd``."""
    limit: float
    used: float
    closing_call: bool
    """True: one last model call without tools may still be made; False: the cap is spent and
    the run closes with a fixed sentence."""

    @property
    def cap(self) -> str:
        """``<scope>.<measure>``, e.g. ``per_run.tool_calls``."""
        return f"{self.scope}.{self.measure}"


@dataclass
class _Used:
    tokens: int = 0
    calls: int = 0
    tools: int = 0
    cost: float = 0.0


class BudgetGuard:
    """Checks one run against the agent's budgets."""

    def __init__(self, budgets: Budgets, model: str, agent_input: AgentInput) -> None:
        self.budgets = budgets
        self.model = model
        self._prices = {**usage_tally.model_prices(),
                        **{name: (p.input, p.output) for name, p in budgets.prices.items()}}
        self._earlier = self._earlier_usage(agent_input) \
            if _any_cap(budgets.per_conversation) else _Used()

    def _cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        price = self._prices.get(model)
        if price is None:
            return 0.0
        return (input_tokens * price[0] + output_tokens * price[1]) / 1e6

    def _earlier_usage(self, agent_input: AgentInput) -> _Used:
        """What the conversation used before this turn (its stored events: those the input
        holds, and the summary of the earlier ones)."""
        used = _Used()
        totals = usage_tally.conversation_usage(agent_input.events)
        for models in (totals["models"], agent_input.earlier.usage):
            for model, counts in models.items():
                tokens_in, tokens_out = counts.get("input_tokens", 0), counts.get(
                    "output_tokens", 0)
                used.tokens += tokens_in + tokens_out
                used.calls += counts.get("calls", 0)
                used.cost += self._cost(model, tokens_in, tokens_out)
        used.tools = agent_input.earlier.tool_calls + sum(
            1 for event in agent_input.events if event.get("event") == _TOOL_EVENT)
        return used

    def _run_usage(self, run: RunUsage) -> _Used:
        return _Used(tokens=run.usage.total_tokens, calls=run.steps,
                     tools=sum(run.tool_counts.values()), cost=self._run_cost(run))

    def _run_cost(self, run: RunUsage) -> float:
        """Each model's tokens at its own price; tokens of no known model at the agent's."""
        cost, prompt, completion = 0.0, run.usage.prompt_tokens, run.usage.completion_tokens
        for model, usage in run.model_usage.items():
            cost += self._cost(model, usage.prompt_tokens, usage.completion_tokens)
            prompt -= usage.prompt_tokens
            completion -= usage.completion_tokens
        return cost + self._cost(self.model, max(0, prompt), max(0, completion))

    def _conversation_usage(self, run: RunUsage) -> _Used:
        this_run = self._run_usage(run)
        tally = run.scope.usage
        turn = tally.models if isinstance(tally, UsageTally) else None
        used = _Used(tokens=self._earlier.tokens, calls=self._earlier.calls,
                     tools=self._earlier.tools + this_run.tools, cost=self._earlier.cost)
        if turn is None:  # outside a turn (an agent run on its own): this run is the turn
            used.tokens += this_run.tokens
            used.calls += this_run.calls
            used.cost += this_run.cost
            return used
        for model, counts in turn.items():
            used.tokens += counts["input_tokens"] + counts["output_tokens"]
            used.calls += counts["calls"]
            used.cost += self._cost(model, counts["input_tokens"], counts["output_tokens"])
        return used

    def _scopes(self, run: RunUsage) -> list[tuple[str, BudgetCaps, _Used]]:
        scopes = [("per_run", self.budgets.per_run, self._run_usage(run))]
        if _any_cap(self.budgets.per_conversation):
            scopes.append(("per_conversation", self.budgets.per_conversation,
                           self._conversation_usage(run)))
        return scopes

    def before_model(self, run: RunUsage) -> CapHit | None:
        """The cap that stops the run before its next model call, if any.

        A spent token, cost or model-call cap closes with a fixed sentence; a model-call cap
        with one call left makes that call the closing one (without tools).
        """
        for scope, caps, used in self._scopes(run):
            for measure, limit, value in (("model_tokens", caps.model_tokens, used.tokens),
                                          ("cost_usd", caps.cost_usd, used.cost),
                                          ("model_calls", caps.model_calls, used.calls)):
                if limit is not None and value >= limit:
                    return CapHit(scope, measure, limit, value, closing_call=False)
        for scope, caps, used in self._scopes(run):
            if caps.model_calls is not None and used.calls + 1 >= caps.model_calls:
                return CapHit(scope, "model_calls", caps.model_calls, used.calls,
                              closing_call=True)
        return None

    def before_tools(self, run: RunUsage, count: int) -> CapHit | None:
        """The tool-call cap that ``count`` more calls would pass, if any (none of them run)."""
        for scope, caps, used in self._scopes(run):
            if caps.tool_calls is not None and used.tools + count > caps.tool_calls:
                return CapHit(scope, "tool_calls", caps.tool_calls, used.tools,
                              closing_call=True)
        return None


def _any_cap(caps: BudgetCaps) -> bool:
    return any(value is not None for value in caps.model_dump().values())


def budget_note(hit: CapHit) -> str:
    """The instruction for the closing model call."""
    what = {"model_calls": "model calls", "tool_calls": "tool calls",
            "model_tokens": "tokens", "cost_usd": "cost"}[hit.measure]
    scope = "this request" if hit.scope == "per_run" else "this conversation"
    return (f"You have reached the limit on {what} for {scope}: no more tools can run. "
            "Do not call tools. Reply to the user now in a few sentences: give what you found "
            "so far and say plainly which part of the request you could not finish.")


BUDGET_SENTENCE = ("I have reached the limit of what I may use for this request, so I have to "
                   "stop here and could not finish it. Please try again later or ask a person "
                   "for help.")
"""The closing message when the token or cost budget itself is spent (no model call is made)."""
