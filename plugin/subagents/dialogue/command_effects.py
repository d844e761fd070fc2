"""What the commands of a user turn do to the stack and the slots."""

from __future__ import annotations

import functools
from typing import Any, assert_never

import structlog

from subagents import events as ev
from subagents.agents.schemas import AgentInputSlot
from subagents.agents.task_agent import coerce_slot_value
from subagents.conditions import ConditionSyntaxError, parse_condition, referenced_slots
from subagents.config.project import Project
from subagents.dialogue.builtin_actions import lifecycle_event
from subagents.dialogue.commands import (
    CancelFlow,
    CannotHandle,
    ChitChat,
    Clarify,
    Command,
    ContinueAgent,
    HandleCodeChange,
    Intent,
    InternalError,
    KnowledgeAnswer,
    RepeatBotMessages,
    Restart,
    RestartAgent,
    SessionEnd,
    SessionStart,
    SetSlot,
    SkipQuestion,
    StartFlow,
)
from subagents.dialogue.corrections import CORRECTION, plan_correction
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import (
    CANNOT_HANDLE_CHITCHAT,
    CHITCHAT,
    CLARIFICATION,
    CODE_CHANGE,
    CONTINUE_INTERRUPTED,
    CONTINUE_SLOT,
    REPEAT_BOT_MESSAGES,
    RESTART,
    SEARCH,
    SESSION_END,
    SESSION_START,
    SKIP_QUESTION,
    Patterns,
)
from subagents.dialogue.stack import AgentFrame, FlowFrame, FrameType
from subagents.dialogue.turn import Turn

log = structlog.get_logger("subagents.dialogue")

BUILTIN_INTENTS: dict[str, Command] = {"session_start": SessionStart(), "restart": Restart(),
                                       "session_end": SessionEnd()}
"""Intents that work even when no flow's ``nlu_trigger`` names them."""
PATTERN_COMMANDS: dict[str, Command] = {
    "pattern_cancel_flow": CancelFlow(), "pattern_chitchat": ChitChat(),
    "pattern_cannot_handle": CannotHandle(), "pattern_skip_question": SkipQuestion(),
    "pattern_restart": Restart(), "pattern_session_start": SessionStart(),
    "pattern_session_end": SessionEnd(), "pattern_search": KnowledgeAnswer()}
"""What an intent that triggers a pattern means (other patterns cannot be triggered)."""
INVALID_INTENT = "cannot_handle_invalid_intent"
UNKNOWN_SLOT = "cannot_handle_unknown_slot"
NOTHING_TO_CANCEL = "cannot_handle_no_active_flow"
_INVALID = object()
PatternCommand = (ChitChat | KnowledgeAnswer | CannotHandle | Clarify | RepeatBotMessages
                  | SkipQuestion | SessionStart | SessionEnd | Restart)


def coerce_command_value(kind: str, values: list[Any] | None, value: Any) -> Any:
    """Coerce a value set by a command to its slot's type.

    Bool, float and categorical slots are coerced the way the task agent's ``set_slot`` tools
    coerce them; values of other slot types (and categorical slots without values) are kept as
    given.

    Raises:
        ValueError: The value does not fit the slot type.
    """
    categorical = kind in ("categorical", "strict_categorical") and bool(values)
    if kind not in ("bool", "float") and not categorical:
        return value
    return coerce_slot_value(AgentInputSlot(name="value", type=kind, allowed_values=values),
                             value)


def agent_owned_slots(project: Project) -> frozenset[str]:
    """Slots that only agents, flows and actions may fill, never a ``SetSlot`` command.

    A slot belongs to the agents when the ``exit_if`` of a sub agent's call step reads it and
    no ``collect`` step asks the user for it: its value is the outcome of the agent's work (a
    booking reference, an order id), so a user who types ``/SetSlots(...)`` or talks the
    command generator into ``set slot`` must not be able to fake it.
    """
    read: list[str] = []
    collected: set[str] = set()
    for flow in project.flows.values():
        for step in flow.steps:
            if step.kind == "call" and step.exit_if:
                read += referenced_slots(step.exit_if)
            elif step.kind == "collect" and step.model.collect:
                collected.add(step.model.collect)
    return frozenset(read) - collected


