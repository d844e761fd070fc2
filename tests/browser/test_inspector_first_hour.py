"""What a new user saw in the inspector, checked in headless Chromium (screenshots in
``artifacts/browser/``): the recording state is known before the first message, slot names wrap
only after an underscore, the built-in slots hide behind a toggle (and a project without slots of
its own says so), the command generator's step is on the timeline, and in a replay what the test
expects after a message stays beside the chat once it is sent.
"""

from __future__ import annotations

import anyio
from subagents.server.app import create_app
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_app

from tests.browser.test_inspector_page import (
    ARTIFACTS,
    BOOKING,
    NEEDS_BROWSER,
    REPLAY,
    SCRIPT,
    browse,
    say,
)
from tests.dialogue_harness import assistant_for, write_project

pytestmark = NEEDS_BROWSER

WORDS_UNBROKEN = """() => [...document.querySelectorAll('#slots tbody tr:not([hidden]) th')]
    .filter((th) => th.offsetParent !== null)
    .flatMap((th) => [...th.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE))
    .filter((node) => { const range = document.createRange(); range.selectNodeContents(node);
                        return range.getClientRects().length > 1; })
    .map((node) => node.textContent)"""
"""The parts of slot names (between underscores) that the browser broke over two lines."""


async def test_slots_timeline_and_recording_state(tmp_path, tools_url):
    root = write_project(tmp_path / "assistant", tools_url,
                         {"sub_agents/booking/config.yml": BOOKING})
    async with FakeModelServer(SCRIPT) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as api, browse(api, width=360) as page:
        with anyio.fail_after(90):
            await page.locator('#recording-state[data-recording="off"]').wait_for()
            await say(page, "A table please", 1)
            # the project's own slots show; the built-in ones only on request
            own = page.locator('#slots tbody tr[data-internal="false"]')
            internal = page.locator('#slots tbody tr[data-internal="true"]')
            assert await own.count() == 3
            assert await internal.count() > 5
            assert await internal.first.is_hidden()
            assert await page.locator("#slots-note").is_hidden()
            await page.locator("#show-internal").check()
            long_name = page.locator(
                '#slots tr[data-slot="continue_interrupted_flow_confirmation"]')
            await long_name.wait_for(state="visible")
            await page.screenshot(path=str(ARTIFACTS / "inspector-slots-360px.png"),
                                  full_page=True)
            assert await long_name.locator("th wbr").count() == 3
            assert await page.evaluate(WORDS_UNBROKEN) == []
            # the command generator's step comes before the agent's run
            commands = page.locator('#timeline [data-kind="command_generation"]')
            assert "StartFlow(flow='booking_flow')" in await commands.inner_text()
            agent_run = page.locator('#timeline .run[data-agent="booking_agent"]')
            assert int(await commands.get_attribute("data-seq")) < \
                int(await agent_run.get_attribute("data-seq"))


NO_SLOTS = {"data/domain.yml": """
    responses:
      utter_hours: [{text: "We are open 9 to 5."}]
    """}


async def test_a_project_without_slots_of_its_own_says_so(tmp_path, tools_url):
    root = write_project(tmp_path / "assistant", tools_url, {
        **NO_SLOTS, "data/flows.yml": """
            flows:
              opening_hours:
                description: Tell the opening hours.
                steps:
                  - action: utter_hours
            """, "sub_agents/weather/config.yml": None, "actions/__init__.py": None,
        "actions/lookup.py": None})
    script = {"command_generator": ["start flow opening_hours"]}
    async with FakeModelServer(script) as fake, assistant_for(root, fake) as assistant, \
            serve_app(create_app(assistant)) as api, browse(api) as page:
        with anyio.fail_after(60):
            await say(page, "When are you open?", 1)
            await page.locator("#slots-note").wait_for(state="visible")
            await page.screenshot(path=str(ARTIFACTS / "inspector-no-own-slots.png"),
                                  full_page=True)
            assert "no slots of its own" in await page.locator("#slots-note").inner_text()
            assert int(await page.locator("#internal-count").inner_text()) > 0


async def test_a_replay_keeps_what_the_test_expects_after_the_sent_message(tmp_path, tools_url):
    from subagents.cli.inspector_replay import load_case, replay_app

    root = write_project(tmp_path / "assistant", tools_url,
                         {"sub_agents/booking/config.yml": BOOKING,
                          "tests/e2e/replay.yml": REPLAY})
    case = load_case(f"{root}/tests/e2e/replay.yml::book_in_lyon", root)
    async with replay_app(case, root) as app, serve_app(app) as api, browse(api) as page:
        with anyio.fail_after(90):
            button = page.locator("#replay-send")
            await button.wait_for(state="visible")
            assert "Let me look at the free tables." in \
                await page.locator("#replay-expect").inner_text()
            await button.click()
            await page.locator('body[data-turns="1"]').wait_for(state="attached")
            sent = await page.locator("#replay-sent").inner_text()
            assert sent.startswith('After "A table please" the test expects:')
            assert "Let me look at the free tables. / Which city?" in sent
            assert "Booked in Lyon." in await page.locator("#replay-expect").inner_text()
            assert await page.locator('#timeline [data-kind="command_generation"]').count() == 1
            await page.screenshot(path=str(ARTIFACTS / "inspector-replay-expects.png"),
                                  full_page=True)
