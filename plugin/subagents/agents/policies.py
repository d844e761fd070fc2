"""The decisions that differ between the open and the task agent, one policy object per run.

The engine asks the run's policy what a step's response means: a text without tool calls
(:meth:`Policy.decide_on_text`), or tool calls after they ran (:meth:`Policy.decide_on_tools`),
and how a run that reached its step limit ends. The policy also gives the built-in tools of
its kind (``task_completed``; ``set_slot_<slot>``) and what the agent adds to the output.

* :class:`OpenPolicy`: the model decides when it is done (``task_completed``, or an exit in
  ``configuration.exit_conditions``); a text answer asks the user.
* :class:`TaskPolicy`: the run completes, silently, once the call step's ``exit_if``
  conditions hold; the model fills the slots they read through ``set_slot_<slot>`` tools.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from subagents.agents import parking
from subagents.agents.hooks import AgentHooks, is_ours
from subagents.agents.plan import Continue, Executed, Finish, Outcome, Park, Plan, StepResult
from subagents.agents.prompt import conversation, offered
from subagents.agents.run import Run
from subagents.slots import coerce_slot_value
from subagents.tools.base import CallContext, PlannedCall, SlotEffect, Tool
from subagents.types import (
    AgentInput,
    AgentStatus,
    AgentToolResult,
    AgentToolSchema,
    ChatMessage,
    Event,
    ExitReason,
    JsonObject,
    SlotSet,
)

if TYPE_CHECKING:
    from subagents.conditions import Condition

TASK_COMPLETED = "task_completed"
SET_SLOT = re.compile(r"^set_slot_(\w+)$")


class Policy:
    """What a step's response means for a run; subclassed per agent kind."""

    max_steps_message_type: ClassVar[str] = "final_response"
    """The message type of the reply that closes a run at its step limit."""

    def __init__(self, agent: AgentHooks, run: Run) -> None:
        self.agent = agent
        self.run = run

    # ------------------------------------------------------------------ tools
    def builtin_tools(self) -> list[Tool]:
        """The built-in tools of this agent kind for the run."""
        return []

    def handled(self) -> set[str]:
        """Built-in tool names the agent handles itself instead of executing."""
        return set()

    def builtin_answer(self, call: PlannedCall) -> str:
        """The answer the model gets to a handled built-in call."""
        return "ok"

    # ------------------------------------------------------------------ what the model sees
    async def messages(self) -> list[ChatMessage]:
        """The messages of the next model call."""
        return [*await conversation(self.agent, self.run), *self.run.tool_messages]

    def offered(self) -> list[JsonObject]:
        """The tools offered in the next model call."""
        return offered(self.run)

    # ------------------------------------------------------------------ a step's decisions
    def text_kind(self, plan: Plan) -> str:
        """The message type of text sent beside tool calls."""
        return "filler_message"

    def runs_tools(self, plan: Plan) -> bool:
        """Whether the plan's calls are executed (False skips straight to the decision)."""
        return True

    def decide_on_text(self, plan: Plan) -> StepResult:
        """A response with text and no tool calls."""
        raise NotImplementedError

    async def decide_on_tools(self, plan: Plan, executed: Executed) -> StepResult:
        """A response with tool calls, after they ran."""
        raise NotImplementedError

    def max_steps_outcome(self) -> Outcome:
        """How a run that reached its step limit ends."""
        return Outcome(AgentStatus.COMPLETED, ExitReason.MAX_STEPS)

    def final_events(self, outcome: Outcome) -> list[Event]:
        """The events of the output."""
        return list(self.run.events)

    # ------------------------------------------------------------------ shared rules
    def tool_failure(self, executed: Executed, *, builtins: bool = True) -> Finish | None:
        """The first failure that ends the run, if any.

        A tool that returned neither a result nor an error is a recoverable error (the caller
        retries the whole invocation); with ``raise_on_tool_invocation_failure``, the first
        failed tool is fatal (built-in tools too, when ``builtins``).
        """
        ran = [o for o in executed.ran if o.call.tool is not None
               and (builtins or o.call.tool.source != "builtin")]
        for outcome in ran:
            if outcome.call.tool is not None and outcome.call.tool.source == "builtin":
                continue
            if outcome.result.result is None and not outcome.result.is_error:
                return Finish(Outcome(AgentStatus.RECOVERABLE_ERROR, ExitReason.NO_RESULT,
                                      error_message=f"tool {outcome.call.name!r} returned "
                                                    "neither a result nor an error"))
        if self.agent.configuration.raise_on_tool_invocation_failure:
            for outcome in ran:
                if outcome.result.is_error:
                    return Finish(Outcome.fatal(f"tool {outcome.call.name!r} failed: "
                                                f"{outcome.result.error_message}"))
        return None

    def after_unavailable(self, plan: Plan) -> StepResult:
        """Go on, unless the model keeps calling tools that are not offered."""
        if not plan.unavailable:
            return Continue()
        run = self.run
        run.unavailable_rounds += 1
        if run.unavailable_rounds > self.agent.MAX_UNAVAILABLE_TOOL_CALL_RETRIES:
            name = plan.unavailable[-1].name
            return Finish(Outcome.fatal(f"the model kept calling tools that are not available "
                                        f"(last: {name!r})"))
        return Continue()

    async def park(self, executed: Executed) -> Park:
        """Deferred calls park the run (client tools first, then approvals)."""
        run = self.run

        async def ask(question: str) -> None:
            await run.deliver(question)
            run.record_text(question, None, "input_required")

        return await parking.park(run, executed, agent_name=self.agent.name, ask=ask)