class CommandEffects:
    """Cleans a turn's commands and applies them.

    Args:
        project: The loaded project.
        navigator: Stack transitions (interrupting flows).
        patterns: Pushes the patterns commands lead to.
    """

    def __init__(self, project: Project, *, navigator: Navigator, patterns: Patterns) -> None:
        self.project = project
        self.flows = project.flows
        self.navigator = navigator
        self.patterns = patterns
        self.agent_owned = agent_owned_slots(project)
        """Slots no ``SetSlot`` command may set (see :func:`agent_owned_slots`)."""
        chitchat = self.flows.get(CHITCHAT)
        self._no_chitchat = chitchat is None or any(
            s.kind == "action" and s.target == "action_trigger_chitchat" for s in chitchat.steps)
        """Chitchat cannot be answered: there is no ``pattern_chitchat``, or it hands over to a
        free-form chitchat component (``action_trigger_chitchat``) that this package lacks."""

    def clean(self, turn: Turn, commands: list[Command]) -> list[Command]:
        """Drop commands that cannot apply now and duplicates.

        ``SetSlot`` commands for agent-owned slots are dropped. While an agent waits, a turn
        whose only commands are ``CannotHandle`` goes to the agent.
        """
        active = turn.stack.active_agent()
        cleaned: list[Command] = []
        for command in map(functools.partial(self._unhandled, turn), self._resolve(commands)):
            if self._applies(turn, command) and command not in cleaned:
                cleaned.append(command)
        if active is not None and all(isinstance(c, CannotHandle) for c in cleaned):
            cleaned = [ContinueAgent()]
        return cleaned

    def _resolve(self, commands: list[Command]) -> list[Command]:
        """Intents become what they trigger; clarification stands only on its own."""
        resolved: list[Command] = []
        for command in commands:
            resolved += self._intent(command.name, command.confidence) \
                if isinstance(command, Intent) else [command]
        if self._no_chitchat:
            resolved = [CannotHandle(CANNOT_HANDLE_CHITCHAT) if isinstance(c, ChitChat) else c
                        for c in resolved]
        clarify = [c for c in resolved if isinstance(c, Clarify)]
        if not clarify:
            return resolved
        if len(clarify) < len(resolved):
            return [c for c in resolved if not isinstance(c, Clarify)]
        options = [f for f in dict.fromkeys(clarify[0].flows)
                   if f in self.flows and not f.startswith("pattern_")]
        if len(options) == 1:
            return [StartFlow(options[0])]
        return [Clarify(tuple(options))] if options else []

    def _unhandled(self, turn: Turn, command: Command) -> Command:
        """``command``, or the ``CannotHandle`` it becomes when it cannot be carried out.

        As in Rasa, a ``SetSlot`` for a slot the domain lacks and a ``CancelFlow`` while no
        flow runs run the cannot-handle pattern (whose default asks the user to rephrase).
        """
        if isinstance(command, SetSlot) and command.name not in self.project.domain.slots:
            log.info("dialogue.slot.unknown", slot=command.name)
            return CannotHandle(UNKNOWN_SLOT)
        if isinstance(command, CancelFlow) and turn.stack.top_user_flow() is None:
            return CannotHandle(NOTHING_TO_CANCEL)
        return command

    def _intent(self, name: str, confidence: float = 1.0) -> list[Command]:
        # a payload intent has confidence 1.0, so every confidence threshold is met
        flow_id = self.project.flow_for_intent(name, confidence)
        if flow_id is None:
            fixed = BUILTIN_INTENTS.get(name)
            return [fixed] if fixed is not None else [CannotHandle(INVALID_INTENT)]
        if not flow_id.startswith("pattern_"):
            return [StartFlow(flow_id)]
        command = PATTERN_COMMANDS.get(flow_id)
        return [command] if command is not None else []

    def _applies(self, turn: Turn, command: Command) -> bool:
        if isinstance(command, StartFlow):
            return command.flow in self.flows and self.guard_allows(turn, command.flow)
        if isinstance(command, ContinueAgent):
            return turn.stack.active_agent() is not None
        if isinstance(command, RestartAgent):
            return (command.agent in self.project.agents
                    and command.agent in turn.snapshot.completed_agents())
        if isinstance(command, SetSlot) and command.name in self.agent_owned:
            log.warning("dialogue.slot.agent_owned", slot=command.name)
            return False
        return True

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

    def apply(self, turn: Turn, commands: list[Command]) -> None:
        """Apply cleaned commands in order; corrections of collected slots come last."""
        correction = None
        if CORRECTION in self.flows:
            values = {c.name: v for c in commands if isinstance(c, SetSlot)
                      if (v := self.coerced(c.name, c.value)) is not _INVALID}
            correction = plan_correction(self.project, turn, values)
        for command in commands:
            if correction is not None and isinstance(command, SetSlot) \
                    and command.name in correction.slots:
                continue
            self._apply_one(turn, command)
        if correction is not None:
            self.patterns.push(turn, CORRECTION, correction.context)

    def _apply_one(self, turn: Turn, command: Command) -> None:
        """Apply one command."""
        match command:
            case SetSlot():
                self.set_slot(turn, command.name, command.value)
            case StartFlow():
                self.start_flow(turn, command.flow)
            case CancelFlow():
                self.cancel_flow(turn)
            case RestartAgent():
                self.restart_agent(turn, command.agent)
            case ContinueAgent() | Intent():
                pass  # the waiting agent runs when reached; intents were resolved in clean
            case HandleCodeChange():
                self.code_change(turn, command.flows)
            case InternalError():
                # the message was not understood, so a waiting agent must not receive it
                turn.agent_ran = True
                self.patterns.internal_error(turn, error_type=command.error_type,
                                             info=dict(command.info))
            case (ChitChat() | KnowledgeAnswer() | CannotHandle() | Clarify()
                  | RepeatBotMessages() | SkipQuestion() | SessionStart() | SessionEnd()
                  | Restart()):
                self._pattern_command(turn, command)
            case _:
                assert_never(command)

    def _pattern_command(self, turn: Turn, command: PatternCommand) -> None:
        """Commands that run a conversation pattern."""
        match command:
            case ChitChat():
                self.navigator.interrupt_active(turn)
                self.patterns.push(turn, CHITCHAT)
            case KnowledgeAnswer():
                # as in Rasa: a waiting agent is interrupted, the search pattern answers
                self.navigator.interrupt_active(turn)
                self._pattern_or_cannot_handle(turn, SEARCH)
            case CannotHandle():
                self.patterns.cannot_handle(turn, command.reason)
            case Clarify():
                self.clarify(turn, command.flows)
            case RepeatBotMessages():
                self._pattern_or_cannot_handle(turn, REPEAT_BOT_MESSAGES)
            case SkipQuestion():
                self._pattern_or_cannot_handle(turn, SKIP_QUESTION)
            case SessionStart():
                if not self.patterns.push(turn, SESSION_START):
                    turn.add(lifecycle_event("session_started"))
            case SessionEnd() | Restart():
                self.end(turn, command)
            case _:
                assert_never(command)

    def code_change(self, turn: Turn, flows: tuple[str, ...]) -> None:
        """Run ``pattern_code_change``; the frames on the stack take the flows as they are now
        (so a change is reported once)."""
        for frame in turn.stack.flow_frames():
            frame.flow_hash = None
        if not self.patterns.push(turn, CODE_CHANGE, {"changed_flows": list(flows)}):
            turn.stack.frames = []

    def clarify(self, turn: Turn, flow_ids: tuple[str, ...]) -> None:
        """Ask which of several flows the user meant (``pattern_clarification``)."""
        self.navigator.interrupt_active(turn)
        names = [self.flows[f].name for f in flow_ids]
        if not self.patterns.push(turn, CLARIFICATION, {"names": names,
                                                        "clarification_ids": list(flow_ids)}):
            self.patterns.cannot_handle(turn)

    def _pattern_or_cannot_handle(self, turn: Turn, flow_id: str) -> None:
        if not self.patterns.push(turn, flow_id):
            self.patterns.cannot_handle(turn)

    def end(self, turn: Turn, command: SessionEnd | Restart) -> None:
        """End the session or restart, through its pattern when the project has one."""
        pattern = RESTART if isinstance(command, Restart) else SESSION_END
        if self.patterns.push(turn, pattern):
            return
        turn.add(lifecycle_event("restart" if isinstance(command, Restart)
                                  else "session_ended"))
        turn.stack.frames = []

    def coerced(self, name: str, value: Any) -> Any:
        """``value`` coerced to the type of the slot ``name``; ``_INVALID`` if it cannot be."""
        definition = self.project.domain.slots.get(name)
        if definition is None:
            log.info("dialogue.slot.unknown", slot=name)
            return _INVALID
        try:
            return coerce_command_value(definition.type, definition.values, value)
        except ValueError:
            log.info("dialogue.slot.invalid_value", slot=name, value=str(value)[:80])
            return _INVALID

    def set_slot(self, turn: Turn, name: str, value: Any) -> None:
        """Set a domain slot, coerced to its type (unknown slots and bad values are dropped).

        A value that does not fit the slot being asked for is remembered on the turn, so the
        collect step can say why it asks again.
        """
        coerced = self.coerced(name, value)
        top = turn.stack.top_flow()
        if coerced is _INVALID and name in self.project.domain.slots and top is not None \
                and top.awaiting == name:
            turn.rejected_values[name] = value
        if coerced is not _INVALID and turn.slots.get(name) != coerced:
            turn.add(ev.slot_set(name, coerced))

    def start_flow(self, turn: Turn, flow_id: str) -> None:
        """Start ``flow_id`` on top, interrupting the running user flow."""
        stack = turn.stack
        top_flow = stack.top_flow()
        if top_flow is not None and top_flow.flow_id == CONTINUE_INTERRUPTED:
            interrupted = top_flow.info.get("interrupted_flow")
            if interrupted == flow_id:
                self.set_slot(turn, CONTINUE_SLOT, True)
                return
        host = stack.top_user_flow()
        if host is not None and host.flow_id == flow_id:
            return
        if host is not None:
            self.navigator.interrupt(turn, host)
        stack.push(FlowFrame(flow_id,
                             frame_type=FrameType.INTERRUPT if host else FrameType.REGULAR))

    def cancel_flow(self, turn: Turn) -> None:
        """Cancel the top user flow through ``pattern_cancel_flow``."""
        target = turn.stack.top_user_flow()
        if target is not None:
            self.patterns.cancel(turn, target)

    def restart_agent(self, turn: Turn, agent: str) -> None:
        """Run a completed agent's call step again, in the flow that last started it."""
        flow_id = turn.snapshot.started_in.get(agent)
        flow = self.flows.get(str(flow_id)) if flow_id else None
        steps = flow.call_steps_for(agent) if flow else []
        if flow is None or not steps:
            return
        host = turn.stack.top_user_flow()
        if host is not None and host.flow_id != flow.id:
            self.navigator.interrupt(turn, host)
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
