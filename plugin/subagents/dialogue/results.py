"""What running one step of the dialogue means for the executor's loop."""

from __future__ import annotations

from enum import Enum


class StepResult(Enum):
    """The result of running the frame on top of the stack."""

    NEXT = "next"
    """The step is done; the flow moves on to its next step."""
    CHANGED = "changed"
    """The stack changed (a frame was pushed, removed or moved); look at the top again."""
    WAIT = "wait"
    """The assistant waits for the user; the turn ends."""
