"""Every 4xx the HTTP API answers is JSON with a stable ``code``, and docs/operations.md lists it.

Each bad request goes over real HTTP to the app served by uvicorn; its answer's ``code`` must be
in the documented table with the same status.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx2
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

REPO = Path(__file__).resolve().parents[3]
TOKEN = "t0ps3cret"
AUTH = {"authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}


def documented() -> set[tuple[int, str]]:
    text = (REPO / "docs" / "operations.md").read_text()
    return {(int(status), code) for status, code in
            re.findall(r"^\| (4\d\d) \| `([a-z_.]+)` \|", text, re.M)}


BAD_REQUESTS = [
    ("POST", "/webhooks/rest/webhook", AUTH | JSON, b"{not json", 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON, b"[1, 2]", 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON, b"[" * 70 + b"]" * 70, 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON, b'{"sender": "", "message": "hi"}', 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON, b'{"sender": "u", "message": 3}', 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON,
     b'{"sender": "u", "message": "hi", "metadata": 3}', 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON,
     b'{"sender": "' + b"x" * 300 + b'", "message": "hi"}', 400),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON,
     b'{"sender": "u", "message": "hi", "message_id": ""}', 400),
    ("POST", "/conversations/u/client_tool_results", AUTH | JSON, b'{"x": 1}', 400),
    ("POST", "/webhooks/rest/webhook", JSON, b'{"sender": "u", "message": "hi"}', 401),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON | {"origin": "https://evil.example"},
     b'{"sender": "u", "message": "hi"}', 403),
    ("GET", "/no/such/route", AUTH, b"", 404),
    ("GET", "/conversations/nobody/test", AUTH, b"", 404),
    ("DELETE", "/webhooks/rest/webhook", AUTH, b"", 405),
    ("POST", "/webhooks/rest/webhook", AUTH | JSON,
     b'{"sender": "u", "message": "' + b"x" * 20_000 + b'"}', 413),
]


@pytest.fixture
async def client(tmp_path, tools_url):
    root = write_project(tmp_path / "assistant", tools_url)
    async with FakeModelServer({}) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant, token=TOKEN, max_body=10_000)) as base, \
            httpx2.AsyncClient(base_url=base, timeout=30) as http:
        yield http


async def test_every_4xx_has_a_documented_code(client):
    table = documented()
    seen = set()
    for method, path, headers, body, status in BAD_REQUESTS:
        response = await client.request(method, path, headers=headers, content=body)
        assert response.status_code == status, (path, body[:60], response.text)
        answer = response.json()
        assert isinstance(answer.get("error"), str), answer
        assert (status, answer.get("code")) in table, (status, answer)
        seen.add(answer["code"])
    assert len(seen) >= 14
