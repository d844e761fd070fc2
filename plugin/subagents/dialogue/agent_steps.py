"""Agent call steps: a flow's ``call:`` step that runs a sub agent.

What the agent's status means for the flow:

* ``input_required``: the agent asked the user something. An agent frame stays on the stack and
  every next message goes to the agent until it finishes.
* ``completed``: the agent frame leaves the stack, the agent's closing message (if any) is sent and
  the flow continues with its next step in the same turn.
* ``recoverable_error``: the agent is invoked again, three attempts in all, with a short pause
  between them; after the last one it counts as a fatal error.
* ``fatal_error`` (or an exception): the agent and its flow are cancelled (``flow_cancelled``
  only, never a later ``flow_completed``) and ``pattern_internal_error`` runs.
* ``cancelled``: the agent and its flow are cancelled silently.

An agent interrupted by another flow is re-invoked, when the user goes back to it, with an
instruction to ask its pending question again; the messages of the digression are cut from the
history it sees. When a completed agent is restarted, only the first invocation of the new run
clears the slots its exit conditions read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from subagents import events as ev
from subagents.agents.input_copy import copy_input
from subagents.agents.protocol import SubAgent
from subagents.agents.registry import protocol_type_for
from subagents.agents.schemas import AgentInput, AgentInputSlot, AgentOutput, AgentStatus
from subagents.conditions import referenced_slots
from subagents.config.flows import Flow, Step
from subagents.config.project import Project
from subagents.config.validation import unfillable_exit_slots
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import Patterns
from subagents.dialogue.responses import Responder
from subagents.dialogue.results import Advance
from subagents.dialogue.stack import AgentFrame, FlowFrame
from subagents.dialogue.turn import Turn
from subagents.dialogue.understanding import transcript
from subagents.retry import RetryPolicy, retry_call
from subagents.types import FrameState

log = structlog.get_logger("subagents.dialogue")

MAX_AGENT_ATTEMPTS = 3
EXCLUDED_SLOTS = {"requested_slot", "session_started_metadata", "flow_hashes", "mocked_datetime",
                  "dialogue_stack", "silence_timeout", "consecutive_silence_timeouts"}
"""Internal slots never shown to an agent."""
RESUME_INSTRUCTION = (
    "(The conversation moved to another topic while you were waiting for the user's answer. "
    "Messages after your question were handled elsewhere; do not answer them. {ask} "
    "Then wait for the user's reply.)")
AgentKey = tuple[str, str]
"""(agent name, protocol): ``mcp_task`` for a call step with ``exit_if``, else ``mcp_open``."""


def agent_protocol(step: Step, project: Project | None = None) -> str:
    """``mcp_task`` for a call step with exit conditions, ``a2a`` for an A2A agent without them
    (when ``project`` is given), ``mcp_open`` otherwise."""
    name = str(step.model.call)
    if project is not None and name in project.agents:
        return protocol_type_for(project.agents[name], has_exit_if=bool(step.model.exit_if))
    return "mcp_task" if step.model.exit_if else "mcp_open"


def _up_to_own_message(events: list[dict[str, Any]], agent: str) -> list[dict[str, Any]] | None:
    """``events`` up to the agent's own latest message (None when they hold none)."""
    for index in range(len(events) - 1, -1, -1):
        meta = events[index].get("metadata") or {}
        if events[index].get("event") == "bot" and meta.get("agent_name") == agent:
            return events[:index + 1]
    return None


