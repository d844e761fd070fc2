"""The task-specific agent: fills exit slots through ``set_slot_<slot>`` tools, then completes
silently once the step's ``exit_if`` conditions hold.

Choices where Rasa Pro behaves accidentally: values are coerced to the slot
type and an invalid value is an error tool result naming the allowed values; a text reply that
arrives when the conditions already hold is recorded (the user saw it); when the step limit is
reached without the conditions holding, the agent keeps waiting for the user
(``input_required``) instead of letting the flow move on.
"""

from __future__ import annotations

import json
import re
from typing import Any

from subagents import events as ev
from subagents.agents._plan import AgentRun, Executed, Finish, Outcome, Plan, StepResult
from subagents.agents.base import MCPBaseAgent
from subagents.agents.schemas import (
    AgentInput,
    AgentInputSlot,
    AgentStatus,
    AgentToolResult,
    AgentToolSchema,
    ExitReason,
)
from subagents.conditions import Condition, ConditionSyntaxError, parse_condition, referenced_slots
from subagents.config.domain import mappings_allow_llm
from subagents.slots import coerce_slot_value
from subagents.tools.base import CallContext, SlotEffect, Tool
from subagents.types import JsonObject, TrackerEvent

__all__ = ["MCPTaskAgent", "coerce_slot_value"]  # coerce_slot_value: old import path

SET_SLOT = re.compile(r"^set_slot_(\w+)$")
_JSON_TYPES = {"text": "string", "float": "number", "bool": "boolean", "list": "array",
               "categorical": "string", "strict_categorical": "string"}


class MCPTaskAgent(MCPBaseAgent):
    """Fills the slots its call step's ``exit_if`` needs, then completes silently."""

    PROTOCOL_TYPE = "mcp_task"
    TEMPLATE_FILE = "task_agent.jinja2"
    _PROMPT_CONTEXT_FROM_INPUT = True

    # ------------------------------------------------------------------ exit slots + tools
    @staticmethod
    def exit_conditions(agent_input: AgentInput) -> list[Condition]:
        """The call step's ``exit_if`` conditions (from the input metadata)."""
        conditions = []
        for text in agent_input.metadata.get("exit_if") or []:
            try:
                conditions.append(parse_condition(str(text)))
            except ConditionSyntaxError:
                conditions.append(Condition(str(text), None))
        return conditions

    @classmethod
    def exit_slot_names(cls, agent_input: AgentInput) -> list[str]:
        """The slots the exit conditions refer to."""
        return referenced_slots(cls.exit_conditions(agent_input))

    @classmethod
    def fillable_slots(cls, agent_input: AgentInput) -> list[AgentInputSlot]:
        """Exit slots present in the input whose mappings allow the model to fill them."""
        exit_names = set(cls.exit_slot_names(agent_input))
        return [s for s in agent_input.slots
                if s.name in exit_names and mappings_allow_llm(s.mappings)]

    @classmethod
    def get_slot_specific_set_slot_tool(cls, slot: AgentInputSlot) -> JsonObject:
        """The ``set_slot_<slot>`` tool for one slot (OpenAI format, strict)."""
        description = f"Set the slot '{slot.name}' (type: {slot.type})."
        if slot.description:
            description += f" {slot.description}"
        if slot.allowed_values:
            allowed = ", ".join(str(v) for v in slot.allowed_values)
            description += f" Allowed values: {allowed}."
        if slot.verify:
            description += (" Before setting it, read the value back to the user and set it "
                            "only after they confirm it.")
        value_schema: JsonObject = {"type": _JSON_TYPES.get(slot.type, "string")}
        if slot.type in ("float", "bool"):
            value_schema = {"type": [value_schema["type"], "string"]}
        elif slot.type == "list":
            value_schema = {"type": ["array", "string"], "items": {"type": "string"}}
        elif slot.type == "any":
            value_schema = {"type": ["string", "number", "boolean", "array", "object"]}
        value_schema["description"] = "The value to store."
        return {"type": "function", "function": {
            "name": f"set_slot_{slot.name}", "description": description, "strict": True,
            "parameters": {"type": "object", "properties": {"slot_value": value_schema},
                           "required": ["slot_value"], "additionalProperties": False}}}

    def _build_context_for_prompt(self, context: AgentInput) -> dict[str, Any]:
        values = super()._build_context_for_prompt(context)
        values["slot_names"] = [s.name for s in self.fillable_slots(context)]
        return values

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """One ``set_slot_<slot>`` tool per fillable exit slot."""
        return [AgentToolSchema.from_openai_json_format(self.get_slot_specific_set_slot_tool(s))
                for s in self.fillable_slots(agent_input)]

    def _builtin_tools(self, run: AgentRun) -> list[Tool]:
        run.slot_values = {s.name: s.value for s in run.input.slots}
        run.initial_slot_values = dict(run.slot_values)
        return [self._set_slot_tool(run, schema)
                for schema in self.get_agent_specific_built_in_tools(run.input)]

    def _set_slot_tool(self, run: AgentRun, schema: AgentToolSchema) -> Tool:
        match = SET_SLOT.match(schema.name)
        slot_name = match.group(1) if match else schema.name

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

    # ------------------------------------------------------------------ exit check
    def _exit_met(self, run: AgentRun) -> bool:
        conditions = self.exit_conditions(run.input)
        if not conditions or not run.slot_values:
            return False
        view = {"slots": dict(run.slot_values)}
        return all(cond.evaluate(view) for cond in conditions)

    # ------------------------------------------------------------------ step decisions
    def _decide_on_text(self, run: AgentRun, plan: Plan) -> StepResult:
        """Complete when the exit conditions hold; otherwise the text asks the user."""
        if self._exit_met(run):
            if plan.text:
                self._record_text(run, plan.text, plan.response, "final_response")
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.EXIT_IF))
        self._record_text(run, plan.text, plan.response, "input_required")
        return Finish(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.TEXT))

    async def _decide_on_tools(self, run: AgentRun, plan: Plan,
                               executed: Executed) -> StepResult:
        """Failures, then the exit conditions, then deferred calls; else go on."""
        failure = self._tool_failure(executed, builtins=False)
        if failure is not None:
            return failure
        if self._exit_met(run):
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.EXIT_IF))
        if executed.deferred():
            return await self._park(run, executed)
        return self._after_unavailable(run, plan)

    def _max_steps_message_type(self) -> str:
        return "input_required"

    def _max_steps_outcome(self, run: AgentRun) -> Outcome:
        if self._exit_met(run):
            return Outcome(AgentStatus.COMPLETED, ExitReason.EXIT_IF)
        return Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.MAX_STEPS)

    # ------------------------------------------------------------------ output
    def _final_events(self, run: AgentRun, outcome: Outcome) -> list[TrackerEvent]:
        """On completion, the exit slots not set during this run are stated once more."""
        events = list(run.events)
        if outcome.status != AgentStatus.COMPLETED:
            return events
        for name in self.exit_slot_names(run.input):
            if name in run.slot_values and name not in run.slot_set_by_hook \
                    and name not in run.recorded_slots:
                events.append(ev.slot_set(name, run.slot_values[name]))
        return events
