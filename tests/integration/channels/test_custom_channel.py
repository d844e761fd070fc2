"""A custom channel class named in credentials.yml (the docs' example) serves its own route."""

from __future__ import annotations

import anyio
import httpx2
from subagents.channels.registry import load_channels
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

CHANNEL = '''
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from subagents.channels import CollectingOutputChannel, InputChannel


class MyChannel(InputChannel):
    name = "mine"

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @classmethod
    def from_credentials(cls, credentials):
        return cls(credentials["greeting"])

    def routes(self, assistant):
        async def webhook(request: Request):
            body = await request.json()
            out = CollectingOutputChannel()
            await assistant.handle_message(body["user"], body["text"], {}, out)
            return JSONResponse({"greeting": self.greeting, "messages": out.messages})
        return [Route(f"{self.url_prefix()}/webhook", webhook, methods=["POST"])]
'''


async def test_a_custom_channel_from_credentials_yml_serves_its_route(tmp_path, tools_url,
                                                                     monkeypatch):
    monkeypatch.setenv("MY_GREETING", "hi there")
    root = write_project(tmp_path / "custom", tools_url, extra={
        "addons/__init__.py": "", "addons/my_channel.py": CHANNEL,
        "credentials.yml": "rest:\naddons.my_channel.MyChannel:\n  greeting: ${MY_GREETING}\n"})
    channels = load_channels(root)
    script = {"command_generator": ["start flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant, channels=channels)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as client:
        with anyio.fail_after(30):
            response = await client.post("/webhooks/mine/webhook",
                                         json={"user": "u1", "text": "hours?"})
    assert response.status_code == 200
    body = response.json()
    assert body["greeting"] == "hi there"
    assert [m["text"] for m in body["messages"]] == [
        "We are open 9 to 5.", "Is there anything else I can help you with?"]
