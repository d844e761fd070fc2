"""The ReAct loop shared by MCPOpenAgent and MCPTaskAgent.

``run`` = ``process_input`` -> ``send_message`` (the loop) -> ``process_output``. The loop is a
short ``for`` over :meth:`MCPBaseAgent._run_step`; a step calls the model (text reaches the output
channel at once, streamed when the channel streams), parses the response into a :class:`Plan`,
then the subclass decides (:meth:`_on_text`, :meth:`_on_tools`). Tool failures come back to the
model as error results (DECISIONS D4) unless ``raise_on_tool_invocation_failure`` is set.

Choices where the reference has accidental quirks (reference §10), pinned by tests:

* text sent alongside tool calls is always recorded (also with fillers disabled), because the
  user saw it;
* an empty model answer (no text, no tools) gets one nudge to answer instead of a silent wait;
* every executed tool call gets an ``mcp_tool_executed`` event, in order, also in the response
  that calls ``task_completed``;
* without an output channel the agent still runs; texts are only recorded.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from zoneinfo import ZoneInfo

import anyio
import structlog

from .. import events as ev
from ..channels.base import OutputChannel
from ..config.sub_agent import AgentConfiguration, McpServerRef, SubAgentConfig
from ..exceptions import LLMError
from ..llm import LLMClient, LLMResponse, resolve_model_settings
from ..observability import traced_agent_run
from ..tools.base import CallContext, PlannedCall, Tool, ToolOutcome
from ..tools.executor import execute_calls
from ..tools.mcp_tools import MCPToolset
from ._plan import AgentRun, Outcome, Plan, assistant_message, repair_name, tool_message
from ._tool_features import (
    RECALL,
    is_yes,
    preview,
    recall_tool,
    state_outputs,
    with_state_inputs,
)
from .schemas import (
    AgentInput,
    AgentOutput,
    AgentStatus,
    AgentToolContext,
    AgentToolResult,
    AgentToolSchema,
    CustomToolSchema,
)

if TYPE_CHECKING:
    from ..config.endpoints import EndpointsConfig
    from ..mcp.pool import MCPPool

log = structlog.get_logger("subagents.agent")
TEMPLATES = Path(__file__).with_name("templates")

NUDGE_EMPTY = ("Your last reply was empty. Answer the user now: ask for what you still need, "
               "or give your result.")
RETRY_MALFORMED_JSON = ("The arguments of your last tool call were not valid JSON, so nothing "
                        "was run. Repeat the call with strictly valid JSON arguments.")
LAST_STEP = ("You have used all the steps you may take for this request. Do not call tools. "
             "Reply to the user now with what you have found so far, in a few sentences.")


class MCPBaseAgent:
    """Base class of the MCP sub agents. Subclass an agent and override the hooks."""

    PROTOCOL_TYPE: ClassVar[str] = ""
    TEMPLATE_FILE: ClassVar[str] = ""
    MAX_UNAVAILABLE_TOOL_CALL_RETRIES: ClassVar[int] = 1
    TOOL_CALL_DEFAULT_TIMEOUT: ClassVar[float] = 10.0

    def __init__(self, name: str, description: str, *,
                 configuration: AgentConfiguration | None = None,
                 server_refs: list[McpServerRef] | None = None,
                 llm: LLMClient | None = None, pool: MCPPool | None = None,
                 project_root: Path | None = None) -> None:
        self.name = name
        self.description = description
        self.configuration = configuration or AgentConfiguration()
        self.project_root = project_root or Path.cwd()
        self.llm = llm or LLMClient(resolve_model_settings(self.configuration.llm, None),
                                    name=name)
        self.server_refs = list(server_refs or [])
        self.mcp_toolset = MCPToolset(pool, self.server_refs, agent_name=name,
                                      settings=self.configuration.tools) \
            if pool is not None and self.server_refs else None
        self._template = self._compile_template()
        self._custom_tools = [CustomToolSchema.from_dict(item)
                              for item in self.get_custom_tool_definitions()]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config: SubAgentConfig, *, endpoints: EndpointsConfig | None = None,
                    pool: MCPPool | None = None, project_root: Path | None = None,
                    llm: LLMClient | None = None) -> MCPBaseAgent:
        conf = config.configuration
        if llm is None:
            settings = resolve_model_settings(conf.llm, endpoints, where=config.agent.name)
            llm = LLMClient(settings, name=config.agent.name)
        return cls(config.agent.name, config.agent.description, configuration=conf,
                   server_refs=list(config.connections.mcp_servers or []), llm=llm, pool=pool,
                   project_root=project_root)

    @property
    def protocol_type(self) -> str:
        return self.PROTOCOL_TYPE

    @property
    def agent_id(self) -> str:
        """``<name>::<protocol_type>``, as in ``mcp_tool_executed`` metadata."""
        return f"{self.name}::{self.protocol_type}"

    def _compile_template(self) -> Any:
        from jinja2.sandbox import SandboxedEnvironment

        path = self.configuration.prompt_template
        text = (self.project_root / path).read_text(encoding="utf-8") if path else \
            self.get_default_prompt_template()
        env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(text)

    @classmethod
    def get_default_prompt_template(cls) -> str:
        return (TEMPLATES / cls.TEMPLATE_FILE).read_text(encoding="utf-8")

    async def connect(self) -> None:
        """Connect the agent's MCP servers (shared per process); retried with backoff."""
        if self.mcp_toolset is not None:
            await self.mcp_toolset.start(self.configuration.max_retries or 5)

    async def disconnect(self) -> None:
        await self.llm.close()

    # ------------------------------------------------------------------ hooks
    async def process_input(self, input: AgentInput) -> AgentInput:
        """Rewrite the input before a run; identity by default."""
        return input

    async def process_output(self, output: AgentOutput) -> AgentOutput:
        """Rewrite the output after a run (called, unlike in the reference)."""
        return output

    def get_custom_tool_definitions(self) -> list[dict[str, Any]]:
        """OpenAI-format tool dicts, each with a ``tool_executor(arguments, context)``."""
        from ..tools.python import discover_python_tools

        return discover_python_tools(self)

    async def build_custom_tool_call_metadata(self, context: dict[str, Any]) -> dict[str, Any]:
        """Extra metadata (e.g. credentials) merged into ``AgentToolContext.metadata``."""
        return {}

    async def process_tool_output(self, current_iteration_results: dict[str, AgentToolResult],
                                  cumulative_results: dict[str, AgentToolResult],
                                  output_channel: OutputChannel | None) -> list[dict[str, Any]]:
        """Events to add after an iteration's tools ran (SlotSets update the slot view)."""
        return []

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        return []

    def render_prompt_template(self, context: AgentInput) -> str:
        return str(self._template.render(**self._build_context_for_prompt(context)))

    def _build_context_for_prompt(self, context: AgentInput) -> dict[str, Any]:
        meta = context.metadata
        values: dict[str, Any] = {
            "description": self.description, "user_message": context.user_message,
            "slots": {s.name: s.value for s in context.slots if s.value is not None},
            "conversation_history": context.conversation_history,
            "recipient_id": context.recipient_id, "agent_name": self.name,
            "enable_filler_messages": self.configuration.enable_filler_messages,
            "resumed_after_interruption": bool(meta.get("resumed_after_interruption")),
            "resumed_last_request": str(meta.get("agent_response") or ""),
            "restarted": bool(meta.get("restarted"))}
        if self.configuration.include_date_time:
            values["current_datetime"] = self._now(context)
        return values

    def _now(self, context: AgentInput) -> datetime:
        tz = ZoneInfo(self.configuration.timezone or "UTC")
        mocked = context.metadata.get("mocked_datetime")
        slot = context.slot("mocked_datetime")
        mocked = mocked or (slot.value if slot is not None else None)
        if mocked:
            with contextlib.suppress(ValueError, TypeError):
                parsed = datetime.fromisoformat(str(mocked))
                return parsed.astimezone(tz) if parsed.tzinfo else parsed.replace(tzinfo=tz)
        return datetime.now(tz)

    def build_messages_for_llm_request(self, context: AgentInput,
                                       turns: int = 10) -> list[dict[str, Any]]:
        """System prompt, then the last ``turns`` utterances as chat messages."""
        from ._history import history_messages

        messages = [{"role": "system", "content": self.render_prompt_template(context)}]
        messages += history_messages(context, self.name, turns)
        return messages

    def create_bot_uttered(self, text: str, agent_input: AgentInput,
                           message_type: str = "final_response",
                           llm_time_to_first_token_ms: float | None = None,
                           llm_total_time_ms: float | None = None,
                           streamed: bool = False) -> dict[str, Any]:
        meta = {"utter_source": type(self).__name__, "agent_name": self.name,
                "agent_message_type": message_type,
                "agent_id": agent_input.metadata.get("agent_id"),
                "model_id": agent_input.metadata.get("model_id"),
                "llm_time_to_first_token_ms": llm_time_to_first_token_ms,
                "llm_total_time_ms": llm_total_time_ms}
        if streamed:
            meta["streamed_text"] = True
        return ev.bot_uttered(text, metadata=meta)

    # ------------------------------------------------------------------ the run
    @traced_agent_run
    async def run(self, input: AgentInput, output_channel: OutputChannel | None = None,
                  cancellation_token: Any = None) -> AgentOutput:
        """``process_input`` -> the loop -> ``process_output``."""
        try:
            processed = await self.process_input(input)
        except Exception as exc:  # noqa: BLE001 - a failing hook ends the run, not the process
            return self._output(AgentRun(input, output_channel),
                                Outcome.fatal(f"process_input failed: {exc}"))
        return await self.process_output(await self.send_message(processed, output_channel))

    async def send_message(self, agent_input: AgentInput,
                           output_channel: OutputChannel | None = None) -> AgentOutput:
        """The ReAct loop with the whole-run deadline (``configuration.timeout``, D5)."""
        run = AgentRun(agent_input, output_channel)
        timeout = self.configuration.timeout
        outcome: Outcome | None = None
        with anyio.move_on_after(timeout if timeout else float("inf")) as scope:
            try:
                outcome = await self._loop(run)
            except LLMError as exc:
                outcome = Outcome.fatal(f"the model call failed: {exc}")
            except Exception as exc:
                log.exception("agent.run.failed", agent=self.name)
                outcome = Outcome.fatal(f"{type(exc).__name__}: {exc}")
        if scope.cancelled_caught or outcome is None:
            outcome = Outcome.fatal(f"agent {self.name!r} did not finish within {timeout:g}s "
                                    "(configuration.timeout)", reason="timeout")
        output = self._output(run, outcome)
        log.info("agent.run.finished", agent=self.name, status=output.status.value,
                 exit_reason=output.exit_reason, steps=output.steps, tool_calls=output.tool_calls,
                 prompt_tokens=run.usage.prompt_tokens,
                 completion_tokens=run.usage.completion_tokens)
        return output

    async def _loop(self, run: AgentRun) -> Outcome:
        await self._prepare(run)
        parked = await self._resume_client_tools(run)
        if parked is not None:
            return parked
        await self._resume_approval(run)
        for _ in range(self.configuration.max_agent_steps):
            outcome = await self._run_step(run)
            if outcome is not None:
                return outcome
        return await self._on_max_steps(run)

    async def _prepare(self, run: AgentRun) -> None:
        """Resolve the tools offered in this run (MCP, built-ins, custom)."""
        tools = await self.mcp_toolset.tools() if self.mcp_toolset is not None else []
        tools += self._builtin_tools(run)
        tools += [self._custom_tool(c) for c in self._custom_tools]
        tools += self._client_tools()
        if self.configuration.tool_result_budget:
            tools.append(recall_tool(run.full_results))
        run.tools = {}
        for tool in tools:
            settings = self.configuration.tools.get(tool.name)
            if settings is not None:
                tool = with_state_inputs(tool, settings)
            run.tools.setdefault(tool.name, tool)

    def _builtin_tools(self, run: AgentRun) -> list[Tool]:
        return []

    async def _run_step(self, run: AgentRun) -> Outcome | None:
        messages = self._messages(run)
        response = await self._generate(run, messages, self._offered(run))
        plan = self._plan(run, response)
        if plan.malformed:
            run.tool_messages.append({"role": "system", "content": RETRY_MALFORMED_JSON})
            return None
        if not response.streamed and plan.text:
            await self._deliver(run, plan.text)
        if not plan.has_tool_calls:
            if not plan.text and not run.completion_pending:
                run.tool_messages.append({"role": "system", "content": NUDGE_EMPTY})
                return None
            return await self._on_text(run, plan)
        return await self._on_tools(run, plan)

    async def _on_text(self, run: AgentRun, plan: Plan) -> Outcome | None:
        raise NotImplementedError

    async def _on_tools(self, run: AgentRun, plan: Plan) -> Outcome | None:
        raise NotImplementedError

    async def _on_max_steps(self, run: AgentRun) -> Outcome:
        """D6: one last model call with tools disabled produces a real reply."""
        run.tool_messages.append({"role": "system", "content": LAST_STEP})
        response = await self._generate(run, self._messages(run), [])
        text = (response.text or "").strip()
        if text and not response.streamed:
            await self._deliver(run, text)
        if text:
            self._record_text(run, text, response, self._max_steps_message_type())
        return self._max_steps_outcome(run)

    def _max_steps_message_type(self) -> str:
        return "final_response"

    def _max_steps_outcome(self, run: AgentRun) -> Outcome:
        return Outcome(AgentStatus.COMPLETED, "max_steps")

    # ------------------------------------------------------------------ model call + delivery
    def _messages(self, run: AgentRun) -> list[dict[str, Any]]:
        base = self.build_messages_for_llm_request(run.input)
        return [*base, *run.tool_messages]

    def _offered(self, run: AgentRun) -> list[dict[str, Any]]:
        return [tool.schema.to_openai() for tool in run.tools.values()]

    async def _generate(self, run: AgentRun, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]]) -> LLMResponse:
        channel, recipient = run.channel, run.recipient_id
        run.steps += 1
        if channel is None or recipient is None or not channel.wants_streaming():
            response = await self.llm.complete(messages, tools or None)
        else:
            response = await self._stream(channel, recipient, messages, tools)
        run.usage.add(response.usage)
        return response

    async def _stream(self, channel: OutputChannel, recipient: str,
                      messages: list[dict[str, Any]], tools: list[dict[str, Any]]
                      ) -> LLMResponse:
        started = False

        async def on_text(delta: str) -> None:
            nonlocal started
            if not started:
                started = True
                await channel.send_response_chunk_start(recipient)
            await channel.send_response_chunk(recipient, delta)

        try:
            response = await self.llm.complete(messages, tools or None, stream=True,
                                               on_text=on_text)
        except BaseException:
            if started:
                await channel.send_response_chunk_end(recipient, interrupted=True)
            raise
        if started:
            await channel.send_response_chunk_end(recipient)
        return response

    async def _deliver(self, run: AgentRun, text: str) -> None:
        if run.channel is not None and run.recipient_id is not None:
            await run.channel.send_text_message(run.recipient_id, text)

    def _record_text(self, run: AgentRun, text: str, response: LLMResponse,
                     message_type: str) -> dict[str, Any]:
        event = self.create_bot_uttered(text, run.input, message_type,
                                        response.time_to_first_token_ms,
                                        response.total_time_ms, streamed=response.streamed)
        run.events.append(event)
        return event

    # ------------------------------------------------------------------ planning
    def _plan(self, run: AgentRun, response: LLMResponse) -> Plan:
        offered = set(run.tools) | self._handled_builtins()
        taken: set[str] = set()
        plan = Plan(response=response, text=(response.text or "").strip(), calls=[],
                    unavailable=[], builtin=[], malformed=[])
        for call in response.tool_calls:
            if call.arguments is None:
                plan.malformed.append(call)
                continue
            name, available = repair_name(call.name, offered, taken)
            taken.add(name)
            planned = PlannedCall(call.id, name, call.arguments, run.tools.get(name))
            if not available:
                plan.unavailable.append(planned)
            elif name in self._handled_builtins():
                plan.builtin.append(planned)
            elif planned.tool is not None and planned.tool.source == "client":
                plan.client.append(planned)
            elif self._needs_approval(name):
                plan.approval.append(planned)
            else:
                plan.calls.append(planned)
        return plan

    def _handled_builtins(self) -> set[str]:
        """Built-in tool names the agent handles itself instead of executing."""
        return set()

    # ------------------------------------------------------------------ tool execution
    async def _execute(self, run: AgentRun, plan: Plan) -> list[ToolOutcome]:
        """Run the plan's tools (parallel policy), answer every call, record events."""
        run.tool_messages.append(assistant_message(plan))
        ctx = CallContext(run.input, AgentToolContext(metadata=dict(run.input.metadata)),
                          timeout=self.configuration.tool_timeout)
        outcomes = await execute_calls(plan.calls, ctx,
                                       max_parallel=self.configuration.max_parallel_tools)
        answers: dict[str, str] = {}
        for outcome in outcomes:
            answers[outcome.call.id], event = self._record_tool(run, outcome)
            if event is not None and run.channel is not None and run.recipient_id is not None:
                await run.channel.send_event(run.recipient_id, event)
        for call in plan.unavailable:
            answers[call.id] = self._unavailable_text(call.name, run)
        for call in plan.builtin:
            answers[call.id] = self._builtin_answer(run, call)
        for raw in plan.response.tool_calls:
            if raw.id in answers:
                run.tool_messages.append(tool_message(raw.id, answers.pop(raw.id)))
        current = {o.call.id: o.result for o in outcomes
                   if not o.result.is_error and o.call.tool and o.call.tool.source != "builtin"}
        if current:
            await self._apply_hook_events(run, current)
        return outcomes

    def _record_tool(self, run: AgentRun, outcome: ToolOutcome
                     ) -> tuple[str, dict[str, Any] | None]:
        """Record the call; return the model's answer and the event (None for built-ins)."""
        call, result = outcome.call, outcome.result
        run.count_tool(call.name)
        source = call.tool.source if call.tool else ""
        event = None
        if source != "builtin":
            event = ev.mcp_tool_executed(
                call.name, call.arguments, result.result, is_error=result.is_error,
                error_message=result.error_message, agent_id=self.agent_id,
                duration_ms=round(outcome.duration_ms, 1))
            run.events.append(event)
            if not result.is_error:
                run.results[call.id] = result
                run.structured.append({"name": call.name, "result": result.result or ""})
                self._outputs_to_state(run, call.name, result.result or "")
        log.info("agent.tool.finished", agent=self.name, tool=call.name, source=source,
                 is_error=result.is_error, duration_ms=round(outcome.duration_ms, 1))
        if result.is_error:
            return f"Error: {result.error_message}", event
        text = result.result if result.result is not None else ""
        budget = self.configuration.tool_result_budget
        if budget and len(text) > budget and call.name != RECALL:
            run.full_results[call.id] = text
            text = preview(call.id, text, budget)
        return text, event

    def _outputs_to_state(self, run: AgentRun, tool_name: str, result: str) -> None:
        """A2: copy result fields into slots (list slots are extended)."""
        settings = self.configuration.tools.get(tool_name)
        if settings is None or not settings.outputs_to_state:
            return
        for slot_name, value in state_outputs(settings, result):
            slot = run.input.slot(slot_name)
            if slot is not None and slot.type == "list":
                current = list(slot.value or [])
                value = current + (value if isinstance(value, list) else [value])
            self._apply_slot(run, slot_name, value)
            run.slot_set_by_hook.add(slot_name)
            run.events.append(ev.slot_set(slot_name, value))

    # ------------------------------------------------------------------ client tools (A6)
    def _client_tools(self) -> list[Tool]:
        async def never(arguments: dict[str, Any], ctx: Any) -> AgentToolResult:
            raise AssertionError("client tools are executed by the client")

        tools = []
        for item in self.configuration.client_tools:
            schema = AgentToolSchema(name=item.name, description=item.description,
                                     parameters=item.parameters)
            tools.append(Tool(schema=schema, run=never, source="client"))
        return tools

    def _needs_approval(self, tool_name: str) -> bool:
        settings = self.configuration.tools.get(tool_name)
        return bool(settings and settings.requires_approval)

    async def _park(self, run: AgentRun, plan: Plan) -> Outcome | None:
        """Client tools, then approvals: the run waits for the client or the user."""
        parked = await self._park_for_client(run, plan)
        if parked is not None or not plan.approval:
            return parked
        described = "; ".join(f"{c.name}({', '.join(f'{k}={v!r}' for k, v in c.arguments.items())})"
                              for c in plan.approval)
        question = f"Before I go ahead: may I run {described}? Please answer yes or no."
        await self._deliver(run, question)
        event = self.create_bot_uttered(question, run.input, "input_required")
        run.events.append(event)
        run.output_metadata["pending_approval"] = {
            "messages": run.tool_messages,
            "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                      for c in plan.approval]}
        return Outcome(AgentStatus.INPUT_REQUIRED, "approval")

    async def _resume_approval(self, run: AgentRun) -> None:
        """The user answered an approval question: run the calls on a yes, else decline."""
        pending = run.input.metadata.get("pending_approval")
        if not pending:
            return
        run.tool_messages = list(pending.get("messages") or [])
        approved = is_yes(run.input.user_message)
        planned = [PlannedCall(c["id"], c["name"], c.get("arguments") or {},
                               run.tools.get(c["name"])) for c in pending.get("calls") or []]
        runnable = [c for c in planned if approved and c.tool is not None]
        ctx = CallContext(run.input, AgentToolContext(metadata=dict(run.input.metadata)),
                          timeout=self.configuration.tool_timeout)
        outcomes = {o.call.id: o for o in await execute_calls(
            runnable, ctx, max_parallel=self.configuration.max_parallel_tools)}
        for call in planned:
            if call.id in outcomes:
                answer, _ = self._record_tool(run, outcomes[call.id])
            else:
                answer = "The user did not approve this call, so it was not run."
            run.tool_messages.append(tool_message(call.id, answer))

    async def _park_for_client(self, run: AgentRun, plan: Plan) -> Outcome | None:
        """After the other calls ran: ask the client to run its tools and wait for results."""
        if not plan.client:
            return None
        for call in plan.client:
            event = ev.agent_event("agent_client_tool_requested", self.name, None,
                                   tool_call_id=call.id, tool_name=call.name,
                                   arguments=call.arguments)
            run.events.append(event)
            if run.channel is not None and run.recipient_id is not None:
                await run.channel.send_event(run.recipient_id, event)
        run.output_metadata["pending_client_tools"] = {
            "messages": run.tool_messages,
            "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                      for c in plan.client]}
        return Outcome(AgentStatus.INPUT_REQUIRED, "client_tool")

    async def _resume_client_tools(self, run: AgentRun) -> Outcome | None:
        """Restore a parked exchange; answer pending calls with the client's results."""
        pending = run.input.metadata.get("pending_client_tools")
        if not pending:
            return None
        results: dict[str, Any] = dict(run.input.metadata.get("client_tool_results") or {})
        run.tool_messages = list(pending.get("messages") or [])
        waiting = []
        for call in pending.get("calls") or []:
            if call["id"] in results:
                text = results[call["id"]]
                text = text if isinstance(text, str) else json.dumps(text)
                run.events.append(ev.mcp_tool_executed(
                    call["name"], call.get("arguments") or {}, text, is_error=False,
                    error_message=None, agent_id=self.agent_id))
                run.tool_messages.append(tool_message(call["id"], text))
                run.structured.append({"name": call["name"], "result": text})
            else:
                waiting.append(call)
        if waiting and not run.input.user_message.strip():
            run.output_metadata["pending_client_tools"] = {**pending, "calls": waiting,
                                                           "messages": run.tool_messages}
            return Outcome(AgentStatus.INPUT_REQUIRED, "client_tool")
        for call in waiting:
            run.tool_messages.append(tool_message(
                call["id"], "The client has not returned this tool's result yet. Do not call "
                "it again; continue with the user's message."))
        return None

    def _unavailable_text(self, name: str, run: AgentRun) -> str:
        names = sorted(run.tools)
        text = f"Error: `{name}` is not an available tool, so nothing was run. "
        if not names:
            text += "No tools are available. "
        elif len(names) <= 30:
            text += f"Available tools: {', '.join(names)}. "
        else:
            text += "Use only the tools listed in this request. "
        return text + "Call a tool by its exact name, or answer the user directly."

    def _builtin_answer(self, run: AgentRun, call: PlannedCall) -> str:
        return "ok"

    async def _apply_hook_events(self, run: AgentRun,
                                 current: dict[str, AgentToolResult]) -> None:
        try:
            produced = await self.process_tool_output(current, dict(run.results), run.channel)
        except Exception as exc:
            raise RuntimeError(f"process_tool_output failed: {exc}") from exc
        for event in produced or []:
            if not ev.is_event(event):
                log.error("agent.hook.invalid_event", agent=self.name, value=repr(event)[:200])
                continue
            run.events.append(event)
            run.input.events.append(event)
            if event["event"] == "slot":
                self._apply_slot(run, event["name"], event.get("value"))
                run.slot_set_by_hook.add(event["name"])

    def _apply_slot(self, run: AgentRun, name: str, value: Any) -> None:
        from .schemas import AgentInputSlot

        slot = run.input.slot(name)
        if slot is None:
            run.input.slots.append(AgentInputSlot(name=name, value=value, type="any"))
        else:
            slot.value = value
        run.slot_values[name] = value

    def _tool_failure(self, outcomes: list[ToolOutcome]) -> Outcome | None:
        """With ``raise_on_tool_invocation_failure``, the first failed tool ends the run."""
        if not self.configuration.raise_on_tool_invocation_failure:
            return None
        for outcome in outcomes:
            if outcome.result.is_error:
                return Outcome.fatal(f"tool {outcome.call.name!r} failed: "
                                     f"{outcome.result.error_message}")
        return None

    def _unavailable_outcome(self, run: AgentRun, plan: Plan) -> Outcome | None:
        if not plan.unavailable:
            return None
        run.unavailable_rounds += 1
        if run.unavailable_rounds > self.MAX_UNAVAILABLE_TOOL_CALL_RETRIES:
            name = plan.unavailable[-1].name
            return Outcome.fatal(f"the model kept calling tools that are not available "
                                 f"(last: {name!r})")
        return None

    # ------------------------------------------------------------------ custom tools
    def _custom_tool(self, custom: CustomToolSchema) -> Tool:
        settings = self.configuration.tools.get(custom.tool_name)
        read_only = custom.read_only
        if settings is not None and settings.read_only is not None:
            read_only = settings.read_only

        async def run(arguments: dict[str, Any], ctx: CallContext) -> AgentToolResult:
            hook_ctx = {"sender_id": ctx.agent_input.recipient_id, "server_name": None,
                        "tool_name": custom.tool_name, "agent_id": self.name}
            try:
                extra = await self.build_custom_tool_call_metadata(hook_ctx)
            except Exception as exc:  # noqa: BLE001 - reported to the model
                return AgentToolResult(tool_name=custom.tool_name, is_error=True,
                                       error_message=f"the call-metadata hook failed for "
                                                     f"{custom.tool_name!r}: {exc}")
            metadata = {**ctx.tool_context.metadata, **(extra or {})}
            executor: Callable[..., Any] = custom.tool_executor
            result = executor(dict(arguments), AgentToolContext(metadata=metadata))
            if inspect.isawaitable(result):
                result = await result
            return _as_result(custom.tool_name, result)

        return Tool(schema=custom.tool_definition, run=run, source="custom",
                    read_only=read_only, timeout=settings.timeout if settings else None)

    # ------------------------------------------------------------------ output
    def _output(self, run: AgentRun, outcome: Outcome) -> AgentOutput:
        previous = run.input.metadata.get("structured_results") or []
        events = self._final_events(run, outcome)
        return AgentOutput(
            id=self.name, status=outcome.status, response_message=outcome.response_message,
            events=events, structured_results=[*previous, list(run.structured)],
            error_message=outcome.error_message, exit_reason=outcome.exit_reason,
            steps=run.steps, tool_calls=dict(run.tool_counts),
            metadata=dict(run.output_metadata) or None,
            usage={"prompt_tokens": run.usage.prompt_tokens,
                   "completion_tokens": run.usage.completion_tokens,
                   "total_tokens": run.usage.total_tokens})

    def _final_events(self, run: AgentRun, outcome: Outcome) -> list[dict[str, Any]]:
        return list(run.events)


def _as_result(tool_name: str, value: Any) -> AgentToolResult:
    if isinstance(value, AgentToolResult):
        return value
    if isinstance(value, str):
        return AgentToolResult(tool_name=tool_name, result=value)
    raise TypeError(f"tool {tool_name!r} returned {type(value).__name__}, not an AgentToolResult")

