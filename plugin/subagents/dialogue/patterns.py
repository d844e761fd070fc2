"""Conversation patterns: the flows the assistant runs on its own (``pattern_*``).

A project overrides a pattern by defining a flow with the same id. A pattern frame carries a
context (``FlowFrame.info``) that its conditions and responses read as ``context.<key>``:

* ``pattern_cancel_flow``: ``canceled_name`` (the flow's name), ``cancelled_flow`` (its id),
  ``canceled_frames``, ``frame_id``;
* ``pattern_continue_interrupted``: ``interrupted_flow``, ``interrupted_flow_ids``,
  ``interrupted_flow_names``, ``interrupted_flow_options``, ``multiple_flows_interrupted``;
* ``pattern_internal_error``: ``error_type`` and what failed (``error_source``, ...);
* ``pattern_cannot_handle``: ``reason`` (``cannot_handle_default``, ``cannot_handle_chitchat``,
  ``cannot_handle_invalid_intent``, ...); the default pattern branches on it;
* ``pattern_completed``: ``previous_flow_name``;
* ``pattern_code_change``: ``changed_flows`` (the ids of the flows that changed or are gone);
* ``pattern_clarification``: ``names`` (readable names), ``clarification_ids`` and, once
  ``action_clarify_flows`` ran, ``clarification_options``.
"""

from __future__ import annotations

from typing import Any

from subagents import events as ev
from subagents.config.project import Project
from subagents.dialogue.stack import FlowFrame
from subagents.dialogue.turn import Turn

CANCEL_FLOW = "pattern_cancel_flow"
CLARIFICATION = "pattern_clarification"
CODE_CHANGE = "pattern_code_change"
REPEAT_BOT_MESSAGES = "pattern_repeat_bot_messages"
RESTART = "pattern_restart"
SESSION_END = "pattern_session_end"
SESSION_START = "pattern_session_start"
SKIP_QUESTION = "pattern_skip_question"
SEARCH = "pattern_search"
"""Answers knowledge questions (the ``search and reply`` command); like a user flow, it is
followed by ``pattern_completed`` when it leaves the stack empty, as in Rasa."""
CANNOT_HANDLE = "pattern_cannot_handle"
CHITCHAT = "pattern_chitchat"
COMPLETED = "pattern_completed"
CONTINUE_INTERRUPTED = "pattern_continue_interrupted"
INTERNAL_ERROR = "pattern_internal_error"
CONTINUE_SLOT = "continue_interrupted_flow_confirmation"
DEFAULT_ERROR_TYPE = "rasa_internal_error_default"
DEFAULT_CANNOT_HANDLE_REASON = "cannot_handle_default"
CANNOT_HANDLE_CHITCHAT = "cannot_handle_chitchat"
"""``pattern_cannot_handle``'s reason when chitchat cannot be answered."""


class Patterns:
    """Pushes pattern frames with their context.

    Args:
        project: The loaded project (its flows, default patterns included).
    """

    def __init__(self, project: Project) -> None:
        self.flows = project.flows

    def push(self, turn: Turn, flow_id: str, info: dict[str, Any] | None = None) -> bool:
        """Push the pattern ``flow_id`` with context ``info``.

        Returns:
            False (and nothing is pushed) when the project has no such pattern.
        """
        if flow_id not in self.flows:
            return False
        turn.stack.push(FlowFrame(flow_id, info=dict(info or {})))
        return True

    def cancel(self, turn: Turn, target: FlowFrame) -> None:
        """Push the cancel pattern for the user flow ``target``."""
        flow = self.flows.get(target.flow_id)
        self.push(turn, CANCEL_FLOW, {
            "cancelled_flow": target.flow_id, "frame_id": target.frame_id,
            "canceled_name": flow.name if flow is not None else target.flow_id,
            "canceled_frames": [f.frame_id for f in turn.stack.call_chain(target)]})

    def internal_error(self, turn: Turn, **info: Any) -> None:
        """Push the internal-error pattern; ``info`` says what failed.

        The context's ``error_type`` is ``rasa_internal_error_default`` unless ``info`` says
        otherwise, so projects can branch on it as on Rasa's.
        """
        self.push(turn, INTERNAL_ERROR, {"error_type": DEFAULT_ERROR_TYPE, **info})

    def cannot_handle(self, turn: Turn, reason: str | None = None) -> None:
        """Push the cannot-handle pattern with ``reason`` (default ``cannot_handle_default``)."""
        self.push(turn, CANNOT_HANDLE, {"reason": reason or DEFAULT_CANNOT_HANDLE_REASON})

    def ask_to_continue(self, turn: Turn) -> None:
        """An interrupted flow is on top again: ask whether to go back to it."""
        host = turn.stack.top_user_flow()
        if host is None or CONTINUE_INTERRUPTED not in self.flows:
            return
        if turn.slots.get(CONTINUE_SLOT) is not None:
            turn.add(ev.slot_set(CONTINUE_SLOT, None))
        flow = self.flows.get(host.flow_id)
        name = flow.name if flow is not None else host.flow_id
        self.push(turn, CONTINUE_INTERRUPTED, {
            "interrupted_flow": host.flow_id, "interrupted_flow_ids": [host.flow_id],
            "interrupted_flow_names": [name], "interrupted_flow_options": name,
            "multiple_flows_interrupted": False})

    def push_completed_once(self, turn: Turn) -> bool:
        """After the last user flow of the turn ended, push ``pattern_completed`` once.

        Returns:
            Whether the pattern was pushed (the stack may still be empty if it is undefined).
        """
        if not turn.flow_completed or turn.metadata.get("_completed_pattern"):
            return False
        turn.metadata["_completed_pattern"] = True
        previous = turn.metadata.get("_previous_flow_name")
        self.push(turn, COMPLETED, {"previous_flow_name": previous} if previous else None)
        return True
