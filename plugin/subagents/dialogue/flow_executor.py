"""The flow executor: advances the dialogue stack until the assistant must wait for the user.

One loop looks at the top of the stack and runs it: an agent frame goes to
:class:`~subagents.dialogue.agent_steps.AgentSteps`, a flow frame runs its current step. The step
kinds are handled here (``collect``, ``set_slots``, ``link``, ``noop``) or handed on: ``action``
to :class:`~subagents.dialogue.action_steps.ActionSteps`, ``call`` of a sub agent to
``AgentSteps``; a ``call`` of another flow pushes that flow. Each returns a
:class:`~subagents.dialogue.results.Advance`.
"""

from __future__ import annotations

import random
from typing import Any, assert_never

import structlog

from subagents import events as ev
from subagents.agents.protocol import SubAgent
from subagents.config.flows import Flow, Step
from subagents.config.project import Project
from subagents.dialogue.action_steps import ActionSteps
from subagents.dialogue.actions import ActionRunner
from subagents.dialogue.agent_steps import AgentKey, AgentSteps
from subagents.dialogue.builtin_actions import SearchHandler
from subagents.dialogue.code_change import CodeChanges
from subagents.dialogue.command_effects import CommandEffects, coerce_command_value
from subagents.dialogue.commands import Command, HandleCodeChange
from subagents.dialogue.mcp_tool_steps import McpToolSteps, is_mcp_tool_step
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import Patterns
from subagents.dialogue.rephraser import LLMFactory, Rephraser
from subagents.dialogue.responses import Responder, render_template
from subagents.dialogue.results import Advance
from subagents.dialogue.stack import START, AgentFrame, FlowFrame, FrameType
from subagents.dialogue.turn import Turn
from subagents.mcp.pool import MCPPool

__all__ = ["FlowExecutor", "coerce_command_value", "render_template"]

log = structlog.get_logger("subagents.dialogue")

TYPE_REJECTIONS = {"bool": "utter_boolean_slot_rejection", "float": "utter_float_slot_rejection",
                   "categorical": "utter_categorical_slot_rejection",
                   "strict_categorical": "utter_categorical_slot_rejection"}
"""The response that says an answer does not fit the slot's type, by slot type."""
MAX_LOOP_STEPS = 500
"""A turn that runs more steps than this is stopped (a flow that loops without asking)."""


