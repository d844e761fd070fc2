"""Action steps: built-in actions, responses used as actions, and custom actions.

An ``action:`` step names one of three things, looked up in this order: a built-in action
(see :mod:`~subagents.dialogue.builtin_actions`), a response of the domain (``utter_*``), or a
custom action run by :class:`~subagents.dialogue.actions.ActionRunner`. A custom action that
fails cancels the user flow it ran in and runs ``pattern_internal_error``.
"""

from __future__ import annotations

import structlog

from subagents import events as ev
from subagents.config.project import Project
from subagents.dialogue.actions import ActionFailedError, ActionRunner
from subagents.dialogue.builtin_actions import BuiltinActions
from subagents.dialogue.navigation import Navigator
from subagents.dialogue.patterns import Patterns
from subagents.dialogue.responses import Responder
from subagents.dialogue.results import Advance
from subagents.dialogue.stack import FlowFrame
from subagents.dialogue.turn import Turn

log = structlog.get_logger("subagents.dialogue")


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

    async def run(self, turn: Turn, frame: FlowFrame, name: str) -> Advance:
        """Run the action ``name`` for the step ``frame`` is at."""
        builtin = self.builtins.get(name)
        if builtin is not None:
            turn.add(ev.action_executed(name))
            return await builtin(turn, frame)
        if name in self.project.domain.responses:
            await self.responder.utter(turn, name)
            turn.add(ev.action_executed(name))
            return Advance.NEXT
        turn.add(ev.action_executed(name))
        try:
            messages, events = await self.runner.run(name, turn, self.project)
        except ActionFailedError as exc:
            log.warning("dialogue.action.failed", action=name, error=str(exc))
            host = frame if not frame.is_pattern else turn.stack.top_user_flow()
            if host is not None:
                self.navigator.cancel_flow(turn, host, reason=str(exc))
            self.patterns.internal_error(turn, error_source="action", action_name=name,
                                         error_message=str(exc))
            return Advance.CHANGED
        for event in events:
            turn.add(event)
        for message in messages:
            await self.responder.send_custom_message(turn, message)
        return Advance.NEXT
