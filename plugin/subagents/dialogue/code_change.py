"""Flows that changed under a running conversation, which then runs ``pattern_code_change``.

Every flow frame on the stack keeps the fingerprint of its flow's definition from when it
first ran. When a turn starts and a flow on the stack no longer exists, or its definition
differs from that fingerprint (the project was changed and reloaded), the turn's commands are
replaced by one that runs ``pattern_code_change``: by default it tells the user the assistant
was updated and ends every flow on the stack (``action_clean_stack``), as in Rasa.
"""

from __future__ import annotations

import hashlib
import json

from subagents.config.flows import Flow
from subagents.config.project import Project
from subagents.dialogue.stack import Stack


def flow_fingerprint(flow: Flow) -> str:
    """A short digest of the flow's definition as written (every key, every step)."""
    data = flow.model.model_dump(mode="json", by_alias=True, exclude_none=True)
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class CodeChanges:
    """Compares the flows on a stack with the loaded project's flows.

    Args:
        project: The loaded project.
    """

    def __init__(self, project: Project) -> None:
        self.fingerprints = {flow_id: flow_fingerprint(flow)
                             for flow_id, flow in project.flows.items()}

    def changed(self, stack: Stack) -> list[str]:
        """Ids of the flows on ``stack`` that are gone or whose definition changed."""
        changed: list[str] = []
        for frame in stack.flow_frames():
            current = self.fingerprints.get(frame.flow_id)
            if current is None or frame.flow_hash not in (None, current):
                changed.append(frame.flow_id)
        return list(dict.fromkeys(changed))

    def stamp(self, stack: Stack) -> None:
        """Give every flow frame that has none its flow's fingerprint."""
        for frame in stack.flow_frames():
            if frame.flow_hash is None:
                frame.flow_hash = self.fingerprints.get(frame.flow_id)
