"""The ReAct loop and its step, shared by the MCP agents.

:meth:`Engine.run` makes a :class:`~subagents.agents.run.Run` and a policy for it (the agent
class says which: :class:`~subagents.agents.policies.OpenPolicy` or
:class:`~subagents.agents.policies.TaskPolicy`), then steps until a step finishes or parks the
run. One step (:meth:`Engine.step`) is, in order: generate (call the model; text reaches the
output channel at once, streamed when the channel streams) -> plan (parse the response) ->
deliver text -> execute tools (through the run's toolset) -> decide (the policy).

Tool features (approvals, client-executed tools, state mapping, the result budget) are toolset
wrappers in :mod:`subagents.tools`; a deferred call (client tool, approval) parks the run. Tool
failures come back to the model as error results unless ``raise_on_tool_invocation_failure`` is
set.

Choices where Rasa Pro behaves accidentally, pinned by tests:

* text sent alongside tool calls is always recorded (also with fillers disabled), because the
  user saw it;
* an empty model answer (no text, no tools) gets a nudge to answer instead of a silent wait;
  a model that keeps sending nothing usable (empty replies, malformed arguments) ends the run
  with a fixed reply instead of using up every step;
* every executed tool call gets an ``mcp_tool_executed`` event, in order, also in the response
  that calls ``task_completed``;
* without an output channel the agent still runs; texts are only recorded.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, assert_never

import anyio
import structlog
from pydantic import ValidationError

from subagents.agents import elicitation, parking, trace
from subagents.agents._images import images_message
from subagents.agents._limits import cap_text
from subagents.agents.budgets import (
    BUDGET_EVENT,
    BUDGET_SENTENCE,
    BudgetGuard,
    CapHit,
    budget_note,
    caps_set,
)
from subagents.agents.fillers import LatencyBook, progress_sink
from subagents.agents.hooks import AgentHooks, is_ours
from subagents.agents.plan import (
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
from subagents.agents.policies import Policy
from subagents.agents.run import Run
from subagents.exceptions import LLMError
from subagents.llm import LLMResponse
from subagents.mcp.callbacks import ElicitationRegistry
from subagents.mcp.oauth.consent import ConsentRegistry
from subagents.tools import approvals
from subagents.tools.approvals import ApprovalToolset
from subagents.tools.base import PlannedCall, Tool, ToolOutcome, Toolset
from subagents.tools.client_tools import ClientToolset
from subagents.tools.concurrency import execute_calls
from subagents.tools.elicitation import ElicitationToolset
from subagents.tools.executor import FunctionToolset
from subagents.tools.python import custom_tool
from subagents.tools.result_budget import ResultBudgetToolset
from subagents.tools.state_mapping import StateMappingToolset
from subagents.types import (
    AgentEvent,
    AgentInput,
    AgentOutput,
    AgentStatus,
    AgentToolResult,
    CallScope,
    ExitReason,
    OutputChannel,
)

if TYPE_CHECKING:
    from subagents.tools.mcp_tools import MCPToolset

log = structlog.get_logger("subagents.agent")

NUDGE_EMPTY = ("Your last reply was empty. Answer the user now: ask for what you still need, "
               "or give your result.")
RETRY_MALFORMED_JSON = ("The arguments of your last tool call were not valid JSON, so nothing "
                        "was run. Repeat the call with strictly valid JSON arguments.")
LAST_STEP = ("You have used all the steps you may take for this request. Do not call tools. "
             "Reply to the user now with what you have found so far, in a few sentences.")
NO_ANSWER = ("Sorry, I could not put together an answer to that just now. Could you say it "
             "again, perhaps in other words?")
"""What the user reads when the model sends nothing usable (see :data:`MAX_UNUSABLE_REPLIES`)."""
REPLACEABLE = ("process_tool_output", "build_messages_for_llm_request", "render_prompt_template",
               "_build_context_for_prompt")
"""Hooks whose replacement changes how the loop works (see :attr:`Run.hooks_replaced`)."""
MAX_UNUSABLE_REPLIES = 3
"""Replies in a row without anything usable (empty, or only malformed tool arguments) after
which the run stops with :data:`NO_ANSWER` instead of asking the model again."""


class Engine:
    """Runs an agent's ReAct loop; one engine per agent, one :class:`Run` per invocation.

    Args:
        agent: The agent whose hooks the loop calls.
        policy: The policy class of the agent's kind.
        mcp_toolset: The agent's MCP tools (None without MCP servers).
        elicitations: The process's open MCP requests for input (the MCP pool's).
        consents: The sign-in links waiting for a user's browser (the MCP pool's).
    """

    def __init__(self, agent: AgentHooks, policy: type[Policy], *,
                 mcp_toolset: MCPToolset | None = None,
                 elicitations: ElicitationRegistry | None = None,
                 consents: ConsentRegistry | None = None) -> None:
        self.agent = agent
        self.policy = policy
        self.mcp_toolset = mcp_toolset
        self.elicitations = elicitations if elicitations is not None else ElicitationRegistry()
        """Where MCP calls that wait for a user's answer are held (the MCP pool's)."""
        self.consents = consents if consents is not None else ConsentRegistry()
        """Where sign-in links wait for the user's browser (the MCP pool's)."""
        self.latency = LatencyBook()

    # ------------------------------------------------------------------ a run
    async def run(self, agent_input: AgentInput, channel: OutputChannel | None) -> AgentOutput:
        """The loop under the whole-run deadline (``configuration.timeout``)."""
        agent = self.agent
        run = self.new_run(agent_input, channel)
        policy = self.policy(agent, run)
        timeout = agent.configuration.timeout
        outcome: Outcome | None = None
        if timeout:
            with anyio.move_on_after(timeout):
                outcome = await self._guarded(run, policy)
        else:  # no deadline: no cancel scope to enter and leave
            outcome = await self._guarded(run, policy)
        if outcome is None:
            outcome = Outcome.fatal(f"agent {agent.name!r} did not finish within {timeout:g}s "
                                    "(configuration.timeout)", reason=ExitReason.TIMEOUT)
        elicitation.settle(run, outcome)
        output = self.output(run, outcome, policy)
        await trace.run_finished(run, agent.name, output)
        run.release()
        # log.bind().info: the lazy proxy's own path, without its failed attribute lookup
        log.bind().info("agent.run.finished", agent=agent.name, status=output.status.value,
                        exit_reason=output.exit_reason, steps=output.steps,
                        tool_calls=output.tool_calls, prompt_tokens=run.usage.prompt_tokens,
                        completion_tokens=run.usage.completion_tokens)
        return output

    def new_run(self, agent_input: AgentInput, channel: OutputChannel | None) -> Run:
        """A fresh run of ``agent_input``."""
        return Run(agent_input, channel, scope=agent_input.call_scope or CallScope(),
                   utter=self.agent.create_bot_uttered, elicitations=self.elicitations,
                   consents=self.consents)

    async def _guarded(self, run: Run, policy: Policy) -> Outcome:
        """The loop; a failure ends the run with a fatal outcome instead of raising."""
        try:
            return await self.loop(run, policy)
        except LLMError as exc:
            return Outcome.fatal(f"the model call failed: {exc}")
        except Exception as exc:
            log.exception("agent.run.failed", agent=self.agent.name)
            return Outcome.fatal(f"{type(exc).__name__}: {exc}")

    async def loop(self, run: Run, policy: Policy) -> Outcome:
        """Resume parked calls, then step until a step finishes or parks the run."""
        agent = self.agent
        conf = agent.configuration
        self.prepare(run, policy,
                     await self.mcp_toolset.tools() if self.mcp_toolset is not None else [])
        await trace.run_started(run, agent.name)
        run.progress = progress_sink(run.channel, run.recipient_id, conf, agent.name)
        ended = await self.resume(run)
        if ended is not None:
            return ended
        if caps_set(conf.budgets):
            run.budget = BudgetGuard(conf.budgets, agent.llm.settings.model, run.input)
        for _ in range(conf.max_agent_steps):
            if run.budget is not None and (hit := run.budget.before_model(run)):
                return await self._on_budget(run, policy, hit)
            recorded = len(run.events)
            result = await self.step(run, policy)
            if run.tracing:
                await trace.texts(run, agent.name, run.events[recorded:])
            match result:
                case Continue(note=note):
                    if note:
                        run.note(note)
                case Finish(outcome=outcome) | Park(outcome=outcome):
                    return outcome
                case _:
                    assert_never(result)
        recorded = len(run.events)
        outcome = await self._on_max_steps(run, policy)
        await trace.texts(run, agent.name, run.events[recorded:])
        return outcome

    async def resume(self, run: Run) -> Outcome | None:
        """Take up what an earlier invocation parked: client tool results, a server's request
        for input, approved calls; the outcome when the run ends here. Each part runs only
        when the input carries its saved state (a call context is built only then)."""
        agent = self.agent
        resumed = await parking.resume_client_tools(run, agent_id=agent.agent_id)
        if isinstance(resumed, Park):
            return resumed.outcome
        metadata = run.input.metadata
        timeout = agent.configuration.tool_timeout
        if metadata.get(elicitation.PENDING_KEY):
            lost = await elicitation.resume(run, run.call_context(timeout),
                                            agent_id=agent.agent_id, agent_name=agent.name)
            if lost is not None:
                return lost
        if metadata.get(approvals.PENDING_KEY):
            recorded = len(run.events)
            await parking.resume_approval(run, run.call_context(timeout),
                                          agent_id=agent.agent_id, agent_name=agent.name,
                                          max_parallel=agent.configuration.max_parallel_tools)
            await trace.resumed_calls(run, agent.name, run.events[recorded:])
        return None

    # ------------------------------------------------------------------ one step
    async def step(self, run: Run, policy: Policy) -> StepResult:
        """One ReAct step: generate -> plan -> deliver text -> execute tools -> decide."""
        # 1. generate: the model sees the conversation, this run's exchange and the tools
        messages, offered = await policy.messages(), policy.offered()
        response = await run.generate(self.agent.llm, messages, offered)
        if run.tracing:
            await trace.model_call(run, self.agent.name, messages, offered, response)
        # 2. plan: resolve the calls against the offered tools before anything runs
        plan = self.plan(run, response)
        if plan.malformed:
            return await self._unusable(run, policy, RETRY_MALFORMED_JSON)
        # 3. deliver text: the user sees it now (streamed text already arrived)
        held = self._hold_filler(run, policy, plan, response)
        if plan.text and not response.streamed and not held:
            await run.deliver(plan.text)
        if not plan.has_tool_calls:
            if not plan.text and not run.completion_pending:
                return await self._unusable(run, policy, NUDGE_EMPTY)
            return policy.decide_on_text(plan)
        run.malformed_rounds = 0
        if plan.text and not held:
            run.record_text(plan.text, response, policy.text_kind(plan))
        if plan.calls and run.budget is not None \
                and (hit := run.budget.before_tools(run, len(plan.calls))):
            return Finish(await self._on_budget(run, policy, hit))
        # 4. execute tools: through the toolset (deferred calls are not run)
        executed = await self.execute(run, policy, plan) if policy.runs_tools(plan) \
            else Executed()
        # 5. decide: the policy's rule - finish, park, or go on
        return await policy.decide_on_tools(plan, executed)

    async def _unusable(self, run: Run, policy: Policy, note: str) -> StepResult:
        """A reply with nothing usable: ask again with ``note``, unless the model has sent
        nothing usable :data:`MAX_UNUSABLE_REPLIES` times in a row; then the user gets
        :data:`NO_ANSWER` and the agent waits for their next message."""
        run.malformed_rounds += 1
        if run.malformed_rounds < MAX_UNUSABLE_REPLIES:
            return Continue(note=note)
        log.warning("agent.run.no_usable_reply", agent=self.agent.name,
                    replies=run.malformed_rounds)
        await run.deliver(NO_ANSWER)
        run.record_text(NO_ANSWER, None, "input_required")
        return Finish(Outcome(AgentStatus.INPUT_REQUIRED, ExitReason.NO_ANSWER))

    def plan(self, run: Run, response: LLMResponse) -> Plan:
        """Resolve each call against the offered tools; nothing runs yet."""
        handled = run.handled
        offered = set(run.tools) | handled
        taken: set[str] = set()
        plan = Plan(response=response,
                    text=cap_text((response.text or "").strip(), self.agent.max_response_chars),
                    calls=[], unavailable=[], builtin=[], malformed=[],
                    has_text=bool(response.text))
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

    def _hold_filler(self, run: Run, policy: Policy, plan: Plan, response: LLMResponse) -> bool:
        """Whether the filler beside the plan's tool calls is not sent: it repeats one sent
        earlier in the conversation, or every called tool usually answers fast. Streamed text
        already reached the user and is never held."""
        if not plan.text or not plan.has_tool_calls or response.streamed \
                or policy.text_kind(plan) != "filler_message":
            return False
        if run.said_before(plan.text):
            log.bind().info("agent.filler.repeated", agent=self.agent.name)
            return True
        limit = self.agent.configuration.filler_fast_tool_ms
        if limit is not None and self.latency.usually_faster(
                [call.name for call in plan.calls], limit):
            log.bind().info("agent.filler.fast_tools", agent=self.agent.name)
            return True
        return False

    # ------------------------------------------------------------------ tools
    def prepare(self, run: Run, policy: Policy, mcp_tools: list[Tool]) -> None:
        """Compose the run's toolset: plain tools, then one wrapper per feature."""
        agent = self.agent
        conf = agent.configuration
        settings = conf.tools
        hook = agent.build_custom_tool_call_metadata \
            if not is_ours(agent.build_custom_tool_call_metadata) else None
        custom = [custom_tool(c, settings.get(c.tool_name), hook, agent.name)
                  for c in agent._custom_tools]
        plain = FunctionToolset([*mcp_tools, *policy.builtin_tools(), *custom],
                                max_result_chars=agent.max_tool_result_chars)
        # a wrapper that could change nothing in this run is left out (one call layer less)
        toolset: Toolset = plain
        if any(tool.source.startswith("mcp:") for tool in mcp_tools):
            toolset = ElicitationToolset(toolset, conf.elicitation_timeout,
                                         registry=self.elicitations)
        run.approvals = ApprovalToolset(toolset, settings)
        if any(s.requires_approval for s in settings.values()):
            toolset = run.approvals
        if conf.client_tools:
            toolset = ClientToolset(toolset, conf.client_tools)
        if conf.tool_result_budget:
            toolset = ResultBudgetToolset(toolset, conf.tool_result_budget)
        if any(s.inputs_from_state or s.outputs_to_state for s in settings.values()):
            toolset = StateMappingToolset(toolset, settings)
        run.toolset = toolset
        run.handled = policy.handled()
        run.hooks_replaced = frozenset(name for name in REPLACEABLE
                                       if not is_ours(getattr(agent, name)))
        run.tools = {}
        for tool in toolset.tools():
            run.tools.setdefault(tool.name, tool)

    async def execute(self, run: Run, policy: Policy, plan: Plan) -> Executed:
        """Run the plan's calls through the toolset, answer every call, record events."""
        assert run.toolset is not None
        agent = self.agent
        run.tool_messages.append(assistant_message(plan))
        outcomes = await execute_calls(
            run.toolset, plan.calls, run.call_context(agent.configuration.tool_timeout),
            max_parallel=agent.configuration.max_parallel_tools) if plan.calls else []
        executed = Executed(outcomes)
        if run.tracing:
            await trace.tool_calls(run, agent.name, outcomes)
        ran = executed.ran
        await self._answer(run, policy, plan, ran)
        if agent.configuration.tool_result_images and not executed.deferred():
            # after every answer of the step (a deferred call is answered later: no images then)
            shown = images_message(ran)
            if shown is not None:
                run.tool_messages.append(shown)
        if "process_tool_output" not in run.hooks_replaced:
            return executed  # the default hook adds nothing
        current = {o.call.id: o.result for o in ran
                   if not o.result.is_error and o.call.tool and o.call.tool.source != "builtin"}
        if current:
            await self._hook_events(run, current)
        return executed

    async def _answer(self, run: Run, policy: Policy, plan: Plan,
                      ran: list[ToolOutcome]) -> None:
        """Record the calls that ran and answer every call of the plan, in call order."""
        agent = self.agent
        answers: dict[str, str] = {}
        for outcome in ran:
            if outcome.call.tool is not None and outcome.call.tool.source != "builtin":
                self.latency.observe(outcome.call.name, outcome.duration_ms)
            answers[outcome.call.id], event = run.record_tool(
                outcome, agent_id=agent.agent_id, agent_name=agent.name)
            if event is not None:
                await run.send_event(event)
        for call in plan.unavailable:
            answers[call.id] = unavailable_text(call.name, list(run.tools))
        for call in plan.builtin:
            answers[call.id] = policy.builtin_answer(call)
        for raw in plan.response.tool_calls:
            if raw.id in answers:
                run.tool_messages.append(tool_message(raw.id, answers.pop(raw.id)))

    async def _hook_events(self, run: Run, current: dict[str, AgentToolResult]) -> None:
        try:
            produced = await self.agent.process_tool_output(current, dict(run.results),
                                                            run.channel)
        except Exception as exc:
            raise RuntimeError(f"process_tool_output failed: {exc}") from exc
        run.add_hook_events(list(produced or []), self.agent.name)

    # ------------------------------------------------------------------ how a run closes
    async def _on_max_steps(self, run: Run, policy: Policy) -> Outcome:
        """One last model call with tools disabled produces a real reply (a fixed one when
        the model sends nothing)."""
        agent = self.agent
        log.warning("agent.run.max_steps", agent=agent.name,
                    max_agent_steps=agent.configuration.max_agent_steps)
        run.note(LAST_STEP)
        messages = await policy.messages()
        response: LLMResponse | None = await run.generate(agent.llm, messages, [])
        assert response is not None
        await trace.model_call(run, agent.name, messages, [], response)
        await self._close_with(run, policy, response, NO_ANSWER)
        return policy.max_steps_outcome()

    async def _close_with(self, run: Run, policy: Policy, response: LLMResponse | None,
                          fallback: str) -> None:
        """Send and record a run's closing text: the last reply's text, capped, or
        ``fallback`` when there is none (a reply that already streamed is not sent again)."""
        text = cap_text((response.text or "").strip(), self.agent.max_response_chars) \
            if response is not None else ""
        if not text:
            response, text = None, fallback
        if response is None or not response.streamed:
            await run.deliver(text)
        run.record_text(text, response, policy.max_steps_message_type)

    async def _on_budget(self, run: Run, policy: Policy, hit: CapHit) -> Outcome:
        """A cap is reached: record it, then close with one last model call without tools, or
        with a fixed sentence when the cap leaves no model call."""
        agent = self.agent
        log.warning("agent.run.budget_exceeded", agent=agent.name, cap=hit.cap, limit=hit.limit,
                    used=hit.used)
        run.events.append(AgentEvent(BUDGET_EVENT, agent.name, None, extra={
            "cap": hit.cap, "limit": hit.limit, "used": hit.used}))
        response: LLMResponse | None = None
        if hit.closing_call:
            run.note(budget_note(hit))
            response = await run.generate(agent.llm, await policy.messages(), [])
        await self._close_with(run, policy, response, BUDGET_SENTENCE)
        outcome = policy.max_steps_outcome()
        if outcome.exit_reason == ExitReason.MAX_STEPS:
            outcome = dataclasses.replace(outcome, exit_reason=ExitReason.BUDGET)
        return outcome

    # ------------------------------------------------------------------ the output
    def failed(self, agent_input: AgentInput, channel: OutputChannel | None,
               message: str) -> AgentOutput:
        """The output of a run that failed before its loop (a failing ``process_input``)."""
        run = self.new_run(agent_input, channel)
        return self.output(run, Outcome.fatal(message), Policy(self.agent, run))

    def output(self, run: Run, outcome: Outcome, policy: Policy) -> AgentOutput:
        """The run's :class:`AgentOutput`."""
        previous = run.input.metadata.get("structured_results") or []
        fields: dict[str, Any] = {
            "id": self.agent.name, "status": outcome.status,
            "response_message": outcome.response_message,
            "events": policy.final_events(outcome),
            "structured_results": [*previous, list(run.structured)],
            "error_message": outcome.error_message,
            "exit_reason": None if outcome.exit_reason is None else str(outcome.exit_reason),
            "steps": run.steps, "tool_calls": dict(run.tool_counts),
            "metadata": dict(run.output_metadata) or None,
            "usage": {"prompt_tokens": run.usage.prompt_tokens,
                      "completion_tokens": run.usage.completion_tokens,
                      "total_tokens": run.usage.total_tokens}}
        # validated, pydantic's core builds it in a third of the time of model_construct (in
        # Python); the events are typed already and kept as they are. Earlier results from
        # the input of another shape are taken as they are, as before.
        try:
            return AgentOutput(**fields)
        except ValidationError:
            return AgentOutput.model_construct(**fields)

