"""The inspector page in headless Chromium, driven by keyboard alone: a message typed in the
page shows the agent's filler before its tool result, the tool call with its arguments in the
timeline, the agent waiting then completed on the stack, and the slot it set; the page fits
360 px and passes axe-core's checks. Screenshots are kept in ``artifacts/browser/``.

Needs Chromium and Playwright's Python package (``SUBAGENTS_CHROMIUM`` or ``chromium`` on the
path) and, for the accessibility check, axe-core's ``axe.min.js`` (``SUBAGENTS_AXE_JS``);
``.ci/suites/browser.sh`` provides them. Without them the tests are skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.dialogue_harness import assistant_for, write_project

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
CHROMIUM = os.environ.get("SUBAGENTS_CHROMIUM") or shutil.which("chromium") or ""
AXE_JS = os.environ.get("SUBAGENTS_AXE_JS", "")
HAS_AXE = bool(AXE_JS) and Path(AXE_JS).is_file()

NEEDS_BROWSER = pytest.mark.skipif(
    not CHROMIUM or importlib.util.find_spec("playwright") is None,
    reason="needs Chromium and Playwright: run .ci/suites/browser.sh")
"""Skips a browser test unless both Chromium and Playwright's package are present."""
pytestmark = NEEDS_BROWSER

BOOKING = """
    agent: {name: booking_agent, description: Books a table.}
    configuration: {include_date_time: false}
    connections:
      mcp_servers: [{name: tools, include_tools: [echo, timed_read]}]
    """
SCRIPT = {
    "command_generator": ["start flow booking_flow", ""],
    "booking_agent": [
        {"text": "Let me look at the free tables.",
         "tool_calls": [{"timed_read": {"label": "tables", "ms": 1500}}]},
        "Which city?",
        {"tool_calls": [{"set_slot_city": {"slot_value": "Lyon"}}]}]}


@contextlib.asynccontextmanager
async def browse(api: str, width: int = 1280, path: str = "/inspect") -> AsyncIterator[Any]:
    """Chromium on ``api``'s inspector page; no request may leave ``api`` (a file the page
    itself makes for download is a ``blob:`` URL of ``api``)."""
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                           args=["--no-sandbox", "--disable-gpu"])
        try:
            page = await browser.new_page(viewport={"width": width, "height": 900},
                                          accept_downloads=True)
            external: list[str] = []
            page.on("request", lambda r: external.append(r.url)
                    if not r.url.startswith((api, f"blob:{api}")) else None)
            await page.goto(f"{api}{path}", wait_until="load")
            yield page
            assert external == []  # the page asks nothing of any other origin
        finally:
            await browser.close()


@contextlib.asynccontextmanager
async def inspector(tmp_path: Path, tools_url: str, script: dict[str, Any],
                    width: int = 1280) -> AsyncIterator[tuple[Any, FakeModelServer]]:
    root = write_project(tmp_path / "assistant", tools_url,
                         {"sub_agents/booking/config.yml": BOOKING})
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as api, browse(api, width) as page:
        yield page, fake


async def say(page: Any, text: str, turn: int) -> None:
    """Type a message by keyboard alone: skip link, then the message box, then Enter."""
    if await page.evaluate("document.activeElement.id") != "message":
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.className") == "skip", \
            await page.evaluate("document.activeElement.outerHTML")
        await page.keyboard.press("Enter")
        assert await page.evaluate("document.activeElement.id") == "message"
    await page.keyboard.type(text)
    await page.keyboard.press("Enter")
    await page.locator(f'body[data-turns="{turn}"]').wait_for(state="attached")


async def seq(locator: Any) -> int:
    return int(await locator.get_attribute("data-seq"))


async def test_a_turn_shows_filler_tool_call_stack_and_slots(tmp_path, tools_url):
    async with inspector(tmp_path, tools_url, SCRIPT) as (page, fake):
        with anyio.fail_after(90):
            await page.locator("body").focus()
            await say(page, "A table please", 1)
            await page.screenshot(path=str(ARTIFACTS / "inspector-1-turn.png"), full_page=True)
            filler = page.locator(".msg.bot", has_text="Let me look at the free tables.")
            call = page.locator('.call[data-tool="timed_read"]')
            assert await seq(filler) < await seq(call)  # the filler came before the result
            assert '"label": "tables"' in await call.locator(".arguments").inner_text()
            assert "alone" in await call.inner_text()
            assert await page.locator('.text-out[data-kind="filler"]').count() == 1
            assert await page.locator('.text-out[data-kind="question"]').count() == 1
            waiting = page.locator('#stack li[data-kind="agent"][data-agent="booking_agent"]')
            assert await waiting.get_attribute("data-state") == "waiting_for_input"
            assert "waiting for the user" in await waiting.inner_text()
            assert await page.locator('#slots tr[data-changed="true"]').count() == 0

            await say(page, "Lyon", 2)
            await page.screenshot(path=str(ARTIFACTS / "inspector-2-completed.png"),
                                  full_page=True)
            agent = page.locator('#agents li[data-agent="booking_agent"]')
            assert await agent.get_attribute("data-state") == "completed"
            assert await page.locator('#stack li[data-kind="agent"]').count() == 0
            city = page.locator('#slots tr[data-slot="city"]')
            assert await city.get_attribute("data-changed") == "true"
            assert "Lyon" in await city.inner_text()
            assert await page.locator(".msg.bot", has_text="Booked in Lyon.").count() == 1
            assert "agent_completed" in await page.locator("#events").inner_text()
            runs = page.locator('.run[data-agent="booking_agent"]')
            assert await runs.count() == 2  # one per turn, each with its own steps and exit
            assert "exit: input_required" in await runs.nth(0).locator(".exit").inner_text()
            second = runs.nth(1)
            assert "exit: completed" in await second.locator(".exit").inner_text()
            assert await second.locator('.call[data-tool="set_slot_city"]').count() == 1
    fake.assert_done()


