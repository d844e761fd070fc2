"""The real ``rasa-webchat`` widget in headless Chromium talks to the Socket.IO channel: a message
typed in the widget gets the agent's filler, then its answer. Screenshots are kept in
``artifacts/browser/``.

Needs Chromium, Playwright's Python package and the widget's bundle; ``.ci/suites/browser.sh``
installs them and sets ``SUBAGENTS_WEBCHAT_JS`` (path of ``rasa-webchat/lib/index.js``) and
``SUBAGENTS_CHROMIUM`` (the browser executable). Without them the test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.responses import FileResponse, HTMLResponse
from starlette.routing import Route
from subagents.channels.socketio import SocketIOInput
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
WEBCHAT_JS = os.environ.get("SUBAGENTS_WEBCHAT_JS", "")
CHROMIUM = os.environ.get("SUBAGENTS_CHROMIUM") or shutil.which("chromium") or ""

pytestmark = pytest.mark.skipif(
    not (WEBCHAT_JS and Path(WEBCHAT_JS).is_file() and CHROMIUM),
    reason="needs SUBAGENTS_WEBCHAT_JS and Chromium: run .ci/suites/browser.sh")

SCRIPT = {
    "command_generator": ["start flow weather_flow"],
    "weather_agent": [
        {"text": "Let me check the forecast for you.",
         "tool_calls": [{"timed_read": {"label": "w", "ms": 1500}}]},
        {"text": "It will be sunny in Lyon tomorrow.",
         "tool_calls": [{"task_completed": {}}]}]}


def page_html(socket_url: str) -> str:
    settings = {"selector": "#webchat", "initPayload": None, "socketUrl": socket_url,
                "socketPath": "/socket.io/", "customData": {"language": "en"},
                "title": "Weather", "embedded": True, "showMessageDate": False,
                "params": {"storage": "session"}}
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>widget test</title>
<style>body {{ margin: 0; font-family: sans-serif; }}</style></head>
<body><div id="webchat"></div><script src="/webchat.js"></script>
<script>WebChat.default({json.dumps(settings)}, null);</script></body></html>"""


async def bot_texts(page: Any) -> list[str]:
    texts = await page.locator(".rw-response").all_inner_texts()
    return [t.strip() for t in texts]


async def test_the_widget_shows_the_filler_then_the_answer(tmp_path, tools_url):
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root = write_project(tmp_path / "assistant", tools_url)
    channel = SocketIOInput(session_persistence=True, metadata_key="customData",
                            cors_allowed_origins="*")
    async with FakeModelServer(SCRIPT) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant, channels=[channel])) as api:
        site = Starlette(routes=[
            Route("/", lambda _: HTMLResponse(page_html(api))),
            Route("/webchat.js", lambda _: FileResponse(WEBCHAT_JS,
                                                        media_type="text/javascript"))])
        async with serve_app(site) as page_url, async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                               args=["--no-sandbox", "--disable-gpu"])
            try:
                page = await browser.new_page(viewport={"width": 480, "height": 420})
                with anyio.fail_after(60):
                    await page.goto(page_url, wait_until="load")
                    box = page.locator(".rw-new-message")
                    await box.wait_for(state="visible")
                    await box.fill("What's the weather tomorrow?")
                    await box.press("Enter")
                    await page.get_by_text("Let me check the forecast for you.").wait_for()
                    await page.screenshot(path=str(ARTIFACTS / "1-filler.png"), full_page=True)
                    await page.get_by_text("It will be sunny in Lyon tomorrow.").wait_for()
                    await page.get_by_text("Is there anything else I can help").wait_for()
                    await page.screenshot(path=str(ARTIFACTS / "2-answer.png"), full_page=True)
                texts = await bot_texts(page)
                users = await page.locator(".rw-client").all_inner_texts()
            finally:
                await browser.close()
    assert [t.strip() for t in users] == ["What's the weather tomorrow?"]
    assert texts == ["Let me check the forecast for you.", "It will be sunny in Lyon tomorrow.",
                     "Anything else about the weather?",
                     "Is there anything else I can help you with?"]
    fake.assert_done()
