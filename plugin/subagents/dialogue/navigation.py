"""Moving through flows on the stack: next steps, completing, cancelling and interrupting."""

from __future__ import annotations

from subagents import events as ev
from subagents.config.flows import END, Flow, Step
from subagents.config.project import Project
from subagents.dialogue.patterns import SEARCH
from subagents.dialogue.stack import FlowFrame, FrameType
from subagents.dialogue.turn import Turn
from subagents.types import FrameState


class Navigator:
    """Stack transitions shared by steps, agent calls, built-in actions and commands.

    Args:
        project: The loaded project (its flows).
    """

    def __init__(self, project: Project) -> None:
        self.flows = project.flows

    async def move_next(self, turn: Turn, frame: FlowFrame, flow: Flow, step: Step) -> None:
        """Follow ``step``'s ``next`` rules: go to the first matching target or end the flow."""
        context = {"slots": dict(turn.slots), "context": frame.context()}
        target = next((t for cond, t in step.next if cond is None or cond.evaluate(context)), END)
        if target == END:
            await self.complete_flow(turn, frame)
        else:
            frame.step_id = target

    async def complete_flow(self, turn: Turn, frame: FlowFrame, link: str | None = None) -> None:
        """End the flow of ``frame``: reset its collected slots, drop it and its agents.

        Args:
            turn: The current turn.
            frame: The frame of the flow that ends.
            link: A flow to start in its place (a ``link:`` step).
        """
        flow = self.flows.get(frame.flow_id)
        turn.add(ev.flow_event("flow_completed", frame.flow_id, frame.step_id))
        if flow is not None:
            self._reset_collected_slots(turn, flow)
        turn.stack.remove_flow(frame)
        if link is not None:
            turn.stack.push(FlowFrame(link, frame_type=frame.frame_type))
            return
        # as in Rasa, the search pattern counts like a user flow when it leaves the stack empty
        if not frame.is_pattern or (frame.flow_id == SEARCH and turn.stack.top() is None):
            turn.metadata["_previous_flow_name"] = flow.name if flow is not None else frame.flow_id
            turn.flow_completed = turn.flow_completed or (flow is None or
                                                          flow.run_pattern_completed)
        caller = turn.stack.top()
        if frame.frame_type == FrameType.CALL and isinstance(caller, FlowFrame):
            caller_flow = self.flows.get(caller.flow_id)
            caller_step = caller_flow.step(caller.step_id) if caller_flow else None
            if caller_flow is not None and caller_step is not None:
                await self.move_next(turn, caller, caller_flow, caller_step)

    @staticmethod
    def _reset_collected_slots(turn: Turn, flow: Flow) -> None:
        persisted = flow.model.persisted_slots or []
        for step in flow.steps:
            name = step.model.collect
            if step.kind == "collect" and step.model.reset_after_flow_ends and name and \
                    name not in persisted and turn.slots.get(name) is not None:
                turn.add(ev.slot_set(name, None))

    @staticmethod
    def cancel_flow(turn: Turn, target: FlowFrame, reason: str | None) -> None:
        """Cancel ``target``: its agents are cancelled, then the flow, and all leave the stack.

        A flow started by a ``call:`` step is cancelled together with its callers (as Rasa
        does): otherwise the caller's ``call:`` step would start it again right away.
        """
        for frame in turn.stack.call_chain(target):
            for agent in turn.stack.agent_frames(frame.flow_id):
                turn.add(ev.agent_event("agent_cancelled", agent.agent_id, frame.flow_id,
                                        reason=reason))
            turn.add(ev.flow_event("flow_cancelled", frame.flow_id, frame.step_id))
            turn.stack.remove_flow(frame)

    @staticmethod
    def interrupt(turn: Turn, host: FlowFrame) -> None:
        """Mark the user flow ``host`` (and its waiting agents) as interrupted."""
        if host.interrupted:
            return
        host.interrupted = True
        turn.add(ev.flow_event("flow_interrupted", host.flow_id, host.step_id))
        for frame in turn.stack.agent_frames(host.flow_id):
            if frame.state in (FrameState.WAITING, FrameState.RESUMING):
                frame.state = FrameState.INTERRUPTED
                turn.add(ev.agent_event("agent_interrupted", frame.agent_id, frame.flow_id))

    def interrupt_active(self, turn: Turn) -> None:
        """Interrupt the top user flow if one of its agents is waiting for the user."""
        if turn.stack.active_agent() is not None:
            host = turn.stack.top_user_flow()
            if host is not None:
                self.interrupt(turn, host)

    @staticmethod
    def resume(turn: Turn, host: FlowFrame) -> None:
        """Continue the interrupted flow ``host``; its last interrupted agent resumes."""
        host.interrupted = False
        turn.add(ev.flow_event("flow_resumed", host.flow_id, host.step_id))
        agents = [f for f in turn.stack.agent_frames(host.flow_id)
                  if f.state == FrameState.INTERRUPTED]
        if agents:
            agents[-1].state = FrameState.RESUMING
