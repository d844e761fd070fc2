"""The flow executor: advances the dialogue stack until the assistant must wait for the user.

Agent call steps follow the reference's status table (reference §2.2): ``input_required`` keeps
an agent frame waiting (every next message goes to the agent), ``completed`` pops it and the
flow continues in the same turn, ``fatal_error`` cancels the flow and runs
``pattern_internal_error``, ``recoverable_error`` re-runs the agent (3 attempts in all).

Deliberate differences from the reference (DECISIONS.md and reference §10): the resumed agent is
told its pending question (D7); a fatal error emits ``flow_cancelled`` only (no later
``flow_completed`` for the same flow); on a restarted run only the first invocation resets the
exit slots; the declined resumption runs ``pattern_cancel_flow`` so the user hears that the
interrupted task was dropped.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import structlog

from .. import events as ev
from ..agents.base import MCPBaseAgent
from ..agents.registry import protocol_type_for
from ..agents.schemas import AgentInput, AgentInputSlot, AgentOutput, AgentStatus
from ..agents.task_agent import coerce_slot_value
from ..conditions import ConditionSyntaxError, parse_condition, referenced_slots
from ..config.flows import END, Flow, Step
from ..config.project import Project
from ..mcp.pool import MCPPool
from .actions import ActionFailedError, ActionRunner
from .commands import (
    CancelFlow,
    CannotHandle,
    ChitChat,
    Command,
    ContinueAgent,
    RestartAgent,
    SetSlot,
    StartFlow,
)
from .mcp_tool_steps import McpToolSteps, is_mcp_tool_step
from .stack import (
    AGENT_INTERRUPTED,
    AGENT_RESUMING,
    AGENT_WAITING,
    START,
    AgentFrame,
    FlowFrame,
)
from .turn import Turn
from .understanding import completed_agents, transcript

log = structlog.get_logger("subagents.dialogue")

NEXT, WAIT, CHANGED = "next", "wait", "changed"
MAX_AGENT_ATTEMPTS = 3
EXCLUDED_SLOTS = {"requested_slot", "session_started_metadata", "flow_hashes", "mocked_datetime",
                  "dialogue_stack", "silence_timeout", "consecutive_silence_timeouts"}
RESUME_INSTRUCTION = (
    "(The conversation moved to another topic while you were waiting for the user's answer. "
    "Messages after your question were handled elsewhere; do not answer them. {ask} "
    "Then wait for the user's reply.)")
CONTINUE_PATTERN = "pattern_continue_interrupted"
AgentKey = tuple[str, str]


class FlowExecutor:
    def __init__(self, project: Project, agents: dict[AgentKey, MCPBaseAgent],
                 actions: ActionRunner, *, assistant_id: str, model_id: str,
                 retry_delays: tuple[float, ...] = (1.0, 2.0),
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 mcp_pool: MCPPool | None = None) -> None:
        self.project = project
        self.mcp_steps = McpToolSteps(project.endpoints, mcp_pool) if mcp_pool else None
        self.flows = project.flows
        self.agents = agents
        self.actions = actions
        self.assistant_id = assistant_id
        self.model_id = model_id
        self.retry_delays = retry_delays
        self.sleep = sleep

    # ================================================================== commands
    def clean_commands(self, turn: Turn, commands: list[Command]) -> list[Command]:
        active = turn.stack.active_agent()
        done = set(completed_agents(turn.events))
        cleaned: list[Command] = []
        for command in commands:
            if isinstance(command, StartFlow) and (command.flow not in self.flows
                                                   or not self.guard_allows(turn, command.flow)):
                continue
            if isinstance(command, ContinueAgent) and active is None:
                continue
            if isinstance(command, RestartAgent) and (command.agent not in self.project.agents
                                                      or command.agent not in done):
                continue
            if command not in cleaned:
                cleaned.append(command)
        if active is not None and all(isinstance(c, CannotHandle) for c in cleaned):
            cleaned = [ContinueAgent()]
        return cleaned

    def guard_allows(self, turn: Turn, flow_id: str) -> bool:
        """A flow's ``if:`` guard (``if: False`` makes it startable only by links/calls)."""
        guard = self.flows[flow_id].model.if_
        if guard is None:
            return True
        if str(guard).strip().lower() == "false":
            return False
        try:
            condition = parse_condition(str(guard))
        except ConditionSyntaxError:
            return False
        return condition.evaluate({"slots": dict(turn.slots)})

    def apply_commands(self, turn: Turn, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, SetSlot):
                self.set_slot(turn, command.name, command.value)
            elif isinstance(command, StartFlow):
                self.start_flow(turn, command.flow)
            elif isinstance(command, CancelFlow):
                self.cancel_flow_command(turn)
            elif isinstance(command, RestartAgent):
                self.restart_agent(turn, command.agent)
            elif isinstance(command, ChitChat):
                self.interrupt_active(turn)
                self.push_pattern(turn, "pattern_chitchat")
            elif isinstance(command, CannotHandle):
                self.push_pattern(turn, "pattern_cannot_handle")

    def set_slot(self, turn: Turn, name: str, value: Any) -> None:
        definition = self.project.domain.slots.get(name)
        if definition is None:
            log.info("dialogue.slot.unknown", slot=name)
            return
        try:
            coerced = coerce_command_value(definition.type, definition.values, value)
        except ValueError:
            log.info("dialogue.slot.invalid_value", slot=name, value=str(value)[:80])
            return
        if turn.slots.get(name) != coerced:
            turn.add(ev.slot_set(name, coerced))

    def start_flow(self, turn: Turn, flow_id: str) -> None:
        stack = turn.stack
        top_flow = stack.top_flow()
        if top_flow is not None and top_flow.flow_id == CONTINUE_PATTERN:
            interrupted = top_flow.info.get("interrupted_flow")
            if interrupted == flow_id:
                self.set_slot(turn, "continue_interrupted_flow_confirmation", True)
                return
        host = stack.top_user_flow()
        if host is not None and host.flow_id == flow_id:
            return
        if host is not None:
            self.interrupt(turn, host)
        stack.push(FlowFrame(flow_id, frame_type="interrupt" if host else "regular"))

    def interrupt(self, turn: Turn, host: FlowFrame) -> None:
        if host.interrupted:
            return
        host.interrupted = True
        turn.add(ev.flow_event("flow_interrupted", host.flow_id, host.step_id))
        for frame in turn.stack.agent_frames(host.flow_id):
            if frame.state in (AGENT_WAITING, AGENT_RESUMING):
                frame.state = AGENT_INTERRUPTED
                turn.add(ev.agent_event("agent_interrupted", frame.agent_id, frame.flow_id))

    def interrupt_active(self, turn: Turn) -> None:
        """Chit-chat while an agent waits interrupts the agent (and its flow)."""
        if turn.stack.active_agent() is not None:
            host = turn.stack.top_user_flow()
            if host is not None:
                self.interrupt(turn, host)

    def cancel_flow_command(self, turn: Turn) -> None:
        target = turn.stack.top_user_flow()
        if target is None:
            return
        self.push_pattern(turn, "pattern_cancel_flow", {"cancelled_flow": target.flow_id,
                                                        "frame_id": target.frame_id})

    def restart_agent(self, turn: Turn, agent: str) -> None:
        started = [e for e in turn.events if e.get("event") == "agent_started"
                   and e.get("agent_id") == agent]
        flow_id = started[-1].get("flow_id") if started else None
        flow = self.flows.get(str(flow_id)) if flow_id else None
        steps = flow.call_steps_for(agent) if flow else []
        if flow is None or not steps:
            return
        host = turn.stack.top_user_flow()
        if host is not None and host.flow_id != flow.id:
            self.interrupt(turn, host)
        frame = turn.stack.frame_of_flow(flow.id)
        if frame is None:
            frame = FlowFrame(flow.id, step_id=steps[0].id)
            turn.stack.push(frame)
        else:
            frame.step_id, frame.interrupted = steps[0].id, False
            turn.stack.frames = [f for f in turn.stack.frames
                                 if not (isinstance(f, AgentFrame) and f.agent_id == agent)]
            turn.stack.remove(frame)
            turn.stack.push(frame)
        turn.stack.push(AgentFrame(flow.id, steps[0].id, agent, is_restart=True,
                                   frame_id=f"restart_agent_{agent}"))

    def push_pattern(self, turn: Turn, flow_id: str, info: dict[str, Any] | None = None) -> None:
        if flow_id not in self.flows:
            return
        turn.stack.push(FlowFrame(flow_id, info=dict(info or {})))

    # ================================================================== the loop
    async def advance(self, turn: Turn) -> None:
        """Run steps until the assistant waits for the user."""
        for _ in range(500):
            top = turn.stack.top()
            if top is None:
                if turn.flow_completed and not turn.metadata.get("_completed_pattern"):
                    turn.metadata["_completed_pattern"] = True
                    self.push_pattern(turn, "pattern_completed")
                    continue
                return
            if isinstance(top, AgentFrame):
                result = await self.agent_frame_on_top(turn, top)
            else:
                result = await self.run_step(turn, top)
            await turn.flush_channel_events()
            if result == WAIT:
                return
        log.error("dialogue.loop.limit", sender=turn.sender_id)

    async def agent_frame_on_top(self, turn: Turn, frame: AgentFrame) -> str:
        if frame.state == AGENT_INTERRUPTED:
            self.ask_to_continue(turn)
            return CHANGED
        if frame.state not in (AGENT_WAITING, AGENT_RESUMING):
            turn.stack.remove(frame)
            return CHANGED
        if frame.state == AGENT_WAITING and turn.agent_ran:
            return WAIT
        host = turn.stack.frame_of_flow(frame.flow_id)
        flow = self.flows.get(frame.flow_id)
        step = flow.step(frame.step_id) if flow else None
        if host is None or flow is None or step is None:
            turn.stack.remove(frame)
            return CHANGED
        return await self.run_agent(turn, host, flow, step, frame)

    async def run_step(self, turn: Turn, frame: FlowFrame) -> str:
        flow = self.flows.get(frame.flow_id)
        if flow is None:
            turn.stack.remove(frame)
            return CHANGED
        if frame.interrupted:
            self.ask_to_continue(turn)
            return CHANGED
        if frame.step_id == START:
            turn.add(ev.flow_event("flow_started", flow.id, None))
            frame.step_id = flow.first_step.id
        step = flow.step(frame.step_id)
        if step is None:
            await self.complete_flow(turn, frame)
            return CHANGED
        turn.stamp = {"step_id": step.id, "active_flow": flow.id}
        try:
            result = await self.execute(turn, frame, flow, step)
        finally:
            turn.stamp = {}
        if result == NEXT:
            await self.move_next(turn, frame, flow, step)
        return result

    async def execute(self, turn: Turn, frame: FlowFrame, flow: Flow, step: Step) -> str:
        kind = step.kind
        if kind == "collect":
            return await self.collect(turn, frame, step)
        if kind == "action":
            return await self.run_action(turn, frame, str(step.model.action))
        if kind == "set_slots":
            for item in step.model.set_slots or []:
                for name, value in item.items():
                    if turn.slots.get(name) != value:
                        turn.add(ev.slot_set(name, value))
            return NEXT
        if kind == "link":
            await self.complete_flow(turn, frame, link=str(step.model.link))
            return CHANGED
        if kind == "call":
            target = str(step.model.call)
            if self.mcp_steps is not None and is_mcp_tool_step(step, self.project.endpoints):
                error = await self.mcp_steps.run(turn, flow.id, step)
                await self.move_next(turn, frame, flow, step)
                if error is not None:  # the flow goes on after the step once the pattern ran
                    self.push_pattern(turn, "pattern_internal_error", error)
                return CHANGED
            if target in self.project.agents:
                return await self.run_agent(turn, frame, flow, step, None)
            turn.stack.push(FlowFrame(target, frame_type="call"))
            return CHANGED
        return NEXT  # noop

    async def move_next(self, turn: Turn, frame: FlowFrame, flow: Flow, step: Step) -> None:
        context = {"slots": dict(turn.slots), "context": {"flow_id": flow.id}}
        target = next((t for cond, t in step.next if cond is None or cond.evaluate(context)), END)
        if target == END:
            await self.complete_flow(turn, frame)
        else:
            frame.step_id = target

    async def complete_flow(self, turn: Turn, frame: FlowFrame, link: str | None = None) -> None:
        flow = self.flows.get(frame.flow_id)
        turn.add(ev.flow_event("flow_completed", frame.flow_id, frame.step_id))
        if flow is not None:
            for step in flow.steps:
                name = step.model.collect
                if step.kind == "collect" and step.model.reset_after_flow_ends and name and \
                        name not in (flow.model.persisted_slots or []) and \
                        turn.slots.get(name) is not None:
                    turn.add(ev.slot_set(name, None))
        turn.stack.frames = [f for f in turn.stack.frames if f is not frame and not (
            isinstance(f, AgentFrame) and f.flow_id == frame.flow_id)]
        if link is not None:
            turn.stack.push(FlowFrame(link, frame_type=frame.frame_type))
            return
        if not frame.is_pattern:
            turn.flow_completed = turn.flow_completed or (flow is None or
                                                          flow.run_pattern_completed)
        caller = turn.stack.top()
        if frame.frame_type == "call" and isinstance(caller, FlowFrame):
            caller_flow = self.flows.get(caller.flow_id)
            caller_step = caller_flow.step(caller.step_id) if caller_flow else None
            if caller_flow is not None and caller_step is not None:
                await self.move_next(turn, caller, caller_flow, caller_step)

    def ask_to_continue(self, turn: Turn) -> None:
        """An interrupted flow is on top again: ask whether to go back to it."""
        host = turn.stack.top_user_flow()
        if host is None or CONTINUE_PATTERN not in self.flows:
            return
        if turn.slots.get("continue_interrupted_flow_confirmation") is not None:
            turn.add(ev.slot_set("continue_interrupted_flow_confirmation", None))
        self.push_pattern(turn, CONTINUE_PATTERN, {"interrupted_flow": host.flow_id})

    # ================================================================== collect + actions
    async def collect(self, turn: Turn, frame: FlowFrame, step: Step) -> str:
        slot = str(step.model.collect)
        value = turn.slots.get(slot)
        if value is not None and (frame.awaiting == slot or not step.model.ask_before_filling):
            if not await self.rejected(turn, step, slot):
                frame.awaiting = None
                return NEXT
        elif value is not None:  # ask_before_filling: ask even though a value is there
            turn.add(ev.slot_set(slot, None))
        frame.awaiting = slot
        name = step.model.utter or f"utter_ask_{slot}"
        if name in self.project.domain.responses:
            await self.utter(turn, name)
        else:
            definition = self.project.domain.slots.get(slot)
            text = (definition.prompt or definition.description) if definition else None
            await self.say(turn, text or f"Please tell me your {slot.replace('_', ' ')}.",
                           {"utter_action": name})
        turn.add(ev.action_executed(name))
        return WAIT

    async def rejected(self, turn: Turn, step: Step, slot: str) -> bool:
        """Collect ``rejections``: the first matching condition utters and resets the slot."""
        for rejection in step.model.rejections or []:
            try:
                condition = parse_condition(str(rejection.get("if", "")))
            except ConditionSyntaxError:
                continue
            if condition.evaluate({"slots": dict(turn.slots)}):
                if rejection.get("utter"):
                    await self.utter(turn, str(rejection["utter"]))
                turn.add(ev.slot_set(slot, None))
                return True
        return False

    async def run_action(self, turn: Turn, frame: FlowFrame, name: str) -> str:
        builtin = getattr(self, "_" + name, None)
        if name.startswith("action_") and callable(builtin):
            turn.add(ev.action_executed(name))
            return str(await builtin(turn, frame))
        if name in self.project.domain.responses:
            await self.utter(turn, name)
            turn.add(ev.action_executed(name))
            return NEXT
        turn.add(ev.action_executed(name))
        try:
            messages, events = await self.actions.run(name, turn, self.project)
        except ActionFailedError as exc:
            log.warning("dialogue.action.failed", action=name, error=str(exc))
            host = frame if not frame.is_pattern else turn.stack.top_user_flow()
            if host is not None:
                self.cancel_flow(turn, host, reason=str(exc))
            self.push_pattern(turn, "pattern_internal_error", {
                "error_source": "action", "action_name": name, "error_message": str(exc)})
            return CHANGED
        for event in events:
            turn.add(event)
        for message in messages:
            await self.send_custom_message(turn, message)
        return NEXT

    async def _action_cancel_flow(self, turn: Turn, frame: FlowFrame) -> str:
        target_id = frame.info.get("frame_id")
        target = next((f for f in turn.stack.flow_frames() if f.frame_id == target_id), None)
        if target is not None:
            self.cancel_flow(turn, target, reason=None)
        return NEXT

    async def _action_continue_interrupted_flow(self, turn: Turn, frame: FlowFrame) -> str:
        host = turn.stack.frame_of_flow(str(frame.info.get("interrupted_flow")))
        if host is not None:
            host.interrupted = False
            turn.add(ev.flow_event("flow_resumed", host.flow_id, host.step_id))
            agents = [f for f in turn.stack.agent_frames(host.flow_id)
                      if f.state == AGENT_INTERRUPTED]
            if agents:
                agents[-1].state = AGENT_RESUMING
        return NEXT

    async def _action_cancel_interrupted_flow(self, turn: Turn, frame: FlowFrame) -> str:
        host = turn.stack.frame_of_flow(str(frame.info.get("interrupted_flow")))
        if host is not None:
            await self.move_next(turn, frame, self.flows[frame.flow_id],
                                 self.flows[frame.flow_id].step(frame.step_id))  # type: ignore[arg-type]
            self.push_pattern(turn, "pattern_cancel_flow", {"cancelled_flow": host.flow_id,
                                                            "frame_id": host.frame_id})
            return CHANGED
        return NEXT

    async def _action_send_text(self, turn: Turn, frame: FlowFrame) -> str:
        return NEXT

    def cancel_flow(self, turn: Turn, target: FlowFrame, reason: str | None) -> None:
        for agent in turn.stack.agent_frames(target.flow_id):
            turn.add(ev.agent_event("agent_cancelled", agent.agent_id, target.flow_id,
                                    reason=reason))
        turn.add(ev.flow_event("flow_cancelled", target.flow_id, target.step_id))
        turn.stack.frames = [f for f in turn.stack.frames if f is not target and not (
            isinstance(f, AgentFrame) and f.flow_id == target.flow_id)]

    async def utter(self, turn: Turn, name: str) -> None:
        variation = self.pick_variation(turn, name)
        if variation is None:
            return
        text = render_template(variation.text or "", turn.slots)
        data: dict[str, Any] = {}
        if variation.buttons:
            data["buttons"] = [{**b, "title": render_template(str(b.get("title", "")),
                                                                turn.slots)}
                               for b in variation.buttons]
        if variation.custom:
            data["custom"] = variation.custom
        await self.say(turn, text, {"utter_action": name, **(variation.metadata or {})}, data)

    def pick_variation(self, turn: Turn, name: str) -> Any:
        for variation in self.project.domain.responses.get(name, []):
            conditions = variation.condition or []
            if all(turn.slots.get(str(c.get("name"))) == c.get("value") for c in conditions
                   if isinstance(c, dict)):
                return variation
        return None

    async def say(self, turn: Turn, text: str, metadata: dict[str, Any],
                  data: dict[str, Any] | None = None) -> None:
        data = data or {}
        turn.add(ev.bot_uttered(text, data=data, metadata=dict(metadata)))
        if turn.channel is None:
            return
        if data.get("buttons"):
            await turn.channel.send_text_with_buttons(turn.sender_id, text, data["buttons"])
        elif text:
            await turn.channel.send_text_message(turn.sender_id, text,
                                                 **({"custom": data["custom"]}
                                                    if data.get("custom") else {}))

    async def send_custom_message(self, turn: Turn, message: dict[str, Any]) -> None:
        response = message.get("response") or message.get("template")
        if response:
            await self.utter(turn, str(response))
            return
        data = {k: message[k] for k in ("buttons", "custom", "image", "attachment")
                if message.get(k)}
        await self.say(turn, str(message.get("text") or ""), {}, data)

    # ================================================================== agents
    async def run_agent(self, turn: Turn, host: FlowFrame, flow: Flow, step: Step,
                        frame: AgentFrame | None) -> str:
        name = str(step.model.call)
        protocol = protocol_type_for(self.project.agents[name],
                                     has_exit_if=bool(step.model.exit_if))
        agent = self.agents[(name, protocol)]
        frame = frame or next((f for f in turn.stack.agent_frames(flow.id)
                               if f.agent_id == name), None)
        turn.stamp = {"step_id": step.id, "active_flow": flow.id}
        turn.agent_ran = True
        if frame is not None and frame.state == AGENT_RESUMING:
            turn.add(ev.agent_event("agent_resumed", name, flow.id))
            agent_input = self.resume_input(turn, agent, step, frame)
        else:
            agent_input = self.start_input(turn, agent, flow, step, frame, protocol)
        output = await self.call_with_retries(agent, agent_input, turn)
        for event in output.events:
            if ev.is_event(event):
                turn.add(dict(event))
        return await self.dispatch(turn, host, flow, step, frame, output, protocol)

    def start_input(self, turn: Turn, agent: MCPBaseAgent, flow: Flow, step: Step,
                    frame: AgentFrame | None, protocol: str) -> AgentInput:
        name = agent.name
        restarted = bool(frame and frame.is_restart and not frame.metadata.get("_restart_done"))
        if frame is None:
            restarted = any(e.get("event") == "agent_completed" and e.get("agent_id") == name
                            and e.get("flow_id") == flow.id for e in turn.events)
        exit_if = list(step.model.exit_if or [])
        exit_slots = referenced_slots(step.exit_if)
        if exit_if and restarted:
            for slot in exit_slots:
                if turn.slots.get(slot) is not None:
                    turn.add(ev.slot_set(slot, None))
        if frame is not None and frame.is_restart:
            frame.metadata["_restart_done"] = True
        spec = self.project.agents[name].config
        refs = spec.connections.mcp_servers or []
        started_meta: dict[str, Any] = {
            "protocol": protocol, "description": spec.agent.description,
            "mcp_tools": [t for r in refs for t in (r.include_tools or [])],
            "excluded_mcp_tools": [t for r in refs for t in (r.exclude_tools or [])]}
        if exit_if:
            started_meta["exit_conditions"] = exit_if
        turn.add(ev.agent_event("agent_started", name, flow.id, metadata=started_meta))
        metadata = {k: v for k, v in (frame.metadata if frame else {}).items()
                    if not k.startswith("_")}
        metadata.update(self.base_metadata(turn))
        if exit_if:
            metadata["exit_if"] = exit_if
        if restarted:
            metadata["restarted"] = True
        return self.build_input(turn, name, turn.user_text, exit_slots, metadata, turn.events)

    def resume_input(self, turn: Turn, agent: MCPBaseAgent, step: Step,
                     frame: AgentFrame) -> AgentInput:
        """D7: the resumed agent gets its pending question; the digression is cut away."""
        last_request = str(frame.metadata.get("agent_response") or "")
        ask = (f'Ask again: "{last_request}"' if last_request else
               "Ask again for what you still need.")
        events = list(turn.events)
        for index in range(len(events) - 1, -1, -1):
            meta = events[index].get("metadata") or {}
            if events[index].get("event") == "bot" and meta.get("agent_name") == agent.name:
                events = events[:index + 1]
                break
        metadata = {k: v for k, v in frame.metadata.items() if not k.startswith("_")}
        metadata.update(self.base_metadata(turn))
        metadata.update({"resumed_after_interruption": True, "agent_response": last_request})
        if step.model.exit_if:
            metadata["exit_if"] = list(step.model.exit_if)
        return self.build_input(turn, agent.name, RESUME_INSTRUCTION.format(ask=ask),
                                referenced_slots(step.exit_if), metadata, events)

    def base_metadata(self, turn: Turn) -> dict[str, Any]:
        meta = {"sender_id": turn.sender_id, "agent_id": self.assistant_id,
                "model_id": self.model_id, "context_id": turn.sender_id}
        for key, value in turn.metadata.items():
            if not key.startswith("_"):
                meta.setdefault(key, value)
        mocked = turn.slots.get("mocked_datetime")
        if mocked:
            meta["mocked_datetime"] = mocked
        return meta

    def build_input(self, turn: Turn, name: str, user_message: str, exit_slots: list[str],
                    metadata: dict[str, Any], events: list[dict[str, Any]]) -> AgentInput:
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
        return AgentInput(id=name, user_message=user_message, slots=slots,
                          conversation_history=transcript(events, 20),
                          events=[dict(e) for e in events], metadata=metadata,
                          recipient_id=turn.sender_id)

    async def call_with_retries(self, agent: MCPBaseAgent, agent_input: AgentInput,
                                turn: Turn) -> AgentOutput:
        output: AgentOutput | None = None
        for attempt in range(MAX_AGENT_ATTEMPTS):
            try:
                output = await agent.run(agent_input.model_copy(deep=True), turn.channel)
            except Exception as exc:
                log.exception("dialogue.agent.crashed", agent=agent.name)
                return AgentOutput(id=agent.name, status=AgentStatus.FATAL_ERROR,
                                   error_message=f"{type(exc).__name__}: {exc}")
            if output.status != AgentStatus.RECOVERABLE_ERROR:
                return output
            if attempt < MAX_AGENT_ATTEMPTS - 1:
                delay = self.retry_delays[min(attempt, len(self.retry_delays) - 1)]
                await self.sleep(delay)
        return AgentOutput(id=agent.name, status=AgentStatus.FATAL_ERROR,
                           error_message=f"agent {agent.name!r} failed with a recoverable error "
                           f"{MAX_AGENT_ATTEMPTS} times: "
                           f"{output.error_message if output else ''}".strip())

    async def dispatch(self, turn: Turn, host: FlowFrame, flow: Flow, step: Step,
                       frame: AgentFrame | None, output: AgentOutput, protocol: str) -> str:
        name = str(step.model.call)
        status = output.status
        log.info("dialogue.agent.finished", agent=name, flow=flow.id, status=status.value,
                 exit_reason=output.exit_reason)
        if status == AgentStatus.INPUT_REQUIRED:
            self.keep_waiting(turn, flow, step, frame, output, name)
            turn.add(ev.action_executed("action_agent_request_user_input"))
            turn.stamp = {}
            return WAIT
        if frame is not None:
            turn.stack.remove(frame)
        if status == AgentStatus.COMPLETED:
            turn.add(ev.agent_event("agent_completed", name, flow.id, status="completed",
                                    metadata={"protocol": protocol}))
            if output.response_message:
                turn.add(ev.action_executed("action_send_text"))
                await self.say(turn, output.response_message, {
                    "utter_source": type(self.agents[(name, protocol)]).__name__,
                    "agent_name": name, "agent_message_type": "final_response"})
            turn.stamp = {}
            await self.move_next(turn, host, flow, step)
            return CHANGED
        reason = output.error_message or f"agent {name!r} ended with status {status.value}"
        for agent_frame in turn.stack.agent_frames(flow.id):
            turn.add(ev.agent_event("agent_cancelled", agent_frame.agent_id, flow.id,
                                    reason=reason))
        turn.add(ev.agent_event("agent_cancelled", name, flow.id,
                                reason=None if status == AgentStatus.CANCELLED else reason))
        turn.add(ev.flow_event("flow_cancelled", flow.id, step.id))
        turn.stack.frames = [f for f in turn.stack.frames if f is not host and not (
            isinstance(f, AgentFrame) and f.flow_id == flow.id)]
        turn.stamp = {}
        if status != AgentStatus.CANCELLED:
            log.warning("dialogue.agent.failed", agent=name, flow=flow.id, error=reason)
            self.push_pattern(turn, "pattern_internal_error", {
                "error_source": "agent", "agent_name": name, "flow_id": flow.id,
                "step_id": step.id, "agent_type": protocol, "error_message": reason})
            return CHANGED
        return WAIT

    def keep_waiting(self, turn: Turn, flow: Flow, step: Step, frame: AgentFrame | None,
                     output: AgentOutput, name: str) -> None:
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
            frame.state = AGENT_WAITING
        frame.metadata = metadata


def coerce_command_value(kind: str, values: list[Any] | None, value: Any) -> Any:
    """A value set by a command: bool, float and categorical slots are coerced the way the
    task agent's ``set_slot`` tools coerce them (ValueError if it does not fit); values of
    other slot types (and categorical slots without values) are kept as given."""
    categorical = kind in ("categorical", "strict_categorical") and bool(values)
    if kind not in ("bool", "float") and not categorical:
        return value
    return coerce_slot_value(AgentInputSlot(name="value", type=kind, allowed_values=values),
                             value)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def render_template(text: str, slots: dict[str, Any]) -> str:
    return _PLACEHOLDER.sub(lambda m: str(slots[m.group(1)]) if m.group(1) in slots and
                            slots[m.group(1)] is not None else m.group(0), text)

