"""Record a conversation through `subagents serve --record`, export it, replay it offline."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
from subagents.testing import FakeModelServer

REPO = Path(__file__).resolve().parents[3]

SCRIPT = {
    "command_generator": ["start flow stock_research"],
    "stock_analyst": [
        {"text": "Let me pull the latest numbers for Acme.",
         "tool_calls": [{"get_stock_price": {"symbol": "ACME"}}]},
        {"text": "Acme trades at 182.40 USD.", "tool_calls": [{"task_completed": {}}]},
    ],
}


def _example_project(root: Path, models: str) -> Path:
    """The example assistant, with its models pointed at ``models`` (a base URL pattern)."""
    for name in ("config.yml", "credentials.yml"):
        shutil.copy(REPO / name, root / name)
    for folder in ("data", "sub_agents"):
        shutil.copytree(REPO / folder, root / folder)
    endpoints = (REPO / "endpoints.yml").read_text()
    endpoints = endpoints.replace(
        "        model: gpt-4.1-mini\n        timeout: 20\n",
        f"        model: fake\n        api_base: \"{models}/stock_analyst/v1\"\n"
        "        timeout: 20\n").replace(
        "        model: gpt-4.1-mini\n        timeout: 15\n",
        f"        model: fake\n        api_base: \"{models}/command_generator/v1\"\n"
        "        timeout: 15\n")
    (root / "endpoints.yml").write_text(endpoints)
    return root


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "subagents.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


async def _serve_and_talk(project: Path, fake: FakeModelServer) -> list[dict]:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "serve", "--record", "--project", str(project),
        "--port", str(port), "--no-model-check", stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            with anyio.fail_after(90):
                while b"subagents: serving on" not in (line := await proc.stderr.readline()):
                    assert line, "the server exited before it was ready"
                answer = await client.post("/webhooks/rest/webhook",
                                           json={"sender": "rec1", "message": "How is Acme?"})
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await proc.wait()
    fake.assert_done()
    return list(answer.json())


async def test_a_served_conversation_is_recorded_exported_and_replays_offline(tmp_path,
                                                                          monkeypatch):
    from subagents.demo.a2a_insurer import build_app
    from subagents.testing.mcp_http import serve_app

    project = tmp_path / "assistant"
    project.mkdir()
    async with FakeModelServer(SCRIPT) as fake, serve_app(build_app()) as insurer:
        monkeypatch.setenv("CLINIC_INSURER_URL", insurer)  # the example's A2A agent
        base = fake.base_url("x").rsplit("/x", 1)[0]
        _example_project(project, base)
        replies = await _serve_and_talk(project, fake)
    monkeypatch.delenv("CLINIC_INSURER_URL")
    assert [r.get("text") for r in replies][:2] == ["Let me pull the latest numbers for Acme.",
                                                    "Acme trades at 182.40 USD."]
    out = project / "tests" / "e2e" / "recorded.yml"
    exported = await anyio.to_thread.run_sync(
        lambda: _cli("test", "export", "rec1", "--project", str(project), "--out", str(out),
                     cwd=tmp_path))
    assert exported.returncode == 0, exported.stderr
    text = out.read_text()
    assert "tool_script:" in text
    assert "get_stock_price" in text
    assert "182.4" in text

    # Nothing of the recording's world is left: no model answers, the MCP servers cannot start.
    endpoints = (project / "endpoints.yml").read_text()
    endpoints = endpoints.replace(base, f"http://127.0.0.1:{_free_port()}").replace(
        "command: python", "command: no-such-mcp-server-binary")
    (project / "endpoints.yml").write_text(endpoints)
    replay = await anyio.to_thread.run_sync(
        lambda: _cli("test", str(out), "--project", str(project), cwd=tmp_path))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "1 passed" in replay.stdout
