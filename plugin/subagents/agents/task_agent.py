"""The task-specific agent: fills exit slots through ``set_slot_<slot>`` tools, then completes
silently once the step's ``exit_if`` conditions hold
(:class:`~subagents.agents.policies.TaskPolicy`)."""

from __future__ import annotations

from typing import Any, ClassVar

from subagents.agents.base import MCPBaseAgent
from subagents.agents.hooks import ours
from subagents.agents.policies import Policy, TaskPolicy
from subagents.agents.schemas import AgentInput, AgentInputSlot, AgentToolSchema
from subagents.conditions import Condition, ConditionSyntaxError, parse_condition, referenced_slots
from subagents.config.domain import mappings_allow_llm
from subagents.slots import coerce_slot_value
from subagents.types import JsonObject

__all__ = ["MCPTaskAgent", "coerce_slot_value"]  # coerce_slot_value: old import path

_JSON_TYPES = {"text": "string", "float": "number", "bool": "boolean", "list": "array",
               "categorical": "string", "strict_categorical": "string"}


class MCPTaskAgent(MCPBaseAgent):
    """Fills the slots its call step's ``exit_if`` needs, then completes silently."""

    PROTOCOL_TYPE = "mcp_task"
    TEMPLATE_FILE = "task_agent.jinja2"
    POLICY: ClassVar[type[Policy]] = TaskPolicy

    # ------------------------------------------------------------------ exit slots + tools
    @staticmethod
    def exit_conditions(agent_input: AgentInput) -> list[Condition]:
        """The call step's ``exit_if`` conditions: parsed when the project loaded (the flow
        hands them over with the input), else parsed from ``metadata["exit_if"]``."""
        texts = [str(text) for text in agent_input.metadata.get("exit_if") or []]
        parsed = agent_input.exit_conditions
        if parsed is not None and [c.text for c in parsed] == texts:
            return list(parsed)
        conditions = []
        for text in texts:
            try:
                conditions.append(parse_condition(text))
            except ConditionSyntaxError:
                conditions.append(Condition(text, None))
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

    @ours
    def _build_context_for_prompt(self, context: AgentInput) -> dict[str, Any]:
        """The base values plus ``slot_names``, the slots the model may fill."""
        values = super()._build_context_for_prompt(context)
        values["slot_names"] = [s.name for s in self.fillable_slots(context)]
        return values

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """One ``set_slot_<slot>`` tool per fillable exit slot."""
        return [AgentToolSchema.from_openai_json_format(self.get_slot_specific_set_slot_tool(s))
                for s in self.fillable_slots(agent_input)]
