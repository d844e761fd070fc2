"""The inspector's "Save as test" in headless Chromium, by keyboard: a conversation recorded by
``subagents serve --record`` downloads as a conversation test that passes under
``subagents test`` with neither the model nor the MCP servers; a conversation that was not
recorded is refused with the reason and an offer to record; a replayed test case is saved
again from the replay.

Needs what ``test_inspector_page.py`` needs (``.ci/suites/browser.sh`` provides it).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from subagents.recording import turn as recording
from subagents.testing import FakeModelServer
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file
from subagents.testing.mcp_http import serve_app

from tests.browser.test_inspector_page import (
    ARTIFACTS,
    HAS_AXE,
    NEEDS_BROWSER,
    axe_violations,
    browse,
    inspector,
    say,
)
from tests.cli_process import run_cli
from tests.dialogue_harness import write_project
from tests.integration.recording.test_record_replay import SCRIPT as ACME_SCRIPT
from tests.integration.recording.test_record_replay import _example_project
from tests.serve_process import example_insurer, free_port, serve_process

pytestmark = NEEDS_BROWSER

TOKEN = "inspector-save-token"


@pytest.fixture(autouse=True)
def _recording_off():
    recording.reset()
    yield
    recording.reset()


async def save_by_keyboard(page: Any) -> None:
    """Focus "Save as test" and press Enter; the panel takes the focus when it has an answer."""
    await page.locator("#save-test").focus()
    await page.keyboard.press("Enter")
    await page.locator("#save:not([hidden])").wait_for()
    # the panel may still show an earlier answer: wait (bounded) for this answer's focus move
    # (an assertion polls from Playwright's own world: the page's CSP forbids eval)
    from playwright.async_api import expect

    await expect(page.locator("#save-title")).to_be_focused(timeout=30_000)


async def download_test(page: Any, folder: Path) -> Path:
    """Save as test, and keep the file the page downloads in ``folder``."""
    async with page.expect_download() as info:
        await save_by_keyboard(page)
    download = await info.value
    path = folder / download.suggested_filename
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    await download.save_as(path)
    return path


async def test_a_recorded_conversation_is_saved_from_the_page_and_passes_offline(tmp_path):
    project = tmp_path / "assistant"
    project.mkdir()
    e2e = project / "tests" / "e2e"
    async with FakeModelServer(ACME_SCRIPT) as fake, example_insurer() as insurer:
        models = fake.base_url("x").rsplit("/x", 1)[0]
        _example_project(project, models)
        async with serve_process(project, "--record", "--token", TOKEN, env=insurer) as server, \
                browse(server.url, path=f"/inspect?token={TOKEN}") as page:
            with anyio.fail_after(120):
                assert "token" not in page.url  # the page keeps the token to itself
                await page.locator('#recording-state[data-recording="on"]').wait_for()
                await say(page, "How is Acme?", 1)
                await page.locator(".msg.bot", has_text="Acme trades at 182.40 USD.").wait_for()
                saved = await download_test(page, e2e)
                await page.screenshot(path=str(ARTIFACTS / "inspector-save-as-test.png"),
                                      full_page=True)
                panel = page.locator("#save")
                assert await panel.get_attribute("data-outcome") == "saved"
                assert await page.locator("#save-yaml").input_value() == saved.read_text()
                command = await page.locator("#save-command").inner_text()
                assert command == f"subagents test tests/e2e/{saved.name}"
        fake.assert_done()
    sender = saved.stem.removeprefix("recorded_")
    assert saved.name == f"recorded_{sender}.yml"
    text = saved.read_text()
    assert "llm_script:" in text
    assert "tool_script:" in text
    assert "get_stock_price" in text

    # Nothing of the recording's world is left: no model answers, the MCP servers cannot start.
    endpoints = (project / "endpoints.yml").read_text()
    endpoints = endpoints.replace(models, f"http://127.0.0.1:{free_port()}").replace(
        "command: python", "command: no-such-mcp-server-binary")
    (project / "endpoints.yml").write_text(endpoints)
    result = await anyio.to_thread.run_sync(
        lambda: run_cli("test", str(saved), "--project", str(project)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


HOURS = {"command_generator": ["start flow opening_hours"] * 2}


async def test_an_unrecorded_conversation_is_refused_with_the_reason_and_an_offer_to_record(
        tmp_path, tools_url):
    async with inspector(tmp_path, tools_url, HOURS) as (page, fake):
        with anyio.fail_after(120):
            state = page.locator("#recording-state")
            await page.locator('#recording-state[data-recording="off"]').wait_for()
            await say(page, "When are you open?", 1)
            await save_by_keyboard(page)
            panel, record = page.locator("#save"), page.locator("#save-record")
            assert await panel.get_attribute("data-outcome") == "refused"
            assert await panel.get_attribute("data-code") == "export.not_recorded"
            assert "llm_script" in await page.locator("#save-message").inner_text()
            assert await page.locator("#save-download").is_hidden()
            assert await record.inner_text() == "Start a recorded conversation"
            await page.screenshot(path=str(ARTIFACTS / "inspector-save-refused.png"),
                                  full_page=True)
            if HAS_AXE:
                assert await axe_violations(page) == []

            first = await page.locator("#sender").inner_text()
            await page.keyboard.press("Tab")  # from the panel's title to its first control
            assert await page.evaluate("document.activeElement.id") == "save-record"
            await page.keyboard.press("Enter")
            await page.locator('#recording-state[data-recording="on"]').wait_for()
            second = await page.locator("#sender").inner_text()
            assert second != first
            assert await panel.get_attribute("data-outcome") == "recording"
            assert await page.evaluate("document.activeElement.id") == "message"
            await say(page, "When are you open?", 2)
            saved = await download_test(page, tmp_path / "saved")
            assert await panel.get_attribute("data-outcome") == "saved"

            # a fresh conversation with recording off: nothing to save, record it first
            await page.locator("#new-conversation").focus()
            await page.keyboard.press("Enter")
            await page.locator('#recording-state[data-recording="off"]').wait_for()
            await save_by_keyboard(page)
            assert await panel.get_attribute("data-code") == "export.no_conversation"
            assert await record.inner_text() == "Record this conversation"
            await record.focus()
            await page.keyboard.press("Enter")
            await page.locator('#recording-state[data-recording="on"]').wait_for()
            third = await page.locator("#sender").inner_text()
            assert await state.inner_text() == "on"
            # the server keeps the switch with each conversation
            told = await page.evaluate(
                "async senders => Promise.all(senders.map(async s => (await (await fetch("
                "`/conversations/${s}/recording`)).json()).recording))", [third, first])
    fake.assert_done()
    assert saved.name == f"recorded_{second.replace('-', '_')}.yml"
    assert "utter: utter_hours" in saved.read_text()
    assert told == [True, False]


TOOLS_CASE = """
test_cases:
  - test_case: riga_weather
    llm_script:
      command_generator: ["start flow weather_flow"]
      weather_agent:
        - text: "Checking."
          tool_calls: [{echo: {text: Riga}}]
        - text: "It is sunny in Riga."
          tool_calls: [{task_completed: {}}]
    tool_script:
      tools:
        - {tool: echo, arguments: {text: Riga}, result: "Riga"}
    steps:
      - user: "weather?"
      - bot: "Checking."
      - bot: "It is sunny in Riga."
