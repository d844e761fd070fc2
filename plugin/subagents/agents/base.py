"""The ReAct loop shared by MCPOpenAgent and MCPTaskAgent.

``run`` = ``process_input`` -> ``send_message`` (the loop) -> ``process_output``. The loop runs
:meth:`MCPBaseAgent._step` until a step returns :class:`Finish` or :class:`Park`; one step is, in
order: generate (call the model; text reaches the output channel at once, streamed when the
channel streams) -> plan (parse the response) -> deliver text -> execute tools (through the
run's toolset) -> decide. Only the decision differs between the open and the task agent
(:meth:`_decide_on_text`, :meth:`_decide_on_tools`).

Tool features (approvals, client-executed tools, state mapping, the result budget) are toolset
wrappers in :mod:`subagents.tools`; a deferred call (client tool, approval) parks the run. Tool
failures come back to the model as error results unless ``raise_on_tool_invocation_failure`` is
set.

Choices where Rasa Pro behaves accidentally, pinned by tests:

* text sent alongside tool calls is always recorded (also with fillers disabled), because the
  user saw it;
* an empty model answer (no text, no tools) gets one nudge to answer instead of a silent wait;
* every executed tool call gets an ``mcp_tool_executed`` event, in order, also in the response
  that calls ``task_completed``;
* without an output channel the agent still runs; texts are only recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, assert_never
from zoneinfo import ZoneInfo

import anyio
import structlog

from subagents import events as ev
from subagents.agents import _trace
from subagents.agents._elicitation import PENDING_KEY as ELICITATION_PENDING_KEY
from subagents.agents._elicitation import resume as resume_elicitation
from subagents.agents._elicitation import settle as settle_elicitation
from subagents.agents._history import history_messages
from subagents.agents._images import images_message
from subagents.agents._limits import cap_text, capped_render, capped_render_async
from subagents.agents._model_io import deliver, generate, send_event
from subagents.agents._parking import park, resume_approval, resume_client_tools
from subagents.agents._plan import (
    AgentRun,
    Continue,
    Executed,
    Finish,
    Outcome,
    Park,
    Plan,
    StepResult,
    assistant_message,
    repair_name,
    tool_message,
    unavailable_text,
)
from subagents.agents._recording import apply_slot, record_tool
from subagents.agents.budgets import (
    BUDGET_EVENT,
    BUDGET_SENTENCE,
    BudgetGuard,
    CapHit,
    budget_note,
    caps_set,
)
from subagents.agents.fillers import LatencyBook, progress_sink, said_before
from subagents.agents.schemas import (
    AgentInput,
    AgentOutput,
    AgentStatus,
    AgentToolContext,
    AgentToolResult,
    AgentToolSchema,
    CustomToolSchema,
    ExitReason,
)
from subagents.config.sub_agent import AgentConfiguration, McpServerRef, SubAgentConfig
from subagents.exceptions import AgentInitializationError, LLMError
from subagents.llm import LLMResponse, Model, build_model, resolve_model_settings
from subagents.observability import traced_agent_run
from subagents.tools import approvals
from subagents.tools.approvals import ApprovalToolset
from subagents.tools.base import CallContext, PlannedCall, Tool, ToolOutcome, Toolset
from subagents.tools.client_tools import ClientToolset
from subagents.tools.concurrency import execute_calls
from subagents.tools.elicitation import ElicitationToolset
from subagents.tools.executor import FunctionToolset
from subagents.tools.mcp_tools import MCPToolset
from subagents.tools.python import custom_tool
from subagents.tools.result_budget import ResultBudgetToolset
from subagents.tools.state_mapping import StateMappingToolset
from subagents.types import CallScope, ChatMessage, JsonObject, OutputChannel, TrackerEvent

if TYPE_CHECKING:
    from subagents.config.endpoints import EndpointsConfig
    from subagents.mcp.pool import MCPPool

log = structlog.get_logger("subagents.agent")
TEMPLATES = Path(__file__).with_name("templates")
_INLINE_HISTORY_EVENTS = 500
"""Above this many events the history is built in a worker thread with the prompt."""

NUDGE_EMPTY = ("Your last reply was empty. Answer the user now: ask for what you still need, "
               "or give your result.")
RETRY_MALFORMED_JSON = ("The arguments of your last tool call were not valid JSON, so nothing "
                        "was run. Repeat the call with strictly valid JSON arguments.")
LAST_STEP = ("You have used all the steps you may take for this request. Do not call tools. "
             "Reply to the user now with what you have found so far, in a few sentences.")


def _prompt_context_from_input(cls: type) -> bool:
    """Whether the class's ``_build_context_for_prompt`` is one of ours, which builds every
    value afresh from the agent input (so equal contexts render equal prompts)."""
    for klass in cls.__mro__:
        if "_build_context_for_prompt" in vars(klass):
            return bool(vars(klass).get("_PROMPT_CONTEXT_FROM_INPUT", False))
    return False


class MCPBaseAgent:
    """Base class of the MCP sub agents. Subclass an agent and override the hooks."""

    _PROMPT_CONTEXT_FROM_INPUT: ClassVar[bool] = True

    PROTOCOL_TYPE: ClassVar[str] = ""
    TEMPLATE_FILE: ClassVar[str] = ""
    MAX_UNAVAILABLE_TOOL_CALL_RETRIES: ClassVar[int] = 1
    TOOL_CALL_DEFAULT_TIMEOUT: ClassVar[float] = 10.0
    MAX_PROMPT_CHARS: ClassVar[int] = 200_000
    """The rendered system prompt is cut (and marked) after this many characters, unless
    ``configuration.max_prompt_chars`` is set."""
    MAX_RESPONSE_CHARS: ClassVar[int] = 20_000
    """Model text longer than this is cut (and marked) before it is sent or recorded, unless
    ``configuration.max_response_chars`` is set."""
    MAX_TOOL_RESULT_CHARS: ClassVar[int] = 200_000
    """Tool results longer than this are cut (and marked) before they are recorded, unless
    ``configuration.max_tool_result_chars`` is set."""

    def __init__(self, name: str, description: str, *,
                 configuration: AgentConfiguration | None = None,
                 server_refs: list[McpServerRef] | None = None,
                 llm: Model | None = None, pool: MCPPool | None = None,
                 project_root: Path | None = None) -> None:
        self.name = name
        self.description = description
        self.configuration = configuration or AgentConfiguration()
        self.project_root = project_root or Path.cwd()
        conf = self.configuration
        self.max_prompt_chars = conf.max_prompt_chars or self.MAX_PROMPT_CHARS
        """The prompt cap in effect: ``configuration.max_prompt_chars`` or the class default."""
        self.max_response_chars = conf.max_response_chars or self.MAX_RESPONSE_CHARS
        """The model text cap in effect (``configuration.max_response_chars``)."""
        self.max_tool_result_chars = conf.max_tool_result_chars or self.MAX_TOOL_RESULT_CHARS
        """The tool result cap in effect (``configuration.max_tool_result_chars``)."""
        self.llm = llm or build_model(resolve_model_settings(self.configuration.llm, None),
                                          name=name)
        self.server_refs = list(server_refs or [])
        self.mcp_toolset = MCPToolset(pool, self.server_refs, agent_name=name,
                                      settings=self.configuration.tools) \
            if pool is not None and self.server_refs else None
        self._template = self._compile_template()
        self._latency = LatencyBook()
        self._custom_tools = [CustomToolSchema.from_dict(item)
                              for item in self.get_custom_tool_definitions()]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config: SubAgentConfig, *, endpoints: EndpointsConfig | None = None,
                    pool: MCPPool | None = None, project_root: Path | None = None,
                    llm: Model | None = None) -> MCPBaseAgent:
        """Build the agent from its ``sub_agents/<name>/config.yml``."""
        conf = config.configuration
        if llm is None:
            settings = resolve_model_settings(conf.llm, endpoints, where=config.agent.name)
            llm = build_model(settings, name=config.agent.name)
        return cls(config.agent.name, config.agent.description, configuration=conf,
                   server_refs=list(config.connections.mcp_servers or []), llm=llm, pool=pool,
                   project_root=project_root)

    @property
    def protocol_type(self) -> str:
        """``mcp_open`` or ``mcp_task`` (how the agent is registered)."""
        return self.PROTOCOL_TYPE

    @property
    def agent_id(self) -> str:
        """``<name>::<protocol_type>``, as in ``mcp_tool_executed`` metadata."""
        return f"{self.name}::{self.protocol_type}"

    def _compile_template(self) -> Any:
        from jinja2.sandbox import SandboxedEnvironment

        path = self.configuration.prompt_template
        text = self._read_project_template(path) if path else \
            self.get_default_prompt_template()
        env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(text)

    def _read_project_template(self, path: str) -> str:
        root = self.project_root.resolve()
        resolved = (root / path).resolve()
        if not resolved.is_relative_to(root):
            raise AgentInitializationError(
                f"agent {self.name!r}: configuration.prompt_template {path!r} is outside the "
                f"project folder {root}", code="agent.prompt_template.outside_project")
        return resolved.read_text(encoding="utf-8")

    @classmethod
    def get_default_prompt_template(cls) -> str:
        """The built-in prompt template of this agent kind."""
        return (TEMPLATES / cls.TEMPLATE_FILE).read_text(encoding="utf-8")

    async def connect(self) -> None:
        """Connect the agent's MCP servers (shared per process), retried with backoff, and open
        the model client's connection pool."""
        if self.mcp_toolset is not None:
            await self.mcp_toolset.start(self.configuration.max_retries or 5)
        await self.llm.prepare()

    async def disconnect(self) -> None:
        """Release the model client (MCP connections belong to the shared pool)."""
        await self.llm.close()

    # ------------------------------------------------------------------ hooks
    async def process_input(self, input: AgentInput) -> AgentInput:
        """Rewrite the input before a run; identity by default."""
        return input

    async def process_output(self, output: AgentOutput) -> AgentOutput:
        """Rewrite the output after a run (called, unlike in Rasa Pro)."""
        return output

    def get_custom_tool_definitions(self) -> list[JsonObject]:
        """OpenAI-format tool dicts, each with a ``tool_executor(arguments, context)``."""
        from subagents.tools.python import discover_python_tools

        return discover_python_tools(self)

    async def build_custom_tool_call_metadata(self, context: JsonObject) -> JsonObject:
        """Extra metadata (e.g. credentials) merged into ``AgentToolContext.metadata``."""
        return {}

    async def process_tool_output(self, current_iteration_results: dict[str, AgentToolResult],
                                  cumulative_results: dict[str, AgentToolResult],
                                  output_channel: OutputChannel | None) -> list[TrackerEvent]:
        """Events to add after an iteration's tools ran (SlotSets update the slot view)."""
        return []

    def get_agent_specific_built_in_tools(self, agent_input: AgentInput) -> list[AgentToolSchema]:
        """Built-in tools of this agent kind (none here)."""
        return []

    def render_prompt_template(self, context: AgentInput) -> str:
        """The system prompt; cut (and marked) after ``max_prompt_chars`` characters."""
        return capped_render(self._template, self._build_context_for_prompt(context),
                             self.max_prompt_chars)

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
                                       turns: int = 10) -> list[ChatMessage]:
        """System prompt, then the last ``turns`` utterances as chat messages."""
        messages = [{"role": "system", "content": self.render_prompt_template(context)}]
        messages += history_messages(context, self.name, turns)
        return messages

    def create_bot_uttered(self, text: str, agent_input: AgentInput,
                           message_type: str = "final_response",
                           llm_time_to_first_token_ms: float | None = None,
                           llm_total_time_ms: float | None = None,
                           streamed: bool = False) -> TrackerEvent:
        """A ``bot`` event for text the agent sent, with the agent's metadata."""
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
                  cancellation_token: Any = None, *, scope: CallScope | None = None
                  ) -> AgentOutput:
        """``process_input`` -> the loop -> ``process_output``. ``scope`` is what the turn
        gives the run's model and tool calls (deadline, usage tally, recording)."""
        try:
            processed = await self.process_input(input)
        except Exception as exc:  # noqa: BLE001 - a failing hook ends the run, not the process
            return self._output(AgentRun(input, output_channel),
                                Outcome.fatal(f"process_input failed: {exc}"))
        if scope is not None:
            processed.attach_scope(scope)
        return await self.process_output(await self.send_message(processed, output_channel))

    async def send_message(self, agent_input: AgentInput,
                           output_channel: OutputChannel | None = None) -> AgentOutput:
        """The ReAct loop under the whole-run deadline (``configuration.timeout``)."""
        run = AgentRun(agent_input, output_channel,
                       scope=agent_input.call_scope or CallScope())
        timeout = self.configuration.timeout
        outcome: Outcome | None = None
        if timeout:
            with anyio.move_on_after(timeout):
                outcome = await self._guarded_loop(run)
        else:  # no deadline: no cancel scope to enter and leave
            outcome = await self._guarded_loop(run)
        if outcome is None:
            outcome = Outcome.fatal(f"agent {self.name!r} did not finish within {timeout:g}s "
                                    "(configuration.timeout)", reason=ExitReason.TIMEOUT)
        settle_elicitation(run, outcome)
        output = self._output(run, outcome)
        await _trace.run_finished(run, self.name, output)
        run.release()
        # log.bind().info: the lazy proxy's own path, without its failed attribute lookup
        log.bind().info("agent.run.finished", agent=self.name, status=output.status.value,
                        exit_reason=output.exit_reason, steps=output.steps,
                        tool_calls=output.tool_calls, prompt_tokens=run.usage.prompt_tokens,
                        completion_tokens=run.usage.completion_tokens)
        return output

    async def _guarded_loop(self, run: AgentRun) -> Outcome:
        """The loop; a failure ends the run with a fatal outcome instead of raising."""
        try:
            return await self._loop(run)
        except LLMError as exc:
            return Outcome.fatal(f"the model call failed: {exc}")
        except Exception as exc:
            log.exception("agent.run.failed", agent=self.name)
            return Outcome.fatal(f"{type(exc).__name__}: {exc}")

    async def _loop(self, run: AgentRun) -> Outcome:
        """Resume parked calls, then step until a step finishes or parks the run."""
        self._prepare(run, await self._mcp_tools())
        await _trace.run_started(run, self.name)
        run.progress = progress_sink(run, self.configuration, self.name)
        ended = await self._resume(run)
        if ended is not None:
            return ended
        if caps_set(self.configuration.budgets):
            run.budget = BudgetGuard(self.configuration.budgets, self.llm.settings.model,
                                     run.input)
        for _ in range(self.configuration.max_agent_steps):
            if run.budget is not None and (hit := run.budget.before_model(run)):
                return await self._on_budget(run, hit)
            recorded = len(run.events)
            result = await self._step(run)
            if _trace.tracing(run):
                await _trace.texts(run, self.name, run.events[recorded:])
            match result:
                case Continue(note=note):
                    if note:
                        run.note(note)
                case Finish(outcome=outcome) | Park(outcome=outcome):
                    return outcome
                case _:
                    assert_never(result)
        recorded = len(run.events)
        outcome = await self._on_max_steps(run)
        await _trace.texts(run, self.name, run.events[recorded:])
        return outcome

    async def _resume(self, run: AgentRun) -> Outcome | None:
        """Take up what an earlier invocation parked: client tool results, a server's request
        for input, approved calls; the outcome when the run ends here. Each part runs only
        when the input carries its saved state (a call context is built only then)."""
        resumed = await resume_client_tools(run, agent_id=self.agent_id)
        if isinstance(resumed, Park):
            return resumed.outcome
        metadata = run.input.metadata
        if metadata.get(ELICITATION_PENDING_KEY):
            lost = await resume_elicitation(run, self._call_context(run),
                                            agent_id=self.agent_id, agent_name=self.name)
            if lost is not None:
                return lost
        if metadata.get(approvals.PENDING_KEY):
            recorded = len(run.events)
            await resume_approval(run, self._call_context(run), agent_id=self.agent_id,
                                  agent_name=self.name,
                                  max_parallel=self.configuration.max_parallel_tools)
            await _trace.resumed_calls(run, self.name, run.events[recorded:])
        return None

    async def _step(self, run: AgentRun) -> StepResult:
        """One ReAct step: generate -> plan -> deliver text -> execute tools -> decide."""
        # 1. generate: the model sees the conversation, this run's exchange and the tools
        messages, offered = await self._messages(run), self._offered(run)
        response = await generate(self.llm, run, messages, offered)
        if _trace.tracing(run):
            await _trace.model_call(run, self.name, messages, offered, response)
        # 2. plan: resolve the calls against the offered tools before anything runs
        plan = self._plan(run, response)
        if plan.malformed:
            return Continue(note=RETRY_MALFORMED_JSON)
        # 3. deliver text: the user sees it now (streamed text already arrived)
        held = self._hold_filler(run, plan, response)
        if plan.text and not response.streamed and not held:
            await deliver(run, plan.text)
        if not plan.has_tool_calls:
            if not plan.text and not run.completion_pending:
                return Continue(note=NUDGE_EMPTY)
            return self._decide_on_text(run, plan)
        if plan.text and not held:
            self._record_text(run, plan.text, response, self._text_kind(plan))
        if plan.calls and run.budget is not None \
                and (hit := run.budget.before_tools(run, len(plan.calls))):
            return Finish(await self._on_budget(run, hit))
        # 4. execute tools: through the toolset (deferred calls are not run)
        executed = await self._execute(run, plan) if self._runs_tools(plan) else Executed()
        # 5. decide: the subclass's rule - finish, park, or go on
        return await self._decide_on_tools(run, plan, executed)

    # ------------------------------------------------------------------ decisions (subclasses)
    def _decide_on_text(self, run: AgentRun, plan: Plan) -> StepResult:
        """A response with text and no tool calls."""
        raise NotImplementedError

    async def _decide_on_tools(self, run: AgentRun, plan: Plan,
                               executed: Executed) -> StepResult:
        """A response with tool calls, after they ran."""
        raise NotImplementedError

    def _text_kind(self, plan: Plan) -> str:
        """The message type of text sent beside tool calls."""
        return "filler_message"

    def _hold_filler(self, run: AgentRun, plan: Plan, response: LLMResponse) -> bool:
        """Whether the filler beside the plan's tool calls is not sent: it repeats one sent
        earlier in the conversation, or every called tool usually answers fast. Streamed text
        already reached the user and is never held."""
        if not plan.text or not plan.has_tool_calls or response.streamed \
                or self._text_kind(plan) != "filler_message":
            return False
        if said_before(run, plan.text):
            log.bind().info("agent.filler.repeated", agent=self.name)
            return True
        limit = self.configuration.filler_fast_tool_ms
        if limit is not None and self._latency.usually_faster(
                [call.name for call in plan.calls], limit):
            log.bind().info("agent.filler.fast_tools", agent=self.name)
            return True
        return False

    def _runs_tools(self, plan: Plan) -> bool:
        """Whether the plan's calls are executed (False skips straight to the decision)."""
        return True

    async def _on_max_steps(self, run: AgentRun) -> Outcome:
        """One last model call with tools disabled produces a real reply."""
        log.warning("agent.run.max_steps", agent=self.name,
                    max_agent_steps=self.configuration.max_agent_steps)
        run.note(LAST_STEP)
        messages = await self._messages(run)
        response = await generate(self.llm, run, messages, [])
        await _trace.model_call(run, self.name, messages, [], response)
        text = cap_text((response.text or "").strip(), self.max_response_chars)
        if text and not response.streamed:
            await deliver(run, text)
        if text:
            self._record_text(run, text, response, self._max_steps_message_type())
        return self._max_steps_outcome(run)

    async def _on_budget(self, run: AgentRun, hit: CapHit) -> Outcome:
        """A cap is reached: record it, then close with one last model call without tools, or
        with a fixed sentence when the cap leaves no model call."""
        log.warning("agent.run.budget_exceeded", agent=self.name, cap=hit.cap, limit=hit.limit,
                    used=hit.used)
        run.events.append(ev.agent_event(BUDGET_EVENT, self.name, None, cap=hit.cap,
                                         limit=hit.limit, used=hit.used))
        response: LLMResponse | None = None
        text = ""
        if hit.closing_call:
            run.note(budget_note(hit))
            response = await generate(self.llm, run, await self._messages(run), [])
            text = cap_text((response.text or "").strip(), self.MAX_RESPONSE_CHARS)
        if not text:
            response, text = None, BUDGET_SENTENCE
        if response is None or not response.streamed:
            await deliver(run, text)
        self._record_text(run, text, response, self._max_steps_message_type())
        outcome = self._max_steps_outcome(run)
        if outcome.exit_reason == ExitReason.MAX_STEPS:
            outcome = dataclasses.replace(outcome, exit_reason=ExitReason.BUDGET)
        return outcome

    def _max_steps_message_type(self) -> str:
        return "final_response"

    def _max_steps_outcome(self, run: AgentRun) -> Outcome:
        return Outcome(AgentStatus.COMPLETED, ExitReason.MAX_STEPS)

    # ------------------------------------------------------------------ tools of a run
    async def _mcp_tools(self) -> list[Tool]:
        return await self.mcp_toolset.tools() if self.mcp_toolset is not None else []

    def _prepare(self, run: AgentRun, mcp_tools: list[Tool]) -> None:
        """Compose the run's toolset: plain tools, then one wrapper per feature."""
        settings = self.configuration.tools
        hook = self.build_custom_tool_call_metadata \
            if self._hook_replaced("build_custom_tool_call_metadata") else None
        custom = [custom_tool(c, settings.get(c.tool_name), hook, self.name)
                  for c in self._custom_tools]
        plain = FunctionToolset([*mcp_tools, *self._builtin_tools(run), *custom],
                                max_result_chars=self.max_tool_result_chars)
        # a wrapper that could change nothing in this run is left out (one call layer less)
        toolset: Toolset = plain
        if any(tool.source.startswith("mcp:") for tool in mcp_tools):
            toolset = ElicitationToolset(toolset, self.configuration.elicitation_timeout)
        run.approvals = ApprovalToolset(toolset, settings)
        if any(s.requires_approval for s in settings.values()):
            toolset = run.approvals
        if self.configuration.client_tools:
            toolset = ClientToolset(toolset, self.configuration.client_tools)
        if self.configuration.tool_result_budget:
            toolset = ResultBudgetToolset(toolset, self.configuration.tool_result_budget)
        if any(s.inputs_from_state or s.outputs_to_state for s in settings.values()):
            toolset = StateMappingToolset(toolset, settings)
        run.toolset = toolset
        run.handled = self._handled_builtins()
        run.tool_output_hook = self._hook_replaced("process_tool_output")
        run.tools = {}
        for tool in toolset.tools():
            run.tools.setdefault(tool.name, tool)

    def _builtin_tools(self, run: AgentRun) -> list[Tool]:
        return []

    def _handled_builtins(self) -> set[str]:
        """Built-in tool names the agent handles itself instead of executing."""
        return set()

    # ------------------------------------------------------------------ model call + delivery
    async def _conversation(self, run: AgentRun) -> list[ChatMessage]:
        """System prompt and history. The prompt renders on the event loop for at most a
        millisecond, then finishes in a worker thread (a thread hop costs more than a typical
        render); an overridden builder, or a long history, is built in the thread whole.

        Within a run the rendered prompt is reused while its context is unchanged (a slot set
        during the run renders it again), and the history while no event was added; an
        overridden ``_build_context_for_prompt`` renders on every step."""
        cls = type(self)
        if (cls.build_messages_for_llm_request is not MCPBaseAgent.build_messages_for_llm_request
                or cls.render_prompt_template is not MCPBaseAgent.render_prompt_template
                or len(run.input.events) > _INLINE_HISTORY_EVENTS):
            return await anyio.to_thread.run_sync(self.build_messages_for_llm_request,
                                                  run.input)
        return [{"role": "system", "content": await self._system_prompt(run)},
                *self._history(run)]

    async def _system_prompt(self, run: AgentRun) -> str:
        values = self._build_context_for_prompt(run.input)
        cached = run.prompt_cache
        if cached is not None and cached[0] == values:
            return cached[1]
        system = await capped_render_async(self._template, values, self.max_prompt_chars)
        if _prompt_context_from_input(type(self)) \
                and "_build_context_for_prompt" not in vars(self):
            run.prompt_cache = (values, system)
        return system

    def _history(self, run: AgentRun) -> list[ChatMessage]:
        events, metadata = run.input.events, run.input.metadata
        key = (id(events), len(events), id(events[-1]) if events else None,
               run.input.user_message, metadata.get("restarted"))
        cached = run.history_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        messages = history_messages(run.input, self.name, 10)
        run.history_cache = (key, messages)
        return messages

    async def _messages(self, run: AgentRun) -> list[ChatMessage]:
        return [*await self._conversation(run), *run.tool_messages]

    def _offered(self, run: AgentRun) -> list[JsonObject]:
        tools = tuple(run.tools.values())
        cached = run.offered_cache
        if cached is None or cached[0] != tools:
            cached = run.offered_cache = (tools, [tool.schema.to_openai() for tool in tools])
        return list(cached[1])

    def _record_text(self, run: AgentRun, text: str, response: LLMResponse | None,
                     message_type: str) -> TrackerEvent:
        event = self.create_bot_uttered(
            text, run.input, message_type,
            response.time_to_first_token_ms if response else None,
            response.total_time_ms if response else None,
            streamed=bool(response and response.streamed))
        run.events.append(event)
        return event

    # ------------------------------------------------------------------ planning
    def _plan(self, run: AgentRun, response: LLMResponse) -> Plan:
        """Resolve each call against the offered tools; nothing runs yet."""
        handled = run.handled
        offered = set(run.tools) | handled
        taken: set[str] = set()
        plan = Plan(response=response,
                    text=cap_text((response.text or "").strip(), self.max_response_chars), calls=[],
                    unavailable=[], builtin=[], malformed=[], has_text=bool(response.text))
        for call in response.tool_calls:
            if call.arguments is None:
                plan.malformed.append(call)
                continue
            name, available = repair_name(call.name, offered, taken)
            taken.add(name)
            planned = PlannedCall(call.id, name, call.arguments, run.tools.get(name))
            if not available:
                plan.unavailable.append(planned)
            elif name in handled:
                plan.builtin.append(planned)
            else:
                plan.calls.append(planned)
        return plan

    # ------------------------------------------------------------------ tool execution
    def _call_context(self, run: AgentRun) -> CallContext:
        # the tool context holds a copy of the input metadata; while that copy still equals the
        # metadata (neither side changed) it serves the next step too
        shared = run.tool_context
        if shared is None or shared.metadata != run.input.metadata:
            shared = run.tool_context = AgentToolContext(metadata=dict(run.input.metadata))
        return CallContext(run.input, shared, timeout=self.configuration.tool_timeout,
                           on_progress=run.progress, scope=run.scope)

    async def _execute(self, run: AgentRun, plan: Plan) -> Executed:
        """Run the plan's calls through the toolset, answer every call, record events."""
        assert run.toolset is not None
        run.tool_messages.append(assistant_message(plan))
        outcomes = await execute_calls(
            run.toolset, plan.calls, self._call_context(run),
            max_parallel=self.configuration.max_parallel_tools) if plan.calls else []
        executed = Executed(outcomes)
        if _trace.tracing(run):
            await _trace.tool_calls(run, self.name, outcomes)
        ran = executed.ran
        await self._answer(run, plan, ran)
        if self.configuration.tool_result_images and not executed.deferred():
            # after every answer of the step (a deferred call is answered later: no images then)
            shown = images_message(ran)
            if shown is not None:
                run.tool_messages.append(shown)
        if not run.tool_output_hook:
            return executed  # the default hook adds nothing
        current = {o.call.id: o.result for o in ran
                   if not o.result.is_error and o.call.tool and o.call.tool.source != "builtin"}
        if current:
            await self._apply_hook_events(run, current)
        return executed

    async def _answer(self, run: AgentRun, plan: Plan, ran: list[ToolOutcome]) -> None:
        """Record the calls that ran and answer every call of the plan, in call order."""
        answers: dict[str, str] = {}
        for outcome in ran:
            if outcome.call.tool is not None and outcome.call.tool.source != "builtin":
                self._latency.observe(outcome.call.name, outcome.duration_ms)
            answers[outcome.call.id], event = record_tool(
                run, outcome, agent_id=self.agent_id, agent_name=self.name)
            if event is not None:
                await send_event(run, event)
        for call in plan.unavailable:
            answers[call.id] = unavailable_text(call.name, list(run.tools))
        for call in plan.builtin:
            answers[call.id] = self._builtin_answer(run, call)
        for raw in plan.response.tool_calls:
            if raw.id in answers:
                run.tool_messages.append(tool_message(raw.id, answers.pop(raw.id)))

    def _hook_replaced(self, name: str) -> bool:
        """Whether hook ``name`` is overridden by the class or replaced on the instance (the
        default hooks do nothing, so they need not be called)."""
        return getattr(getattr(self, name), "__func__", None) is not getattr(MCPBaseAgent, name)

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
                apply_slot(run, event["name"], event.get("value"))
                run.slot_set_by_hook.add(event["name"])

    # ------------------------------------------------------------------ shared decision rules
    def _tool_failure(self, executed: Executed, *, builtins: bool = True) -> Finish | None:
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
        if self.configuration.raise_on_tool_invocation_failure:
            for outcome in ran:
                if outcome.result.is_error:
                    return Finish(Outcome.fatal(f"tool {outcome.call.name!r} failed: "
                                                f"{outcome.result.error_message}"))
        return None

    def _after_unavailable(self, run: AgentRun, plan: Plan) -> StepResult:
        """Go on, unless the model keeps calling tools that are not offered."""
        if not plan.unavailable:
            return Continue()
        run.unavailable_rounds += 1
        if run.unavailable_rounds > self.MAX_UNAVAILABLE_TOOL_CALL_RETRIES:
            name = plan.unavailable[-1].name
            return Finish(Outcome.fatal(f"the model kept calling tools that are not available "
                                        f"(last: {name!r})"))
        return Continue()

    # ------------------------------------------------------------------ parking
    async def _park(self, run: AgentRun, executed: Executed) -> Park:
        """Deferred calls park the run (client tools first, then approvals)."""

        async def ask(question: str) -> None:
            await deliver(run, question)
            self._record_text(run, question, None, "input_required")

        return await park(run, executed, agent_name=self.name, ask=ask)

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

    def _final_events(self, run: AgentRun, outcome: Outcome) -> list[TrackerEvent]:
        return list(run.events)
