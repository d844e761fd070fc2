"""Built-in actions: Rasa's default action set, run inside the assistant.

None of these names ever reaches the custom action server. Each runs as an ``action:`` step
(usually inside a pattern) and returns a :class:`~subagents.dialogue.results.Advance`.

Actions of Rasa's older, intent-based dialogue management and those that need a component this
package does not have (an intentless policy, a voice channel) do what Rasa does without that
component: nothing, or the cannot-handle pattern for chitchat.

``action_trigger_search`` hands the conversation to a search backend when one is plugged in
(:meth:`BuiltinActions.use_search`); without one it says ``utter_no_knowledge_base``, the reply
of Rasa's default ``pattern_search``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from subagents import events as ev
from subagents.config.project import Project
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import CANNOT_HANDLE_CHITCHAT, Patterns
from subagents.dialogue.responses import Responder
from subagents.dialogue.results import Advance
from subagents.dialogue.stack import FlowFrame, FrameType
from subagents.dialogue.turn import Turn

log = structlog.get_logger("subagents.dialogue")

BuiltinAction = Callable[[Turn, FlowFrame], Awaitable[Advance]]
SearchHandler = Callable[[Turn, FlowFrame], Awaitable[Advance]]
"""Answers a knowledge question when ``action_trigger_search`` runs: it receives the turn (the
user's message is ``turn.user_text``, the conversation's latest events ``turn.events``, every
event after ``await turn.all_events()``) and the frame of the
step, sends its answer (or pushes a pattern, e.g. ``pattern_cannot_handle`` with reason
``cannot_handle_no_relevant_answer``) and returns the step's result (usually ``NEXT``)."""
NO_KNOWLEDGE_BASE = "utter_no_knowledge_base"

NO_EFFECT_ACTIONS = frozenset({
    "action_agent_request_user_input", "action_send_text_update", "action_send_text",
    "action_run_slot_rejections", "action_handoff_metric",
    "action_revert_fallback_events", "action_default_ask_affirmation",
    "action_default_ask_rephrase", "action_two_stage_fallback", "action_unlikely_intent",
    "action_back", "action_extract_slots", "action_block_digression",
})
"""Built-in actions that change nothing here (agents send their own texts; rejections run in
the collect step; metrics only; intent-based dialogue management)."""
DEFAULT_MAX_CLARIFICATION_OPTIONS = 3


def lifecycle_event(kind: str) -> dict[str, Any]:
    """A ``restart``, ``session_started`` or ``session_ended`` event."""
    return {"event": kind, "timestamp": time.time()}


def session_start_events() -> list[dict[str, Any]]:
    """What Rasa records before a new conversation's first message: ``action_session_start``
    ran, a session started, and the assistant listened (no pattern runs)."""
    return [ev.action_executed("action_session_start"), lifecycle_event("session_started"),
            ev.action_executed("action_listen")]


def start_session(turn: Turn) -> None:
    """Add :func:`session_start_events` to a new conversation's first turn."""
    for event in session_start_events():
        turn.add(event)


def session_started_for_latest_message(turn: Turn) -> bool:
    """Whether a session started for the user's latest message: just before it (as for a new
    conversation's first message) or since."""
    users = 0
    for event in reversed(turn.events):
        if event.get("event") == "session_started":
            return True
        if event.get("event") == "user":
            users += 1
            if users > 1:
                break
    return False


def _joined(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} or {names[-1]}"