"""

NOWHERE = "http://127.0.0.1:9/mcp"
"""No MCP server listens here: the replay must serve the recorded tool results itself."""


async def test_a_replayed_case_with_recorded_tool_results_is_saved_again(tmp_path):
    from subagents.cli.inspector_replay import load_case, replay_app

    root = write_project(tmp_path / "assistant", NOWHERE,
                         {"tests/e2e/riga.yml": textwrap.dedent(TOOLS_CASE)})
    case = load_case(f"{root}/tests/e2e/riga.yml", root)
    async with replay_app(case, root) as app, serve_app(app) as api, browse(api) as page:
        with anyio.fail_after(90):
            button = page.locator("#replay-send")
            await button.wait_for(state="visible")
            await page.locator('#recording-state[data-recording="on"]').wait_for()
            await button.focus()
            await page.keyboard.press("Enter")
            await page.locator('body[data-turns="1"]').wait_for(state="attached")
            assert await page.locator(".msg.bot", has_text="It is sunny in Riga.").count() == 1
            call = page.locator('.call[data-tool="echo"]')
            assert "result: Riga" in await call.inner_text()
            saved = await download_test(page, root / "tests" / "saved")
    assert not recording.is_recording([])  # the replay recorded its own conversation only
    loaded = load_file(saved, root=root)
    assert not loaded.issues
    [again] = loaded.cases
    assert again.name == "recorded_replay_riga_weather"
    assert again.tool_script == {"tools": [
        {"tool": "echo", "arguments": {"text": "Riga"}, "result": "Riga",
         "description": "echo (recorded)", "input_schema": again.tool_script["tools"][0][
             "input_schema"]}]}
    async with Runner(root, strict=True) as runner:
        result = await runner.run_case(again)
    assert result.passed, result.failures


async def test_the_export_route_wants_the_token_the_page_was_given(tmp_path, tools_url):
    """The page's save request carries the bearer token; without it the route refuses."""
    from subagents.server.app import create_app

    from tests.dialogue_harness import assistant_for

    root = write_project(tmp_path / "assistant", tools_url)
    async with FakeModelServer(HOURS) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant, token=TOKEN)) as api, \
            browse(api, path=f"/inspect?token={TOKEN}") as page, \
            httpx2.AsyncClient(base_url=api, timeout=30) as client:
        with anyio.fail_after(60):
            await page.locator('#recording-state[data-recording="off"]').wait_for()
            await save_by_keyboard(page)
            sender = await page.locator("#sender").inner_text()
            refused = await client.get(f"/conversations/{sender}/test")
        assert await page.locator("#save").get_attribute("data-code") == "export.no_conversation"
    assert refused.status_code == 401
