"""What running one step of the dialogue means for the executor's loop."""

from __future__ import annotations

from enum import Enum


class Advance(Enum):
    """How the flow executor's loop goes on after running the frame on top of the stack (not
    to be confused with an agent step's result, ``subagents.agents.plan.StepResult``)."""

    NEXT = "next"
    """The step is done; the flow moves on to its next step."""
    CHANGED = "changed"
    """The stack changed (a frame was pushed, removed or moved); look at the top again."""
    WAIT = "wait"
    """The assistant waits for the user; the turn ends."""
