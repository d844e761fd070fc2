"""How the exporter turns a flow tool step's recorded call into a ``tool_script`` entry."""

from __future__ import annotations

from typing import Any

from subagents.recording import turn as recording
from subagents.recording.export import build_fixture


class _Listed:
    """A tool as an MCP server lists it (what a flow tool step passes)."""

    server = "clinic"
    name = "list_doctors"
    description = "The doctors."
    input_schema = {"type": "object", "properties": {"day": {"type": "string"}}}


def _exported(result: Any) -> dict[str, Any]:
    turn = recording.TurnRecording()
    turn.record_tool_call(_Listed(), {"day": "Mon"}, result,
                          flow_step={"flow_id": "doctors", "step_id": "call"})
    events = [{"event": "user", "text": "doctors?"},
              {"event": "action", "name": "action_listen", "metadata": turn.metadata(None)}]
    (entry,) = build_fixture("c", events)["test_cases"][0]["tool_script"]["clinic"]
    return dict(entry)


def test_a_call_result_keeps_its_texts_and_structured_content():
    entry = _exported({"content": [{"type": "text", "text": "two"},
                                   {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                                   {"type": "text", "text": "doctors"}],
                       "structuredContent": {"doctors": ["Patel", "Okafor"]},
                       "isError": False, "meta": None})
    assert entry == {"tool": "list_doctors", "arguments": {"day": "Mon"},
                     "result": "two\ndoctors",
                     "structured_content": {"doctors": ["Patel", "Okafor"]},
                     "description": "The doctors.", "input_schema": _Listed.input_schema}


def test_a_result_the_tool_marked_as_an_error_replays_as_an_error():
    entry = _exported({"content": [{"type": "text", "text": "roster locked"}],
                       "structuredContent": None, "isError": True, "meta": None})
    assert (entry["result"], entry["is_error"]) == ("roster locked", True)
    assert "structured_content" not in entry


def test_a_call_that_raised_replays_as_an_error():
    entry = _exported({"is_error": True, "error_message": "the MCP tool step failed: Timeout"})
    assert (entry["result"], entry["is_error"]) == ("the MCP tool step failed: Timeout", True)