class BuiltinActions:
    """The built-in actions by name.

    Args:
        project: The loaded project.
        responder: Sends the responses some actions use.
        navigator: Stack transitions.
        patterns: Pushes the patterns some actions lead to.
    """

    def __init__(self, project: Project, *, responder: Responder, navigator: Navigator,
                 patterns: Patterns) -> None:
        self.project = project
        self.flows = project.flows
        self.responder = responder
        self.navigator = navigator
        self.patterns = patterns
        self.search: SearchHandler | None = None
        """The search backend ``action_trigger_search`` hands over to (None: there is none)."""
        self.actions: dict[str, BuiltinAction] = {
            "action_listen": self._listen,
            "action_restart": self._restart,
            "action_session_start": self._session_start,
            "action_default_fallback": self._default_fallback,
            "action_deactivate_loop": self._deactivate_loop,
            "action_cancel_flow": self._cancel_flow,
            "action_continue_interrupted_flow": self._continue_interrupted_flow,
            "action_cancel_interrupted_flow": self._cancel_interrupted_flow,
            "action_cancel_interrupted_flows": self._cancel_interrupted_flow,
            "action_correct_flow_slot": self._correct_flow_slot,
            "action_clarify_flows": self._clarify_flows,
            "action_clean_stack": self._clean_stack,
            "action_trigger_chitchat": self._trigger_chitchat,
            "action_trigger_search": self._trigger_search,
            "action_reset_routing": self._reset_routing,
            "action_hangup": self._hangup,
            "action_repeat_bot_messages": self._repeat_bot_messages,
            "action_default_capabilities": self._capabilities,
        }
        for name in NO_EFFECT_ACTIONS:
            self.actions.setdefault(name, self._nothing)

    def use_search(self, handler: SearchHandler | None) -> None:
        """Plug in the search backend that ``action_trigger_search`` runs (None: remove it)."""
        self.search = handler

    def get(self, name: str) -> BuiltinAction | None:
        """The built-in action ``name``, or None if it is not one."""
        return self.actions.get(name)

    # ------------------------------------------------------------------ conversation
    async def _nothing(self, turn: Turn, frame: FlowFrame) -> Advance:
        return Advance.NEXT

    async def _listen(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Move past this step, then wait for the user."""
        flow = self.flows.get(frame.flow_id)
        step = flow.step(frame.step_id) if flow is not None else None
        if flow is not None and step is not None:
            await self.navigator.move_next(turn, frame, flow, step)
        return Advance.WAIT

    async def _restart(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Say ``utter_restart`` if the domain has it, then start the conversation afresh."""
        if "utter_restart" in self.project.domain.responses:
            await self.responder.utter(turn, "utter_restart")
        turn.add(lifecycle_event("restart"))
        turn.stack.frames = []
        turn.flow_completed = False
        return Advance.WAIT

    async def _session_start(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Start a session, unless one started for the user's latest message (just before it,
        as for a new conversation's first message, or since)."""
        if not session_started_for_latest_message(turn):
            turn.add(lifecycle_event("session_started"))
        return Advance.NEXT

    async def _default_fallback(self, turn: Turn, frame: FlowFrame) -> Advance:
        if "utter_default" in self.project.domain.responses:
            await self.responder.utter(turn, "utter_default")
        return Advance.NEXT

    async def _deactivate_loop(self, turn: Turn, frame: FlowFrame) -> Advance:
        if turn.slots.get("requested_slot") is not None:
            turn.add(ev.slot_set("requested_slot", None))
        return Advance.NEXT

    async def _hangup(self, turn: Turn, frame: FlowFrame) -> Advance:
        """End the session; nothing else runs in this turn."""
        turn.add(lifecycle_event("session_ended"))
        turn.stack.frames = []
        turn.flow_completed = False
        return Advance.WAIT

    async def _repeat_bot_messages(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Send again the bot messages that came right before the user's latest message."""
        events = turn.events
        last_user = next((i for i in range(len(events) - 1, -1, -1)
                          if events[i].get("event") == "user"), None)
        if last_user is None:
            return Advance.NEXT
        previous_user = next((i for i in range(last_user - 1, -1, -1)
                              if events[i].get("event") == "user"), -1)
        for event in events[previous_user + 1:last_user]:
            if event.get("event") == "bot" and event.get("text"):
                await self.responder.say(turn, str(event["text"]),
                                         {**(event.get("metadata") or {}), "repeated": True},
                                         dict(event.get("data") or {}))
        return Advance.NEXT

    async def _capabilities(self, turn: Turn, frame: FlowFrame) -> Advance:
        """List what the assistant can do: the user flows a message can start."""
        lines = [f"- {flow.description.strip() or flow.name}" for flow in self.flows.values()
                 if not flow.id.startswith("pattern_") and flow.model.if_ is None]
        if lines:
            await self.responder.say(turn, "I can help you with:\n" + "\n".join(lines),
                                     {"utter_action": "action_default_capabilities"})
        return Advance.NEXT

    async def _trigger_chitchat(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Free-form chitchat needs a component this package does not have: cannot handle."""
        self.patterns.cannot_handle(turn, CANNOT_HANDLE_CHITCHAT)
        return Advance.CHANGED

    async def _trigger_search(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Hand over to the search backend; without one, say what Rasa's default
        ``pattern_search`` says when there is no knowledge base."""
        if self.search is not None:
            return await self.search(turn, frame)
        log.info("dialogue.search.no_backend", sender=turn.sender_id)
        if NO_KNOWLEDGE_BASE in self.project.domain.responses:
            await self.responder.utter(turn, NO_KNOWLEDGE_BASE)
        return Advance.NEXT

    async def _reset_routing(self, turn: Turn, frame: FlowFrame) -> Advance:
        if "route_session_to_calm" in self.project.domain.slots and \
                turn.slots.get("route_session_to_calm") is not None:
            turn.add(ev.slot_set("route_session_to_calm", None))
        return Advance.NEXT

    # ------------------------------------------------------------------ stack
    async def _cancel_flow(self, turn: Turn, frame: FlowFrame) -> Advance:
        """In ``pattern_cancel_flow``: cancel the flows named in the pattern's context."""
        targets = {frame.info.get("frame_id"), *(frame.info.get("canceled_frames") or [])}
        for target in [f for f in turn.stack.flow_frames() if f.frame_id in targets][::-1]:
            if any(f is target for f in turn.stack.frames):  # not gone with a flow it called
                self.navigator.cancel_flow(turn, target, reason=None)
        return Advance.NEXT

    async def _continue_interrupted_flow(self, turn: Turn, frame: FlowFrame) -> Advance:
        """In ``pattern_continue_interrupted``: go back to the interrupted flow."""
        host = turn.stack.frame_of_flow(str(frame.info.get("interrupted_flow")))
        if host is not None:
            self.navigator.resume(turn, host)
        return Advance.NEXT

    async def _cancel_interrupted_flow(self, turn: Turn, frame: FlowFrame) -> Advance:
        """In ``pattern_continue_interrupted``: drop the interrupted flow (and say so)."""
        host = turn.stack.frame_of_flow(str(frame.info.get("interrupted_flow")))
        flow = self.flows.get(frame.flow_id)
        step = flow.step(frame.step_id) if flow is not None else None
        if host is None or flow is None or step is None:
            return Advance.NEXT
        await self.navigator.move_next(turn, frame, flow, step)
        self.patterns.cancel(turn, host)
        return Advance.CHANGED

    async def _correct_flow_slot(self, turn: Turn, frame: FlowFrame) -> Advance:
        """In ``pattern_correction``: move the flow back to the corrected collect step, then set
        the new values; agents of that flow that were waiting are cancelled."""
        flow_id, step_id = frame.info.get("reset_flow_id"), frame.info.get("reset_step_id")
        target = turn.stack.frame_of_flow(str(flow_id)) if flow_id and step_id else None
        if target is not None:
            for agent in turn.stack.agent_frames(target.flow_id):
                turn.add(ev.agent_event("agent_cancelled", agent.agent_id, target.flow_id,
                                        reason="the user corrected an earlier answer"))
                turn.stack.remove(agent)
            target.step_id, target.awaiting = str(step_id), None
        for name, value in dict(frame.info.get("corrected_slots") or {}).items():
            if isinstance(value, dict) and "value" in value:
                value = value["value"]
            if turn.slots.get(name) != value:
                turn.add(ev.slot_set(str(name), value))
        return Advance.NEXT

    async def _clarify_flows(self, turn: Turn, frame: FlowFrame) -> Advance:
        """In ``pattern_clarification``: offer at most ``max_clarification_options`` flows."""
        limit = turn.slots.get("max_clarification_options")
        try:
            count = int(limit) if limit is not None else DEFAULT_MAX_CLARIFICATION_OPTIONS
        except (TypeError, ValueError):
            count = DEFAULT_MAX_CLARIFICATION_OPTIONS
        names = [str(n) for n in frame.info.get("names") or []][:max(count, 1)]
        frame.info["names"] = names
        frame.info["clarification_options"] = _joined(names)
        return Advance.NEXT

    async def _clean_stack(self, turn: Turn, frame: FlowFrame) -> Advance:
        """Let every other flow on the stack end; agents are dropped."""
        for other in turn.stack.flow_frames():
            if other is not frame:
                other.step_id, other.interrupted = "END", False
                other.frame_type = FrameType.REGULAR
        turn.stack.frames = [f for f in turn.stack.frames if isinstance(f, FlowFrame)]
        return Advance.NEXT
