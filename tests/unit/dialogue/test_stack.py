"""The dialogue stack is stored as plain JSON and loads back with typed frame states."""

from __future__ import annotations

import json

from subagents.dialogue.stack import AgentFrame, FlowFrame, FrameType, Stack
from subagents.types import FrameState


def test_frames_round_trip_through_json_with_their_enums():
    stack = Stack([FlowFrame("book", step_id="s1", frame_type=FrameType.CALL),
                   AgentFrame("book", "s1", "booker", state=FrameState.RESUMING,
                              metadata={"agent_response": "Which day?"})])
    stored = json.loads(json.dumps(stack.to_list()))
    assert stored[0]["frame_type"] == "call"
    assert stored[1]["state"] == "resuming"
    loaded = Stack.from_list(stored)
    flow, agent = loaded.frames
    assert isinstance(flow, FlowFrame)
    assert flow.frame_type is FrameType.CALL
    assert isinstance(agent, AgentFrame)
    assert agent.state is FrameState.RESUMING
    assert loaded.to_list() == stack.to_list()


def test_a_frame_that_no_longer_loads_is_dropped_not_fatal():
    stored = [{"kind": "flow", "flow_id": "book"},
              {"kind": "agent", "flow_id": "book", "step_id": "s1", "agent_id": "booker",
               "state": "no_such_state"},
              {"kind": "flow", "flow_id": "other", "unknown_field": 1}]
    loaded = Stack.from_list(stored)
    assert [f.flow_id for f in loaded.frames] == ["book"]
    assert loaded.active_agent() is None
