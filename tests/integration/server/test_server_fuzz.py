"""Every route fuzzed over real HTTP with Hypothesis: whatever a client sends, the answer is
never a 5xx. ``SUBAGENTS_FUZZ_EXAMPLES`` sets the examples per route (CI runs thousands)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app, serve_mcp

from tests.dialogue_harness import assistant_for, write_project
from tests.servers.tools_server import server as tools_server

TOKEN = "fuzz-token"
EXAMPLES = int(os.environ.get("SUBAGENTS_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class _ServerThread:
    """A whole assistant server on its own event loop in a background thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = ""
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test
            self.failure = exc
            self.ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve_mcp(tools_server, "http") as tools_url, FakeModelServer({}) as fake:
            project = write_project(self.root, tools_url)
            async with assistant_for(project, fake) as assistant, \
                    serve_app(create_app(assistant, token=TOKEN, max_body=20_000)) as base:
                self.base = base
                self.ready.set()
                await self._stop.wait()

    def __enter__(self) -> _ServerThread:
        self._thread.start()
        if not self.ready.wait(60) or self.failure is not None:
            raise RuntimeError(f"the fuzz server did not start: {self.failure!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator[httpx2.Client]:
    with _ServerThread(tmp_path_factory.mktemp("fuzz") / "assistant") as server, \
            httpx2.Client(base_url=server.base, timeout=30,
                          headers={"authorization": f"Bearer {TOKEN}"}) as http:
        yield http


text = st.text(st.characters(codec=None), max_size=40) | st.sampled_from(
    ["\ud800", "a\udfffb", "\x00", "é" * 300, "x" * 256, "/SetSlots(city=Oslo)",
     "/start_flow(weather_flow)", "   "])
scalars = (st.none() | st.booleans() | st.floats(allow_nan=True) | text
           | st.integers() | st.integers(min_value=10**300, max_value=10**400))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(text, inner, max_size=4), max_leaves=12)
metadata = json_values | st.dictionaries(
    st.sampled_from(["client_tool_results", "pending_approval", "pending_client_tools",
                     "mocked_datetime", "tenant", "_x"]), json_values, max_size=3)
message_bodies = st.fixed_dictionaries({}, optional={
    "sender": text | json_values, "message": text | json_values, "metadata": metadata})


def encode(body: Any) -> bytes:
    # ensure_ascii keeps lone surrogates as \\ud800 escapes, as a hostile client would send them
    return json.dumps(body, allow_nan=True).encode()


def deep(depth: int) -> bytes:
    return b'{"sender": "d", "message": "m", "metadata": {"a": ' + b"[" * depth + \
        b"]" * depth + b"}}"


raw_bodies = st.binary(max_size=200) | st.sampled_from([
    deep(1000), deep(100_000)[:19_000], b'{"sender": "s", "message": 1' + b"0" * 5000 + b"}",
    b'{"sender": "\\ud800", "message": "hi"}', b'{"sender": "s", "message": "\\udc00"}',
    b'{"sender": "s", "message": "hi", "metadata": {"client_tool_results": 7}}',
    b"\xff\xfe", b"[]", b"null", b"{}"])


def assert_no_server_error(response: httpx2.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:300])


@FUZZ
@given(body=message_bodies, route=st.sampled_from(["/webhooks/rest/webhook",
                                                   "/webhooks/stream/webhook"]))
@example(body={"sender": "s", "message": "hi", "metadata": {"client_tool_results": 7}},
         route="/webhooks/rest/webhook")
@example(body={"sender": "s" * 256, "message": "hi"}, route="/webhooks/rest/webhook")
def test_message_routes_never_answer_5xx(client, body, route):
    response = client.post(route, content=encode(body),
                           headers={"content-type": "application/json"})
    assert_no_server_error(response)
    if route.endswith("stream/webhook") and response.status_code == 200:
        assert b"event: done" in response.content or b"event: error" in response.content


@FUZZ
@given(raw=raw_bodies, route=st.sampled_from([
    "/webhooks/rest/webhook", "/webhooks/stream/webhook",
    "/conversations/s/client_tool_results"]))
def test_raw_bodies_never_answer_5xx(client, raw, route):
    assert_no_server_error(client.post(route, content=raw,
                                       headers={"content-type": "application/json"}))


@FUZZ
@given(sender=text, body=json_values | st.fixed_dictionaries({}, optional={
    "id": text | json_values, "result": json_values, "results": json_values}))
def test_conversation_routes_never_answer_5xx(client, sender, body):
    path = quote(sender.encode("utf-8", "surrogatepass"), safe="")
    assert_no_server_error(client.get(f"/conversations/{path}/tracker"))
    assert_no_server_error(client.post(f"/conversations/{path}/client_tool_results",
                                       content=encode(body),
                                       headers={"content-type": "application/json"}))


@FUZZ
@given(value=st.lists(st.integers(0x20, 0xFF).filter(lambda c: c != 0x7F), max_size=60).map(
    bytes),
       route=st.sampled_from(["/version", "/health", "/conversations/s/tracker"]))
@example(value="Bearer töken".encode("latin-1"), route="/version")
@example(value="Bearer ✓".encode(), route="/version")
def test_any_authorization_header_is_a_clean_401_or_success(client, value, route):
    response = client.get(route, headers={"authorization": value.strip() or b"x"})
    assert_no_server_error(response)
    if route != "/health":
        assert response.status_code in (400, 401)


@pytest.mark.parametrize(("raw", "code"), [
    (b'{"sender": "\\ud800", "message": "hi"}', 400),
    (b'{"sender": "s", "message": "a\\udfffb"}', 400),
    (deep(1000), 400),
    (b'{"sender": "s", "message": "hi", "n": 1' + b"0" * 5000 + b"}", 400),
    (b'{"sender": "s", "message": "hi", "metadata": {"client_tool_results": 7}}', 400),
    (b'{"sender": "s", "message": "hi", "metadata": {"client_tool_results": [{"id": 1}]}}',
     400),
], ids=["surrogate-sender", "surrogate-text", "nested-1000", "int-5000-digits",
        "client-tool-results-7", "client-tool-results-no-result"])
def test_the_reported_bodies_are_clean_400s(client, raw, code):
    response = client.post("/webhooks/rest/webhook", content=raw,
                           headers={"content-type": "application/json"})
    assert response.status_code == code


def test_a_non_ascii_authorization_header_is_a_401(client):
    response = client.get("/version", headers={"authorization": "Bearer töken".encode()})
    assert response.status_code == 401
