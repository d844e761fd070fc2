"""The general-purpose agent: decides itself when it is done (``task_completed``)."""

from __future__ import annotations

from typing import ClassVar

from subagents.agents.base import MCPBaseAgent
from subagents.agents.hooks import ours
from subagents.agents.policies import TASK_COMPLETED, OpenPolicy, Policy
from subagents.agents.schemas import AgentInput, AgentToolSchema
from subagents.types import ChatMessage, JsonObject

__all__ = ["TASK_COMPLETED", "MCPOpenAgent"]


class MCPOpenAgent(MCPBaseAgent):
    """Runs until the model calls ``task_completed`` (with a closing text) or asks the user.

    ``configuration.exit_conditions`` may also end the run after a text answer (``text``)
    or right after a named tool ran (:class:`~subagents.agents.policies.OpenPolicy`).
    """

    PROTOCOL_TYPE = "mcp_open"
    TEMPLATE_FILE = "open_agent.jinja2"
    POLICY: ClassVar[type[Policy]] = OpenPolicy

    @staticmethod
    @ours
    def get_task_completed_tool() -> JsonObject | None:
        """The built-in completion tool; return None in a subclass to remove it."""
        return {"type": "function", "function": {
            "name": TASK_COMPLETED,
            "description": ("Call this exactly once, when the primary task is completely done. "
                            "Always send a short, natural reply to the user in the same "
                            "response."),
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False,
                           "required": []},
            "strict": True}}

    @staticmethod
    def get_system_message_for_empty_content_at_task_completion() -> ChatMessage:
        """The instruction for one more call when ``task_completed`` came without text."""
        return {"role": "system", "content": (
            "The task is complete and this is your only instruction now. Do not call any tool. "
            "Write one short, natural closing line that answers the user's last message. "
            "Do not summarise the conversation.")}

    @ours
    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """``task_completed`` (unless :meth:`get_task_completed_tool` returns None)."""
        tool = self.get_task_completed_tool()
        return [AgentToolSchema.from_openai_json_format(tool)] if tool else []