# ---------------------------------------------------------------------------- open agent
async def _never(arguments: JsonObject, ctx: Any) -> AgentToolResult:
    raise AssertionError("task_completed is handled by the agent")


class OpenAgentHooks(AgentHooks, Protocol):
    """The open agent's own hooks."""

    _default_builtins: list[AgentToolSchema] | None

    @staticmethod
    def get_task_completed_tool() -> JsonObject | None:
        """The built-in completion tool."""
        ...

    @staticmethod
    def get_system_message_for_empty_content_at_task_completion() -> ChatMessage:
        """The instruction for one more call when ``task_completed`` came without text."""
        ...


class OpenPolicy(Policy):
    """Runs until the model calls ``task_completed`` (with a closing text) or asks the user;
    ``configuration.exit_conditions`` may also end the run after a text answer (``text``) or
    right after a named tool ran."""

    agent: OpenAgentHooks

    def builtin_tools(self) -> list[Tool]:
        """``task_completed`` (handled by the policy, never run)."""
        return [Tool(schema=schema, run=_never, source="builtin")
                for schema in builtin_schemas(self.agent, self.run.input)]

    def handled(self) -> set[str]:
        """``task_completed``, unless the agent removed it."""
        return {TASK_COMPLETED} if self.agent.get_task_completed_tool() else set()

    def builtin_answer(self, call: PlannedCall) -> str:
        """What the model reads back for ``task_completed``."""
        return "Task completed"

    async def messages(self) -> list[ChatMessage]:
        """After ``task_completed`` without text: the exchange without the system prompt,
        system instructions first."""
        run = self.run
        if not run.completion_pending:
            return await super().messages()
        base = (await conversation(self.agent, run))[1:]  # without the system prompt
        rest = [*base, *run.tool_messages]
        system = [m for m in rest if m.get("role") == "system"]
        return [*system, *[m for m in rest if m.get("role") != "system"]]

    def offered(self) -> list[JsonObject]:
        """After ``task_completed`` without text: only ``task_completed``, and only after a
        tool exchange."""
        run = self.run
        if not run.completion_pending:
            return super().offered()
        exchanged = any(m.get("tool_calls") or m.get("role") == "tool" for m in run.tool_messages)
        if not exchanged:
            return []
        completion = run.tools.get(TASK_COMPLETED)
        return [completion.schema.to_openai()] if completion else super().offered()

    def text_kind(self, plan: Plan) -> str:
        """Text beside ``task_completed`` is the final response; otherwise a filler."""
        return "final_response" if plan.called(TASK_COMPLETED) else "filler_message"

    def runs_tools(self, plan: Plan) -> bool:
        """``task_completed`` alone, without any text: nothing to run, ask for a closing line."""
        return not (plan.called(TASK_COMPLETED) and not plan.has_text and not plan.calls
                    and not plan.unavailable)

    def decide_on_text(self, plan: Plan) -> StepResult:
        """A text answer asks the user, unless the task is done or ``text`` is an exit."""
        run = self.run
        if run.completion_pending:
            if plan.text:
                run.record_text(plan.text, plan.response, "final_response")
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.TASK_COMPLETED))
        if "text" in (self.agent.configuration.exit_conditions or []):
            run.record_text(plan.text, plan.response, "final_response")
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.TEXT))
        run.record_text(plan.text, plan.response, "input_required")
        return Finish(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.TEXT))

    async def decide_on_tools(self, plan: Plan, executed: Executed) -> StepResult:
        """Failures, then deferred calls, then completion, then exit tools; else go on."""
        run = self.run
        completing = plan.called(TASK_COMPLETED)
        if not self.runs_tools(plan):
            self._ask_for_closing_line()
            return Continue()
        failure = self.tool_failure(executed)
        if failure is not None:
            return failure
        if executed.deferred():
            return await self.park(executed)
        if completing:
            run.count_tool(TASK_COMPLETED)
            run.structured.append({"name": TASK_COMPLETED, "result": "Task completed"})
            if plan.has_text:  # whitespace counts as a closing text, though never sent
                return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.TASK_COMPLETED))
            self._ask_for_closing_line(counted=True)
            return Continue()
        for name in self.agent.configuration.exit_conditions or []:
            if name != "text" and executed.succeeded(name):
                return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.for_tool(name)))
        return self.after_unavailable(plan)

    def _ask_for_closing_line(self, counted: bool = False) -> None:
        """``task_completed`` without text: one more call, tools disabled, for a closing line."""
        run = self.run
        if not counted:
            run.count_tool(TASK_COMPLETED)
            run.structured.append({"name": TASK_COMPLETED, "result": "Task completed"})
        run.completion_pending = True
        run.tool_messages.append(
            self.agent.get_system_message_for_empty_content_at_task_completion())


