"""A served conversation that called the example's A2A agent is recorded, exported both ways
(``subagents test export`` and ``GET /conversations/{sender}/test``) and replays offline."""

from __future__ import annotations

import anyio
import httpx2
from subagents.testing import FakeModelServer

from tests.integration.recording.test_record_replay import _cli, _example_project, _free_port
from tests.serve_process import example_insurer, serve_process

SCRIPT = {"command_generator": ["start flow check_insurance", "continue agent"]}


async def _talk(client: httpx2.AsyncClient, sender: str) -> list[str]:
    texts: list[str] = []
    for message in ("Is a visit covered by my insurance?", "INS-42"):
        answer = await client.post("/webhooks/rest/webhook",
                                   json={"sender": sender, "message": message})
        assert answer.status_code == 200, answer.text
        texts += [str(r.get("text")) for r in answer.json()]
    return texts


async def test_a_conversation_with_an_a2a_agent_is_exported_both_ways_and_replays_offline(
        tmp_path, monkeypatch):
    monkeypatch.delenv("CLINIC_INSURER_URL", raising=False)
    project = tmp_path / "assistant"
    project.mkdir()
    env = {"OPENAI_API_KEY": "unused-by-the-fake-model"}
    async with FakeModelServer(SCRIPT) as fake, example_insurer() as insurer:
        env.update(insurer)
        base = fake.base_url("x").rsplit("/x", 1)[0]
        _example_project(project, base)
        async with serve_process(project, "--record", env=env) as server, \
                httpx2.AsyncClient(base_url=server.url, timeout=60) as client:
            with anyio.fail_after(90):
                texts = await _talk(client, "ins1")
                saved = await client.get("/conversations/ins1/test")
        fake.assert_done()
    assert "Policy INS-42 covers the visit; the co-payment is 15 EUR." in texts
    assert saved.status_code == 200, saved.text
    route_file = project / "tests" / "e2e" / "saved.yml"
    route_file.parent.mkdir(parents=True)
    route_file.write_text(saved.text)
    cli_file = project / "tests" / "e2e" / "exported.yml"
    exported = await anyio.to_thread.run_sync(
        lambda: _cli("test", "export", "ins1", "--project", str(project), "--out",
                     str(cli_file), cwd=tmp_path))
    assert exported.returncode == 0, exported.stderr
    assert cli_file.read_text() == saved.text
    assert "insurance_checker:" in saved.text
    assert "co_payment: 15" in saved.text

    # The model, the MCP servers and the insurer are all gone.
    endpoints = (project / "endpoints.yml").read_text()
    endpoints = endpoints.replace(base, f"http://127.0.0.1:{_free_port()}").replace(
        "command: python", "command: no-such-mcp-server-binary")
    (project / "endpoints.yml").write_text(endpoints)
    for test_file in (route_file, cli_file):
        replay = await anyio.to_thread.run_sync(
            lambda f=test_file: _cli("test", str(f), "--project", str(project), cwd=tmp_path))
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert "1 passed" in replay.stdout
