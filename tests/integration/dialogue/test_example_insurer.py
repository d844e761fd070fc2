"""The example assistant's A2A agent (insurance_checker) against the demo insurer, a real
a2a-sdk server on 127.0.0.1; and what `shell` and `serve --strict-start` say when the insurer is
not running (a plain `serve` starts without it: tests/security/test_degraded_start.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from subagents.demo.a2a_insurer import ASK_NUMBER, build_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import Conversation, assistant_for

REPO = Path(__file__).resolve().parents[3]


async def test_the_insurer_asks_for_the_number_then_answers(monkeypatch):
    script = {"command_generator": ["start flow check_insurance", "continue agent"]}
    async with serve_app(build_app()) as insurer:
        monkeypatch.setenv("CLINIC_INSURER_URL", insurer)
        async with FakeModelServer(script) as fake, assistant_for(REPO, fake) as assistant:
            convo = Conversation(assistant)
            with anyio.fail_after(60):
                first, _ = await convo.say("Does my insurance cover a visit?")
                second, events = await convo.say("The number is ins-42")
            fake.assert_done()
    assert first == [ASK_NUMBER]
    assert second[:3] == ["Checking policy INS-42 with the insurer...",
                          "Policy INS-42 covers the visit; the co-payment is 15 EUR.",
                          "Bring your insurance card to the visit, please."]
    completed = [e for e in events if e.get("event") == "agent_completed"]
    assert [e["agent_id"] for e in completed] == ["insurance_checker"]


@pytest.mark.parametrize("command", [["shell"], ["serve", "--port", "0", "--strict-start"]])
def test_shell_and_strict_serve_without_the_insurer_say_what_to_start(tmp_path, command):
    env = {k: v for k, v in os.environ.items() if k != "CLINIC_INSURER_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "subagents.cli.main", *command, "--no-model-check", "--project",
         str(REPO)], cwd=tmp_path, env={**env, "OPENAI_API_KEY": "sk-test"},
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert result.returncode == 1
    assert "[agent.a2a.card_unreachable]" in result.stderr
    assert "python -m subagents.demo.a2a_insurer --port 8767" in result.stderr
    assert "export CLINIC_INSURER_URL=http://127.0.0.1:8767" in result.stderr
    assert "Traceback" not in result.stderr
