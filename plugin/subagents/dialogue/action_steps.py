"""Action steps: built-in actions, responses used as actions, and custom actions.

An ``action:`` step names one of three things, looked up in this order: a built-in action
(see :mod:`~subagents.dialogue.builtin_actions`), a response of the domain (``utter_*``), or a
custom action run by :class:`~subagents.dialogue.actions.ActionRunner`. A custom action that
fails cancels the user flow it ran in and runs ``pattern_internal_error``.

As in Rasa, a project replaces a built-in action by listing an action of the same name under
the domain's ``actions`` (``action_restart``, ``action_session_start``,
``action_default_fallback``, ...): the project's action runs instead. ``action_listen`` is the
exception: it only marks where the assistant waits, so the built-in always runs. A replacement
that returns a ``restart`` event starts the conversation afresh, as the built-in
``action_restart`` does.
"""

from __future__ import annotations

from typing import Any

import structlog

from subagents import events as ev
from subagents.config.project import BUILTIN_ACTIONS, Project
from subagents.dialogue.actions import ActionFailedError, ActionRunner
from subagents.dialogue.builtin_actions import (
    BuiltinActions,
    lifecycle_event,
    session_started_for_latest_message,
    start_session,
)
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import Patterns
from subagents.dialogue.responses import Responder
from subagents.dialogue.results import Advance
from subagents.dialogue.stack import FlowFrame
from subagents.dialogue.turn import Turn

log = structlog.get_logger("subagents.dialogue")

NOT_REPLACEABLE = frozenset({"action_listen"})
"""Built-in actions a project's action of the same name never replaces."""
SESSION_START = "action_session_start"
SESSION_METADATA_SLOT = "session_started_metadata"


def replaced_builtins(project: Project) -> frozenset[str]:
    """Built-in actions the project replaces with its own (listed under the domain's
    ``actions``), as Rasa lets a project do."""
    return frozenset(a for a in project.domain.actions
                     if a in BUILTIN_ACTIONS and a not in NOT_REPLACEABLE)


class ActionSteps:
    """Runs the action of an ``action:`` step.

    Args:
        project: The loaded project.
        runner: Runs custom actions (in process or on an action server).
        responder: Sends responses and the custom actions' messages.
        navigator: Stack transitions for the built-in actions.
        patterns: Pushes the cancel and internal-error patterns.
    """

    def __init__(self, project: Project, runner: ActionRunner, *, responder: Responder,
                 navigator: Navigator, patterns: Patterns) -> None:
        self.project = project
        self.runner = runner
        self.responder = responder
        self.navigator = navigator
        self.patterns = patterns
        self.builtins = BuiltinActions(project, responder=responder, navigator=navigator,
                                       patterns=patterns)
        self.replaced = replaced_builtins(project)
        """Built-in actions the project's own actions replace."""

    async def run(self, turn: Turn, frame: FlowFrame, name: str) -> Advance:
        """Run the action ``name`` for the step ``frame`` is at."""
        builtin = None if name in self.replaced else self.builtins.get(name)
        if builtin is not None:
            turn.add(ev.action_executed(name))
            return await builtin(turn, frame)
        if name in self.project.domain.responses:
            await self.responder.utter(turn, name)
            turn.add(ev.action_executed(name))
            return Advance.NEXT
        if name == SESSION_START and session_started_for_latest_message(turn):
            return Advance.NEXT  # one session start per message, as with the built-in
        turn.add(ev.action_executed(name))
        try:
            restarted = await self._run_custom(turn, name)
        except ActionFailedError as exc:
            log.warning("dialogue.action.failed", action=name, error=str(exc))
            host = frame if not frame.is_pattern else turn.stack.top_user_flow()
            if host is not None:
                self.navigator.cancel_flow(turn, host, reason=str(exc))
            self.patterns.internal_error(turn, error_source="action", action_name=name,
                                         error_message=str(exc))
            return Advance.CHANGED
        if restarted:  # the conversation starts afresh, as after the built-in action_restart
            turn.stack.frames = []
            turn.flow_completed = False
            return Advance.WAIT
        return Advance.NEXT

    async def _run_custom(self, turn: Turn, name: str) -> bool:
        """Run a custom action, record its events and send its messages; whether one of its
        events restarted the conversation.

        Raises:
            ActionFailedError: The action could not be run or raised.
        """
        messages, events = await self.runner.run(name, turn, self.project)
        restarted = False
        for message in messages:  # as in Rasa: the action's messages, then its events
            await self.responder.send_custom_message(turn, message)
        for event in events:
            turn.add(event)
            restarted = restarted or event.get("event") == "restart"
        return restarted

    async def start_session(self, turn: Turn, metadata: dict[str, Any] | None = None) -> None:
        """What a new conversation records before its first message: ``action_session_start``
        ran (the project's own when it replaces the built-in, as in Rasa), a session started,
        and the assistant listened.

        As in Rasa, the project's action finds the first message's metadata in the slot
        ``session_started_metadata``. If it fails, the session starts anyway and the failure is
        logged.
        """
        if SESSION_START not in self.replaced:
            start_session(turn)
            return
        if metadata:
            turn.add(ev.slot_set(SESSION_METADATA_SLOT, dict(metadata)))
        turn.add(ev.action_executed(SESSION_START))
        try:
            await self._run_custom(turn, SESSION_START)
        except ActionFailedError as exc:
            log.error("dialogue.session_start.failed", sender=turn.sender_id, error=str(exc))
        if not any(e.get("event") == "session_started" for e in turn.new_events):
            turn.add(lifecycle_event("session_started"))
        if turn.events[-1].get("event") != "action" or \
                turn.events[-1].get("name") != "action_listen":
            turn.add(ev.action_executed("action_listen"))
