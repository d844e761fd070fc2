"""How a remote A2A agent's answer is recorded: as an `a2a_script` reply that replays the same."""

from __future__ import annotations

import pytest

pytest.importorskip("a2a")

from a2a.helpers import new_data_part
from a2a.types import Artifact, Part
from subagents.agents.a2a_agent import _Reply, _script_artifact, _script_reply
from subagents.recording import turn as recording


def _reply(state: str, texts: list[str], artifacts: list[Artifact]) -> _Reply:
    reply = _Reply()
    reply.events, reply.state = 1, state
    for text in texts:
        reply.add_text(text)
    for artifact in artifacts:
        reply.artifacts.append(_script_artifact(artifact))
        reply.structured += [{"type": "data", "result": {"n": 1}}
                             for part in artifact.parts if part.HasField("data")]
    return reply


def test_an_artifact_with_one_text_and_data_part_is_kept_whole():
    artifact = Artifact(name="cover", parts=[Part(text="A"), new_data_part({"n": 1})])
    entry = _script_reply(_reply("TASK_STATE_COMPLETED", ["A", "B"], [artifact]),
                          [{"text": "wait"}])
    assert entry == {"state": "completed", "text": "B", "working": ["wait"],
                     "artifacts": [{"name": "cover", "text": "A", "data": {"n": 1}}]}


def test_texts_that_would_replay_in_another_order_become_one_status_text():
    artifact = Artifact(parts=[Part(text="A"), Part(text="C"), new_data_part({"n": 1})])
    entry = _script_reply(_reply("TASK_STATE_COMPLETED", ["B", "A", "C"], [artifact]), [])
    assert entry == {"state": "completed", "text": "B\nA\nC", "artifacts": [{"data": {"n": 1}}]}


def test_a_task_that_never_finished_replays_as_working():
    entry = _script_reply(_reply("POLLING_TIMED_OUT", [], []), [])
    assert entry == {"state": "working"}


def test_a_recorded_a2a_answer_is_redacted_like_a_tool_result(monkeypatch):
    monkeypatch.setenv("INSURER_API_KEY", "sk-insurer-123456")
    recorder = recording.TurnRecording()
    recorder.record_a2a_call("insurer", {"message": "key sk-insurer-123456",
                                         "artifacts": [{"data": {"token": "t1"}}]})
    entries = recorder.metadata(None)[recording.METADATA_KEY]
    assert entries == [{"kind": "a2a", "agent": "insurer", "reply": {
        "message": "key [redacted]", "artifacts": [{"data": {"token": "[redacted]"}}]}}]