def builtin_schemas(agent: OpenAgentHooks, agent_input: AgentInput) -> list[AgentToolSchema]:
    """What the open agent's ``get_agent_specific_built_in_tools`` returns. While neither it
    nor ``get_task_completed_tool`` is replaced (on the class or the instance), the answer
    depends on nothing that changes: it is built once per agent."""
    if not is_ours(agent.get_agent_specific_built_in_tools) \
            or not is_ours(agent.get_task_completed_tool):
        return agent.get_agent_specific_built_in_tools(agent_input)
    if agent._default_builtins is None:
        agent._default_builtins = agent.get_agent_specific_built_in_tools(agent_input)
    return agent._default_builtins


# ---------------------------------------------------------------------------- task agent
class TaskAgentHooks(AgentHooks, Protocol):
    """The task agent's own hooks."""

    def exit_conditions(self, agent_input: Any) -> list[Condition]:
        """The call step's ``exit_if`` conditions."""
        ...

    def exit_slot_names(self, agent_input: Any) -> list[str]:
        """The slots the exit conditions refer to."""
        ...


class TaskPolicy(Policy):
    """Completes, silently, once the call step's ``exit_if`` conditions hold.

    Values are coerced to the slot type and an invalid value is an error tool result naming the
    allowed values; a text reply that arrives when the conditions already hold is recorded (the
    user saw it); when the step limit is reached without the conditions holding, the agent keeps
    waiting for the user (``input_required``) instead of letting the flow move on.
    """

    agent: TaskAgentHooks
    max_steps_message_type: ClassVar[str] = "input_required"

    def builtin_tools(self) -> list[Tool]:
        """One ``set_slot_<slot>`` tool per fillable exit slot; the run's slot view starts
        from the input."""
        run = self.run
        run.slot_values = {s.name: s.value for s in run.input.slots}
        run.initial_slot_values = dict(run.slot_values)
        run.exit_conditions = self.agent.exit_conditions(run.input)
        return [self._set_slot_tool(schema)
                for schema in self.agent.get_agent_specific_built_in_tools(run.input)]

    def _set_slot_tool(self, schema: AgentToolSchema) -> Tool:
        match = SET_SLOT.match(schema.name)
        slot_name = match.group(1) if match else schema.name
        run = self.run

        async def set_slot(arguments: JsonObject, ctx: CallContext) -> AgentToolResult:
            slot = run.input.slot(slot_name)
            if slot is None:
                return AgentToolResult(tool_name=schema.name, is_error=True,
                                       error_message=f"slot {slot_name!r} is not available")
            try:
                value = coerce_slot_value(slot, arguments.get("slot_value"))
            except ValueError as exc:
                return AgentToolResult(tool_name=schema.name, is_error=True,
                                       error_message=str(exc))
            ctx.effects.append(SlotEffect(slot_name, value, only_if_changed=True))
            return AgentToolResult(tool_name=schema.name,
                                   result=f"Slot {slot_name} set to {json.dumps(value)}.")

        return Tool(schema=schema, run=set_slot, source="builtin")

    def exit_met(self) -> bool:
        """Whether every exit condition holds for the run's slot view."""
        run = self.run
        conditions = run.exit_conditions
        if conditions is None:
            conditions = run.exit_conditions = self.agent.exit_conditions(run.input)
        if not conditions or not run.slot_values:
            return False
        view = {"slots": dict(run.slot_values)}
        return all(cond.evaluate(view) for cond in conditions)

    def decide_on_text(self, plan: Plan) -> StepResult:
        """Complete when the exit conditions hold; otherwise the text asks the user."""
        run = self.run
        if self.exit_met():
            if plan.text:
                run.record_text(plan.text, plan.response, "final_response")
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.EXIT_IF))
        run.record_text(plan.text, plan.response, "input_required")
        return Finish(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.TEXT))

    async def decide_on_tools(self, plan: Plan, executed: Executed) -> StepResult:
        """Failures, then the exit conditions, then deferred calls; else go on."""
        failure = self.tool_failure(executed, builtins=False)
        if failure is not None:
            return failure
        if self.exit_met():
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.EXIT_IF))
        if executed.deferred():
            return await self.park(executed)
        return self.after_unavailable(plan)

    def max_steps_outcome(self) -> Outcome:
        """Completed when the conditions hold; otherwise the agent keeps waiting."""
        if self.exit_met():
            return Outcome(AgentStatus.COMPLETED, ExitReason.EXIT_IF)
        return Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.MAX_STEPS)

    def final_events(self, outcome: Outcome) -> list[Event]:
        """On completion, the exit slots not set during this run are stated once more."""
        run = self.run
        events = list(run.events)
        if outcome.status != AgentStatus.COMPLETED:
            return events
        for name in self.agent.exit_slot_names(run.input):
            if name in run.slot_values and name not in run.slot_set_by_hook \
                    and name not in run.recorded_slots:
                events.append(SlotSet(name, run.slot_values[name]))
        return events