class FlowExecutor:
    """Applies a turn's commands and runs flows until the assistant waits for the user.

    Args:
        project: The loaded project.
        agents: The agent instances by (name, protocol).
        actions: Runs custom actions.
        assistant_id: Sent to agents as ``agent_id`` metadata.
        model_id: Sent to agents as ``model_id`` metadata.
        retry_delays: Pauses (seconds) between agent attempts after a recoverable error.
        rng: The random source for choosing among response variations (see
            :class:`~subagents.dialogue.responses.Responder`).
        llm_factory: Builds model clients (the response rephraser's, when configured).
    """

    def __init__(self, project: Project, agents: dict[AgentKey, SubAgent],
                 actions: ActionRunner, *, assistant_id: str, model_id: str,
                 retry_delays: tuple[float, ...] = (1.0, 2.0),
                 rng: random.Random | None = None,
                 llm_factory: LLMFactory | None = None,
                 mcp_pool: MCPPool | None = None) -> None:
        self.project = project
        self.mcp_steps = McpToolSteps(project.endpoints, mcp_pool) if mcp_pool else None
        self.flows = project.flows
        self.navigator = Navigator(project)
        self.patterns = Patterns(project)
        self.responder = Responder(project, rng=rng,
                                   rephraser=Rephraser.from_project(project, llm_factory))
        self.commands = CommandEffects(project, navigator=self.navigator,
                                       patterns=self.patterns)
        self.action_steps = ActionSteps(project, actions, responder=self.responder,
                                        navigator=self.navigator, patterns=self.patterns)
        self.code_changes = CodeChanges(project)
        self.agent_steps = AgentSteps(project, agents, responder=self.responder,
                                      navigator=self.navigator, patterns=self.patterns,
                                      assistant_id=assistant_id, model_id=model_id,
                                      retry_delays=retry_delays)

    async def start_session(self, turn: Turn, metadata: dict[str, Any] | None = None) -> None:
        """Start a new conversation's first session (before its first message, whose
        ``metadata`` it may read), with the project's own ``action_session_start`` when it
        replaces the built-in."""
        await self.action_steps.start_session(turn, metadata)

    def use_search(self, handler: SearchHandler | None) -> None:
        """Plug in the search backend ``action_trigger_search`` hands knowledge questions to
        (see :data:`~subagents.dialogue.builtin_actions.SearchHandler`); None removes it."""
        self.action_steps.builtins.use_search(handler)

    def clean_commands(self, turn: Turn, commands: list[Command]) -> list[Command]:
        """Drop commands that cannot apply now (see :meth:`CommandEffects.clean`).

        When flows on the stack changed since they started, the only command is
        :class:`~subagents.dialogue.commands.HandleCodeChange` (as in Rasa).
        """
        changed = self.code_changes.changed(turn.stack)
        if changed:
            log.info("dialogue.code_change.detected", sender=turn.sender_id, flows=changed)
            return [HandleCodeChange(tuple(changed))]
        return self.commands.clean(turn, commands)

    def apply_commands(self, turn: Turn, commands: list[Command]) -> None:
        """Apply cleaned commands to the stack and the slots."""
        self.commands.apply(turn, commands)

    async def advance(self, turn: Turn) -> None:
        """Run steps until the assistant waits for the user."""
        try:
            await self._advance(turn)
        finally:
            self.code_changes.stamp(turn.stack)

    async def _advance(self, turn: Turn) -> None:
        for _ in range(MAX_LOOP_STEPS):
            top = turn.stack.top()
            if top is None:
                if self.patterns.push_completed_once(turn):
                    continue
                return
            if isinstance(top, AgentFrame):
                result = await self.agent_steps.on_top(turn, top)
            else:
                result = await self._run_step(turn, top)
            await turn.flush_channel_events()
            match result:
                case Advance.WAIT:
                    return
                case Advance.NEXT | Advance.CHANGED:
                    continue
                case _:
                    assert_never(result)
        log.error("dialogue.loop.limit", sender=turn.sender_id)

    async def _run_step(self, turn: Turn, frame: FlowFrame) -> Advance:
        flow = self.flows.get(frame.flow_id)
        if flow is None:
            turn.stack.remove(frame)
            return Advance.CHANGED
        if frame.interrupted:
            self.patterns.ask_to_continue(turn)
            return Advance.CHANGED
        if frame.step_id == START:
            # a pattern's start carries its context, as Rasa's does (tests read the
            # clarification's options from it)
            context = dict(frame.info) if frame.is_pattern and frame.info else None
            turn.add(ev.flow_event("flow_started", flow.id, None, metadata=context))
            frame.step_id = flow.first_step.id
        step = flow.step(frame.step_id)
        if step is None:
            await self.navigator.complete_flow(turn, frame)
            return Advance.CHANGED
        turn.stamp = {"step_id": step.id, "active_flow": flow.id}
        try:
            result = await self._execute(turn, frame, flow, step)
        finally:
            turn.stamp = {}
        if result == Advance.NEXT:
            await self.navigator.move_next(turn, frame, flow, step)
        return result

    async def _execute(self, turn: Turn, frame: FlowFrame, flow: Flow, step: Step) -> Advance:
        kind = step.kind
        if kind == "collect":
            return await self._collect(turn, frame, step)
        if kind == "action":
            return await self.action_steps.run(turn, frame, str(step.model.action))
        if kind == "set_slots":
            for item in step.model.set_slots or []:
                for name, value in item.items():
                    if turn.slots.get(name) != value:
                        turn.add(ev.slot_set(name, value))
            return Advance.NEXT
        if kind == "link":
            await self.navigator.complete_flow(turn, frame, link=str(step.model.link))
            return Advance.CHANGED
        if kind == "call":
            target = str(step.model.call)
            if self.mcp_steps is not None and is_mcp_tool_step(step, self.project.endpoints):
                error = await self.mcp_steps.run(turn, flow.id, step)
                await self.navigator.move_next(turn, frame, flow, step)
                if error is not None:  # the flow goes on after the step once the pattern ran
                    self.patterns.internal_error(turn, **error)
                return Advance.CHANGED
            if target in self.project.agents:
                return await self.agent_steps.run(turn, frame, flow, step, None)
            turn.stack.push(FlowFrame(target, frame_type=FrameType.CALL))
            return Advance.CHANGED
        return Advance.NEXT  # noop

    async def _collect(self, turn: Turn, frame: FlowFrame, step: Step) -> Advance:
        """Ask for a slot unless it is filled (and passes the step's rejections)."""
        slot = str(step.model.collect)
        value = turn.slots.get(slot)
        if value is not None and (frame.awaiting == slot or not step.model.ask_before_filling):
            if not await self._rejected(turn, step, slot):
                validated = await self._validate(turn, frame, step, slot)
                if validated is not None:
                    return validated
                frame.awaiting = None
                return Advance.NEXT
        elif value is not None:  # ask_before_filling: ask even though a value is there
            turn.add(ev.slot_set(slot, None))
        if slot in turn.rejected_values:
            await self._type_rejection(turn, slot, turn.rejected_values.pop(slot))
        frame.awaiting = slot
        return await self._ask(turn, frame, step, slot)

    async def _validate(self, turn: Turn, frame: FlowFrame, step: Step,
                        slot: str) -> Advance | None:
        """Run the project's ``validate_<slot>`` custom action on a new value, as Rasa's
        collect pattern does; it accepts the value by leaving it set and rejects it by
        clearing it (its own messages say why).

        Returns:
            None when the value stands (or there is no such action), ``WAIT`` when the slot
            was asked again, ``CHANGED`` when the action failed.
        """
        action = f"validate_{slot}"
        if action not in self.project.domain.actions:
            return None
        if await self.action_steps.run(turn, frame, action) != Advance.NEXT:
            frame.awaiting = None
            return Advance.CHANGED  # it failed: the flow was cancelled, the error pattern runs
        if turn.slots.get(slot) is not None:
            return None
        frame.awaiting = slot
        return await self._ask(turn, frame, step, slot)

    async def _ask(self, turn: Turn, frame: FlowFrame, step: Step, slot: str) -> Advance:
        """Ask for ``slot`` as Rasa does: its ``utter``/``utter_ask_<slot>`` response, then a
        custom ``action_ask_<slot>`` when the domain lists one; with neither, a question built
        from the slot's definition."""
        name = step.model.utter or f"utter_ask_{slot}"
        action = f"action_ask_{slot}"
        has_action = action in self.project.domain.actions
        if name in self.project.domain.responses:
            await self.responder.utter(turn, name)
            turn.add(ev.action_executed(name))
        elif not has_action:
            definition = self.project.domain.slots.get(slot)
            text = (definition.prompt or definition.description) if definition else None
            await self.responder.say(turn, text or f"Please tell me your {slot.replace('_', ' ')}.",
                                     {"utter_action": name})
            turn.add(ev.action_executed(name))
        if has_action and await self.action_steps.run(turn, frame, action) != Advance.NEXT:
            frame.awaiting = None
            return Advance.CHANGED  # it failed: the flow was cancelled, the error pattern runs
        return Advance.WAIT

    async def _type_rejection(self, turn: Turn, slot: str, value: Any) -> None:
        """The answer did not fit the slot's type: say so (``utter_<type>_slot_rejection``)."""
        definition = self.project.domain.slots.get(slot)
        name = TYPE_REJECTIONS.get(definition.type if definition else "")
        if name is not None and name in self.project.domain.responses:
            await self.responder.utter(turn, name, value=value)

    async def _rejected(self, turn: Turn, step: Step, slot: str) -> bool:
        """Collect ``rejections``: the first matching condition utters and resets the slot."""
        for rejection in step.rejections:  # parsed when the project loaded
            if rejection.condition.evaluate({"slots": dict(turn.slots)}):
                if rejection.utter:
                    await self.responder.utter(turn, rejection.utter, value=turn.slots.get(slot))
                turn.add(ev.slot_set(slot, None))
                return True
        return False