class AgentSteps:
    """Runs sub agents for call steps and maps their results onto the stack.

    Args:
        project: The loaded project.
        agents: The agent instances by (name, protocol).
        responder: Sends the agents' closing messages.
        navigator: Moves the calling flow on.
        patterns: Pushes the internal-error pattern.
        assistant_id: Sent to agents as ``agent_id`` metadata.
        model_id: Sent to agents as ``model_id`` metadata.
        retry_delays: Pauses (seconds) between attempts after a recoverable error.
    """

    def __init__(self, project: Project, agents: dict[AgentKey, SubAgent], *,
                 responder: Responder, navigator: Navigator, patterns: Patterns,
                 assistant_id: str, model_id: str,
                 retry_delays: tuple[float, ...] = (1.0, 2.0)) -> None:
        self.project = project
        self.flows = project.flows
        self.agents = agents
        self.responder = responder
        self.navigator = navigator
        self.patterns = patterns
        self.assistant_id = assistant_id
        self.model_id = model_id
        self.retry_delays = retry_delays
        self.unavailable: Callable[[str], str | None] = lambda name: None
        """Why an agent cannot run now (its remote dependency did not answer), or None."""

    async def on_top(self, turn: Turn, frame: AgentFrame) -> Advance:
        """An agent frame is on top of the stack: resume, re-ask, wait or drop it."""
        if frame.state == FrameState.INTERRUPTED:
            self.patterns.ask_to_continue(turn)
            return Advance.CHANGED
        if frame.state == FrameState.WAITING and turn.agent_ran:
            return Advance.WAIT
        host = turn.stack.frame_of_flow(frame.flow_id)
        flow = self.flows.get(frame.flow_id)
        step = flow.step(frame.step_id) if flow else None
        if host is None or flow is None or step is None:
            turn.stack.remove(frame)
            return Advance.CHANGED
        return await self.run(turn, host, flow, step, frame)

    async def run(self, turn: Turn, host: FlowFrame, flow: Flow, step: Step,
                  frame: AgentFrame | None) -> Advance:
        """Invoke the agent of ``step`` (first call, next message, or resumption)."""
        name = str(step.model.call)
        protocol = agent_protocol(step, self.project)
        agent = self.agents[(name, protocol)]
        frame = frame or next((f for f in turn.stack.agent_frames(flow.id)
                               if f.agent_id == name), None)
        turn.stamp = {"step_id": step.id, "active_flow": flow.id}
        turn.agent_ran = True
        if frame is not None and frame.state == FrameState.RESUMING:
            turn.add(ev.agent_event("agent_resumed", name, flow.id))
            agent_input = await self._resume_input(turn, agent, step, frame)
        else:
            agent_input = self._start_input(turn, agent, flow, step, frame, protocol)
        why = self.unavailable(name)
        output = AgentOutput(id=name, status=AgentStatus.FATAL_ERROR, error_message=why) \
            if why else await self._call_with_retries(agent, agent_input, turn)
        for event in output.events:
            if ev.is_event(event):
                turn.add(dict(event))
        log.info("dialogue.agent.finished", agent=name, flow=flow.id,
                 status=output.status.value, exit_reason=output.exit_reason)
        try:
            return await self._dispatch(turn, host, flow, step, frame, output)
        finally:
            turn.stamp = {}

    # ------------------------------------------------------------------ agent input
    def _start_input(self, turn: Turn, agent: SubAgent, flow: Flow, step: Step,
                     frame: AgentFrame | None, protocol: str) -> AgentInput:
        name = agent.name
        restarted = bool(frame and frame.is_restart and not frame.metadata.get("_restart_done"))
        if frame is None:
            restarted = turn.snapshot.completed_in_flow(name, flow.id)
        exit_if = list(step.model.exit_if or [])
        exit_slots = referenced_slots(step.exit_if)
        if exit_if and restarted:
            for slot in exit_slots:
                if turn.slots.get(slot) is not None:
                    turn.add(ev.slot_set(slot, None))
        if frame is not None and frame.is_restart:
            frame.metadata["_restart_done"] = True
        turn.add(ev.agent_event("agent_started", name, flow.id,
                                metadata=self._started_metadata(name, protocol, exit_if)))
        metadata = {k: v for k, v in (frame.metadata if frame else {}).items()
                    if not k.startswith("_")}
        metadata.update(self._base_metadata(turn))
        if exit_if:
            metadata["exit_if"] = exit_if
        if restarted:
            metadata["restarted"] = True
        return self._build_input(turn, name, turn.user_text, exit_slots, metadata, turn.events,
                                 step)

    def _started_metadata(self, name: str, protocol: str, exit_if: list[str]) -> dict[str, Any]:
        spec = self.project.agents[name].config
        refs = spec.connections.mcp_servers or []
        started: dict[str, Any] = {
            "protocol": protocol, "description": spec.agent.description,
            "mcp_tools": [t for r in refs for t in (r.include_tools or [])],
            "excluded_mcp_tools": [t for r in refs for t in (r.exclude_tools or [])]}
        if exit_if:
            started["exit_conditions"] = exit_if
        return started

    async def _resume_input(self, turn: Turn, agent: SubAgent, step: Step,
                            frame: AgentFrame) -> AgentInput:
        """The resumed agent is told its pending question; the digression is cut away."""
        last_request = str(frame.metadata.get("agent_response") or "")
        ask = (f'Ask again: "{last_request}"' if last_request else
               "Ask again for what you still need.")
        events = _up_to_own_message(turn.events, agent.name)
        if events is None and turn.start > 0:  # a digression longer than the window
            events = _up_to_own_message(await turn.all_events(), agent.name)
        events = list(turn.events) if events is None else events
        metadata = {k: v for k, v in frame.metadata.items() if not k.startswith("_")}
        metadata.update(self._base_metadata(turn))
        metadata.update({"resumed_after_interruption": True, "agent_response": last_request})
        if step.model.exit_if:
            metadata["exit_if"] = list(step.model.exit_if)
        return self._build_input(turn, agent.name, RESUME_INSTRUCTION.format(ask=ask),
                                 referenced_slots(step.exit_if), metadata, events, step)

    def _base_metadata(self, turn: Turn) -> dict[str, Any]:
        meta = {"sender_id": turn.sender_id, "agent_id": self.assistant_id,
                "model_id": self.model_id, "context_id": turn.sender_id}
        for key, value in turn.metadata.items():
            if not key.startswith("_"):
                meta.setdefault(key, value)
        mocked = turn.slots.get("mocked_datetime")
        if mocked:
            meta["mocked_datetime"] = mocked
        return meta

    def _build_input(self, turn: Turn, name: str, user_message: str, exit_slots: list[str],
                     metadata: dict[str, Any], events: list[dict[str, Any]],
                     step: Step) -> AgentInput:
        slots = []
        for slot_name, definition in self.project.domain.slots.items():
            if slot_name in EXCLUDED_SLOTS:
                continue
            value = turn.slots.get(slot_name)
            if value is None and slot_name not in exit_slots:
                continue
            slots.append(AgentInputSlot(name=slot_name, value=value, type=definition.type,
                                        allowed_values=definition.values,
                                        mappings=definition.mappings or [],
                                        description=definition.description,
                                        verify=definition.verify))
        agent_input = AgentInput(id=name, user_message=user_message, slots=slots,
                                 conversation_history=transcript(events, 20), metadata=metadata,
                                 recipient_id=turn.sender_id)
        # not validated (a copy of the conversation's latest events): each attempt gets its
        # own deep copy of them as typed events (_call_with_retries), and until then nothing
        # changes them
        agent_input.events = events  # type: ignore[assignment]
        agent_input.earlier = turn.earlier()
        if step.exit_if:  # parsed when the project loaded: the agent does not parse them again
            agent_input.attach_exit_conditions(list(step.exit_if))
        return agent_input

    async def _call_with_retries(self, agent: SubAgent, agent_input: AgentInput,
                                 turn: Turn) -> AgentOutput:
        """Run the agent; a recoverable error is tried again (``MAX_AGENT_ATTEMPTS`` in all,
        pausing ``retry_delays``, never past the turn's deadline), a crash is fatal."""

        async def attempt() -> AgentOutput:
            output = await agent.run(copy_input(agent_input), turn.channel, scope=turn.scope)
            if output.status == AgentStatus.RECOVERABLE_ERROR:
                raise _RecoverableError(output)
            return output

        delays = self.retry_delays
        policy = RetryPolicy(attempts=MAX_AGENT_ATTEMPTS,
                             retry_on=lambda error: isinstance(error, _RecoverableError),
                             delay=lambda n, _error: delays[min(n - 1, len(delays) - 1)],
                             deadline=turn.scope.deadline)
        try:
            return await retry_call(attempt, policy)
        except _RecoverableError as exc:
            return AgentOutput(id=agent.name, status=AgentStatus.FATAL_ERROR,
                               error_message=f"agent {agent.name!r} failed with a recoverable "
                               f"error {MAX_AGENT_ATTEMPTS} times: "
                               f"{exc.output.error_message or ''}".strip())
        except Exception as exc:
            log.exception("dialogue.agent.crashed", agent=agent.name)
            return AgentOutput(id=agent.name, status=AgentStatus.FATAL_ERROR,
                               error_message=f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ agent output
    async def _dispatch(self, turn: Turn, host: FlowFrame, flow: Flow, step: Step,
                        frame: AgentFrame | None, output: AgentOutput) -> Advance:
        status = output.status
        if status == AgentStatus.INPUT_REQUIRED:
            self._keep_waiting(turn, flow, step, frame, output)
            turn.add(ev.action_executed("action_agent_request_user_input"))
            return Advance.WAIT
        if frame is not None:
            turn.stack.remove(frame)
        if status == AgentStatus.COMPLETED:
            await self._completed(turn, host, flow, step, output)
            return Advance.CHANGED
        return self._ended(turn, host, flow, step, output)

    async def _completed(self, turn: Turn, host: FlowFrame, flow: Flow, step: Step,
                         output: AgentOutput) -> None:
        name, protocol = str(step.model.call), agent_protocol(step, self.project)
        metadata = {"protocol": protocol}
        if output.exit_reason:
            metadata["exit_reason"] = output.exit_reason
        turn.add(ev.agent_event("agent_completed", name, flow.id, status="completed",
                                metadata=metadata))
        if output.response_message:
            turn.add(ev.action_executed("action_send_text"))
            await self.responder.say(turn, output.response_message, {
                "utter_source": type(self.agents[(name, protocol)]).__name__,
                "agent_name": name, "agent_message_type": "final_response"})
        turn.stamp = {}
        await self.navigator.move_next(turn, host, flow, step)

    def _ended(self, turn: Turn, host: FlowFrame, flow: Flow, step: Step,
               output: AgentOutput) -> Advance:
        """Any status but input_required and completed: cancel the agent and its flow."""
        name, status = str(step.model.call), output.status
        reason = output.error_message or f"agent {name!r} ended with status {status.value}"
        for agent_frame in turn.stack.agent_frames(flow.id):
            turn.add(ev.agent_event("agent_cancelled", agent_frame.agent_id, flow.id,
                                    reason=reason))
        turn.add(ev.agent_event("agent_cancelled", name, flow.id,
                                reason=None if status == AgentStatus.CANCELLED else reason))
        turn.add(ev.flow_event("flow_cancelled", flow.id, step.id))
        turn.stack.remove_flow(host)
        turn.stamp = {}
        if status == AgentStatus.CANCELLED:
            return Advance.WAIT
        log.warning("dialogue.agent.failed", agent=name, flow=flow.id, error=reason)
        self._explain_unfillable(name, flow, step)
        self.patterns.internal_error(turn, error_source="agent", agent_name=name,
                                     flow_id=flow.id, step_id=step.id,
                                     agent_type=agent_protocol(step, self.project),
                                     error_message=reason)
        return Advance.CHANGED

    def _explain_unfillable(self, name: str, flow: Flow, step: Step) -> None:
        """When the failed agent's ``exit_if`` reads slots it can never fill, log that cause
        (``validate`` warns about it as ``flow.exit_if.slot_not_fillable``)."""
        if not step.model.exit_if or name not in self.project.agents:
            return
        slots = unfillable_exit_slots(step.exit_if, self.project.domain,
                                      self.project.agents[name].config)
        if slots:
            log.warning("dialogue.agent.exit_slot_not_fillable", agent=name, flow=flow.id,
                        slots=slots, fix="add a from_llm mapping to each of these slots: the "
                        "agent gets a set_slot tool only for slots the model may fill")

    @staticmethod
    def _keep_waiting(turn: Turn, flow: Flow, step: Step, frame: AgentFrame | None,
                      output: AgentOutput) -> None:
        name = str(step.model.call)
        pending = next((e.get("text") for e in reversed(output.events)
                        if e.get("event") == "bot"), None) or ""
        metadata = {**(output.metadata or {}), "agent_name": name, "active_flow": flow.id,
                    "step_id": step.id, "agent_response": pending,
                    "structured_results": output.structured_results}
        if frame is None:
            frame = AgentFrame(flow.id, step.id, name)
            turn.stack.push(frame)
        else:
            if frame.is_restart:
                metadata["_restart_done"] = True
            frame.state = FrameState.WAITING
        frame.metadata = metadata


class _RecoverableError(Exception):
    """An agent run ended with a recoverable error (worth another attempt)."""

    def __init__(self, output: AgentOutput) -> None:
        super().__init__(output.error_message or "recoverable error")
        self.output = output