async def test_new_conversation_by_keyboard(tmp_path, tools_url):
    script = {"command_generator": ["start flow opening_hours"]}
    async with inspector(tmp_path, tools_url, script) as (page, fake):
        with anyio.fail_after(60):
            await say(page, "When are you open?", 1)
            await page.locator(".msg.bot", has_text="We are open 9 to 5.").wait_for()
            first = await page.locator("#sender").inner_text()
            await page.locator("#new-conversation").focus()
            await page.keyboard.press("Enter")
            assert await page.locator("#sender").inner_text() != first
            assert await page.locator(".msg").count() == 0
            assert await page.evaluate("document.activeElement.id") == "message"
    fake.assert_done()


async def test_the_page_fits_360_pixels(tmp_path, tools_url):
    async with inspector(tmp_path, tools_url, SCRIPT, width=360) as (page, _):
        with anyio.fail_after(90):
            await say(page, "A table please", 1)
            await page.locator("#save-test").focus()  # the save panel must fit too
            await page.keyboard.press("Enter")
            await page.locator("#save:not([hidden])").wait_for()
            await page.screenshot(path=str(ARTIFACTS / "inspector-360px.png"), full_page=True)
            width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 360


@pytest.mark.skipif(not HAS_AXE,
                    reason="needs axe-core (SUBAGENTS_AXE_JS): run .ci/suites/browser.sh")
async def test_the_page_passes_axe(tmp_path, tools_url):
    async with inspector(tmp_path, tools_url, SCRIPT) as (page, _):
        with anyio.fail_after(90):
            await say(page, "A table please", 1)
            await page.locator('.call[data-tool="timed_read"] details, .step details').first \
                .wait_for(state="attached")
            result = await axe_violations(page)
    assert result == []


async def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's WCAG 2.1 AA and best-practice violations on the page as it is now.

    axe is evaluated through the DevTools protocol: the page's CSP rightly refuses a script
    tag it does not know.
    """
    await page.evaluate(await anyio.Path(AXE_JS).read_text(encoding="utf-8"))
    return list(await page.evaluate("""async () => {
        const r = await axe.run(document, {runOnly: {type: 'tag',
            values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}});
        return r.violations.map(v => ({id: v.id, nodes: v.nodes.map(n => n.html)}));
    }"""))


async def test_the_page_runs_no_script_but_its_own(tmp_path, tools_url):
    script = {"command_generator": ["start flow opening_hours"]}
    async with inspector(tmp_path, tools_url, script) as (page, _):
        with anyio.fail_after(60):
            await say(page, "When are you open?", 1)
            blocked = await page.evaluate("""() => new Promise((resolve) => {
                document.addEventListener('securitypolicyviolation',
                    (e) => resolve(e.violatedDirective), {once: true});
                const tag = document.createElement('script');
                tag.textContent = 'window.injected = true';
                document.body.append(tag);  // an allowed inline script runs right here
                if (window.injected) resolve('it ran');
            })""")
            assert blocked.startswith("script-src")
            assert await page.evaluate("window.injected === undefined")


REPLAY = """
test_cases:
  - test_case: book_in_lyon
    llm_script:
      command_generator: ["start flow booking_flow", ""]
      booking_agent:
        - text: "Let me look at the free tables."
          tool_calls: [{timed_read: {label: tables, ms: 200}}]
        - "Which city?"
        - tool_calls: [{set_slot_city: {slot_value: Lyon}}]
    steps:
      - user: "A table please"
      - bot: "Let me look at the free tables."
      - bot: "Which city?"
      - user: "Lyon"
      - bot: "Booked in Lyon."
"""


async def test_a_replay_is_stepped_through_by_keyboard(tmp_path, tools_url):
    from subagents.cli.inspector_replay import load_case, replay_app

    root = write_project(tmp_path / "assistant", tools_url,
                         {"sub_agents/booking/config.yml": BOOKING,
                          "tests/e2e/replay.yml": REPLAY})
    case = load_case(f"{root}/tests/e2e/replay.yml::book_in_lyon", root)
    async with replay_app(case, root) as app, serve_app(app) as api, browse(api) as page:
        with anyio.fail_after(90):
            button = page.locator("#replay-send")
            await button.wait_for(state="visible")
            assert await page.locator("#new-conversation").is_hidden()
            assert "A table please" in await page.locator("#replay-next").inner_text()
            for turn in (1, 2):
                await button.focus()
                await page.keyboard.press("Enter")
                await page.locator(f'body[data-turns="{turn}"]').wait_for(state="attached")
            await page.screenshot(path=str(ARTIFACTS / "inspector-replay.png"), full_page=True)
            assert await page.locator(".msg.bot", has_text="Booked in Lyon.").count() == 1
            agent = page.locator('#agents li[data-agent="booking_agent"]')
            assert await agent.get_attribute("data-state") == "completed"
            assert await button.is_disabled()
