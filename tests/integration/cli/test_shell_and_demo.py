"""The shell driven through a pseudo-terminal, and `subagents demo`."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from subagents.testing import FakeModelServer

REPO = Path(__file__).resolve().parents[3]


def shell_project(root: Path, fake: FakeModelServer) -> Path:
    files = {
        "endpoints.yml": f"""
            model_groups:
              - id: understanding
                models: [{{model: fake, api_base: "{fake.base_url('command_generator')}"}}]
              - id: agents
                models: [{{model: fake, api_base: "{fake.base_url('helper')}"}}]
            tracker_store: {{type: memory}}
            """,
        "config.yml": """
            pipeline:
              - name: CompactLLMCommandGenerator
                llm: {model_group: understanding}
            """,
        "data/flows.yml": """
            flows:
              help_flow:
                description: help
                steps:
                  - call: helper
              hours:
                description: hours
                steps:
                  - action: utter_hours
            """,
        "data/domain.yml": """
            responses:
              utter_hours: [{text: "Open 9 to 5."}]
            """,
        "sub_agents/helper/config.yml": """
            agent: {name: helper, description: Helps.}
            configuration:
              llm: {model_group: agents}
              include_date_time: false
            """,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


class Terminal:
    """A child process on a pseudo-terminal, read without blocking the event loop."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self.buffer = b""
        self.changed = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *args, stdin=self.slave, stdout=self.slave, stderr=self.slave, cwd=REPO,
            env={**(os.environ if env is None else env), "NO_COLOR": "1"})
        os.close(self.slave)
        asyncio.get_running_loop().add_reader(self.master, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 4096)
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.master)
        self.buffer += data
        self.changed.set()

    async def expect(self, text: str, timeout: float = 30) -> str:
        with anyio.fail_after(timeout):
            while text.encode() not in self.buffer:
                self.changed.clear()
                await self.changed.wait()
        return self.buffer.decode(errors="replace")

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    async def close(self) -> int:
        assert self.proc is not None
        with anyio.fail_after(30):
            code = await self.proc.wait()
        asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)
        return code


@pytest.mark.parametrize("quit_with", ["ctrl-d", "ctrl-c"])
async def test_the_shell_streams_replies_restarts_and_exits_cleanly(tmp_path, quit_with):
    script = {"command_generator": ["start flow help_flow", "start flow hours"],
              "helper": ["What do you need help with today?"]}
    async with FakeModelServer(script) as fake:
        root = shell_project(tmp_path / "p", fake)
        term = Terminal()
        await term.start(sys.executable, "-m", "subagents.cli.main", "shell", "--project",
                         str(root), "--debug")
        await term.expect("you> ")
        term.send("I need help\n")
        await term.expect("bot> What do you need help with today?")
        term.send("/restart\n")
        await term.expect("(a new conversation started)")
        term.send("when are you open?\n")
        await term.expect("bot> Open 9 to 5.")
        if quit_with == "ctrl-d":
            term.send("\x04")
        else:
            await term.expect("you> ")
            assert term.proc is not None
            term.proc.send_signal(signal.SIGINT)
        output = await term.expect("bye")
        code = await term.close()
        fake.assert_done()
    assert code == (0 if quit_with == "ctrl-d" else 130)
    assert "Traceback" not in output
    requests = fake.requests_of("helper")
    assert len(requests) == 1
    assert all(r.body.get("stream") for r in requests)  # the shell streams agent text


async def test_the_demo_plays_the_example_conversation(tmp_path):
    db = REPO / ".subagents" / "tracker.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "demo", cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    with anyio.fail_after(120):
        out, err = await proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    filler = text.index("bot> Let me pull Acme's price, news and fundamentals in parallel.")
    tool = text.index("⚙ get_stock_price(symbol=\"ACME\")")
    assert filler < tool
    assert "◆ slot appointment_reference = \"APT-1001\"" in text
    assert "⇄ A2A insurance_checker ← \"It's INS-42\" → completed" in text
    assert "bot> Policy INS-42 covers the visit; the co-payment is 15 EUR." in text
    assert "bot> Your appointment is confirmed. Your reference is APT-1001." in text
    assert db.exists()


async def test_serve_drains_an_in_flight_turn_on_sigterm(tmp_path):
    import socket

    import httpx2

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = {"helper": [{"text": "Finished despite the shutdown.", "delay_ms": 800}]}
    async with FakeModelServer(script) as fake:
        root = shell_project(tmp_path / "p", fake)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root), "--port",
            str(port), stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            with anyio.fail_after(60):
                while True:  # the server announces itself on stderr once it is ready
                    line = await proc.stderr.readline()
                    assert line, "the server exited before it was ready"
                    if b"subagents: serving on" in line:
                        break
                turn = asyncio.ensure_future(client.post(
                    "/webhooks/rest/webhook", json={"sender": "s", "message": "/help_flow"}))
                await fake.wait_for_requests(1, "helper")
                proc.send_signal(signal.SIGTERM)
                response = await turn
                code = await proc.wait()
        fake.assert_done()
    assert response.status_code == 200
    assert response.json()[0]["text"] == "Finished despite the shutdown."
    assert code == 0
