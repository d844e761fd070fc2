"""The general-purpose agent: decides itself when it is done (``task_completed``)."""

from __future__ import annotations

from typing import Any

from ..tools.base import Tool
from ._plan import AgentRun, Outcome, Plan
from .base import MCPBaseAgent
from .schemas import AgentInput, AgentStatus, AgentToolResult, AgentToolSchema

TASK_COMPLETED = "task_completed"


class MCPOpenAgent(MCPBaseAgent):
    """Runs until the model calls ``task_completed`` (with a closing text) or asks the user.

    ``configuration.exit_conditions`` (A1) may also end the run after a text answer (``text``)
    or right after a named tool ran.
    """

    PROTOCOL_TYPE = "mcp_open"
    TEMPLATE_FILE = "open_agent.jinja2"

    @staticmethod
    def get_task_completed_tool() -> dict[str, Any] | None:
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
    def get_system_message_for_empty_content_at_task_completion() -> dict[str, Any]:
        return {"role": "system", "content": (
            "The task is complete and this is your only instruction now. Do not call any tool. "
            "Write one short, natural closing line that answers the user's last message. "
            "Do not summarise the conversation.")}

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        tool = self.get_task_completed_tool()
        return [AgentToolSchema.from_openai_json_format(tool)] if tool else []

    def _builtin_tools(self, run: AgentRun) -> list[Tool]:
        async def never(arguments: dict[str, Any], ctx: Any) -> AgentToolResult:
            raise AssertionError("task_completed is handled by the agent")

        return [Tool(schema=schema, run=never, source="builtin")
                for schema in self.get_agent_specific_built_in_tools(run.input)]

    def _handled_builtins(self) -> set[str]:
        return {TASK_COMPLETED} if self.get_task_completed_tool() else set()

    def _messages(self, run: AgentRun) -> list[dict[str, Any]]:
        if not run.completion_pending:
            return super()._messages(run)
        base = self.build_messages_for_llm_request(run.input)[1:]  # without the system prompt
        rest = [*base, *run.tool_messages]
        system = [m for m in rest if m.get("role") == "system"]
        return [*system, *[m for m in rest if m.get("role") != "system"]]

    def _offered(self, run: AgentRun) -> list[dict[str, Any]]:
        if not run.completion_pending:
            return super()._offered(run)
        exchanged = any(m.get("tool_calls") or m.get("role") == "tool" for m in run.tool_messages)
        if not exchanged:
            return []
        completion = run.tools.get(TASK_COMPLETED)
        return [completion.schema.to_openai()] if completion else super()._offered(run)

    async def _on_text(self, run: AgentRun, plan: Plan) -> Outcome | None:
        if run.completion_pending:
            if plan.text:
                self._record_text(run, plan.text, plan.response, "final_response")
            return Outcome(AgentStatus.COMPLETED, "task_completed")
        exits = self.configuration.exit_conditions or []
        if "text" in exits:
            self._record_text(run, plan.text, plan.response, "final_response")
            return Outcome(AgentStatus.COMPLETED, "text")
        self._record_text(run, plan.text, plan.response, "input_required")
        return Outcome(AgentStatus.INPUT_REQUIRED, "text")

    async def _on_tools(self, run: AgentRun, plan: Plan) -> Outcome | None:
        completing = plan.called(TASK_COMPLETED)
        if completing and not plan.has_text and not plan.calls and not plan.unavailable:
            self._ask_for_closing_line(run)
            return None
        if plan.text:
            kind = "final_response" if completing else "filler_message"
            self._record_text(run, plan.text, plan.response, kind)
        outcomes = await self._execute(run, plan)
        failure = self._tool_failure(outcomes)
        if failure is not None:
            return failure
        parked = await self._park(run, plan)
        if parked is not None:
            return parked
        if completing:
            run.count_tool(TASK_COMPLETED)
            run.structured.append({"name": TASK_COMPLETED, "result": "Task completed"})
            if plan.has_text:  # whitespace counts as a closing text, though never sent
                return Outcome(AgentStatus.COMPLETED, "task_completed")
            self._ask_for_closing_line(run, counted=True)
            return None
        for name in self.configuration.exit_conditions or []:
            if name != "text" and any(o.call.name == name and not o.result.is_error
                                      for o in outcomes):
                return Outcome(AgentStatus.COMPLETED, f"tool:{name}")
        return self._unavailable_outcome(run, plan)

    def _ask_for_closing_line(self, run: AgentRun, counted: bool = False) -> None:
        """``task_completed`` without text: one more call, tools disabled, for a closing line."""
        if not counted:
            run.count_tool(TASK_COMPLETED)
            run.structured.append({"name": TASK_COMPLETED, "result": "Task completed"})
        run.completion_pending = True
        run.tool_messages.append(self.get_system_message_for_empty_content_at_task_completion())

    def _builtin_answer(self, run: AgentRun, call: Any) -> str:
        return "Task completed"
