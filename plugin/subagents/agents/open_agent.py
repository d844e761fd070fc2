"""The general-purpose agent: decides itself when it is done (``task_completed``)."""

from __future__ import annotations

from typing import Any

from subagents.agents._plan import AgentRun, Continue, Executed, Finish, Outcome, Plan, StepResult
from subagents.agents.base import MCPBaseAgent
from subagents.agents.schemas import (
    AgentInput,
    AgentStatus,
    AgentToolResult,
    AgentToolSchema,
    ExitReason,
)
from subagents.tools.base import Tool
from subagents.types import ChatMessage, JsonObject

TASK_COMPLETED = "task_completed"


async def _never(arguments: JsonObject, ctx: Any) -> AgentToolResult:
    raise AssertionError("task_completed is handled by the agent")


class MCPOpenAgent(MCPBaseAgent):
    """Runs until the model calls ``task_completed`` (with a closing text) or asks the user.

    ``configuration.exit_conditions`` may also end the run after a text answer (``text``)
    or right after a named tool ran.
    """

    PROTOCOL_TYPE = "mcp_open"
    TEMPLATE_FILE = "open_agent.jinja2"
    _default_builtins: list[AgentToolSchema] | None = None

    @staticmethod
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

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """``task_completed`` (unless :meth:`get_task_completed_tool` returns None)."""
        tool = self.get_task_completed_tool()
        return [AgentToolSchema.from_openai_json_format(tool)] if tool else []

    def _builtin_tools(self, run: AgentRun) -> list[Tool]:
        return [Tool(schema=schema, run=_never, source="builtin")
                for schema in self._builtin_schemas(run.input)]

    def _builtin_schemas(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """What :meth:`get_agent_specific_built_in_tools` returns. While neither it nor
        :meth:`get_task_completed_tool` is replaced (on the class or the instance), the answer
        depends on nothing that changes: it is built once per agent."""
        hook = getattr(self.get_agent_specific_built_in_tools, "__func__", None)
        if hook is not MCPOpenAgent.get_agent_specific_built_in_tools \
                or self.get_task_completed_tool is not MCPOpenAgent.get_task_completed_tool:
            return self.get_agent_specific_built_in_tools(agent_input)
        if self._default_builtins is None:
            self._default_builtins = self.get_agent_specific_built_in_tools(agent_input)
        return self._default_builtins

    def _handled_builtins(self) -> set[str]:
        return {TASK_COMPLETED} if self.get_task_completed_tool() else set()

    async def _messages(self, run: AgentRun) -> list[ChatMessage]:
        if not run.completion_pending:
            return await super()._messages(run)
        base = (await self._conversation(run))[1:]  # without the system prompt
        rest = [*base, *run.tool_messages]
        system = [m for m in rest if m.get("role") == "system"]
        return [*system, *[m for m in rest if m.get("role") != "system"]]

    def _offered(self, run: AgentRun) -> list[JsonObject]:
        if not run.completion_pending:
            return super()._offered(run)
        exchanged = any(m.get("tool_calls") or m.get("role") == "tool" for m in run.tool_messages)
        if not exchanged:
            return []
        completion = run.tools.get(TASK_COMPLETED)
        return [completion.schema.to_openai()] if completion else super()._offered(run)

    def _text_kind(self, plan: Plan) -> str:
        return "final_response" if plan.called(TASK_COMPLETED) else "filler_message"

    def _runs_tools(self, plan: Plan) -> bool:
        # task_completed alone, without any text: nothing to run, ask for a closing line
        return not (plan.called(TASK_COMPLETED) and not plan.has_text and not plan.calls
                    and not plan.unavailable)

    def _decide_on_text(self, run: AgentRun, plan: Plan) -> StepResult:
        """A text answer asks the user, unless the task is done or ``text`` is an exit."""
        if run.completion_pending:
            if plan.text:
                self._record_text(run, plan.text, plan.response, "final_response")
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.TASK_COMPLETED))
        if "text" in (self.configuration.exit_conditions or []):
            self._record_text(run, plan.text, plan.response, "final_response")
            return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.TEXT))
        self._record_text(run, plan.text, plan.response, "input_required")
        return Finish(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.TEXT))

    async def _decide_on_tools(self, run: AgentRun, plan: Plan,
                               executed: Executed) -> StepResult:
        """Failures, then deferred calls, then completion, then exit tools; else go on."""
        completing = plan.called(TASK_COMPLETED)
        if not self._runs_tools(plan):
            self._ask_for_closing_line(run)
            return Continue()
        failure = self._tool_failure(executed)
        if failure is not None:
            return failure
        if executed.deferred():
            return await self._park(run, executed)
        if completing:
            run.count_tool(TASK_COMPLETED)
            run.structured.append({"name": TASK_COMPLETED, "result": "Task completed"})
            if plan.has_text:  # whitespace counts as a closing text, though never sent
                return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.TASK_COMPLETED))
            self._ask_for_closing_line(run, counted=True)
            return Continue()
        for name in self.configuration.exit_conditions or []:
            if name != "text" and executed.succeeded(name):
                return Finish(Outcome(AgentStatus.COMPLETED, ExitReason.for_tool(name)))
        return self._after_unavailable(run, plan)

    def _ask_for_closing_line(self, run: AgentRun, counted: bool = False) -> None:
        """``task_completed`` without text: one more call, tools disabled, for a closing line."""
        if not counted:
            run.count_tool(TASK_COMPLETED)
            run.structured.append({"name": TASK_COMPLETED, "result": "Task completed"})
        run.completion_pending = True
        run.tool_messages.append(self.get_system_message_for_empty_content_at_task_completion())

    def _builtin_answer(self, run: AgentRun, call: Any) -> str:
        return "Task completed"
