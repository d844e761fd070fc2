"""Conversation tests of a project that rephrases responses (D17): a case without a
``rephraser`` script gets its responses as written, the run says so once, and ``utter:`` steps
match a response whether or not it was rephrased."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import anyio
from subagents.testing.e2e import Runner
from subagents.testing.fixtures import load_file

from tests.dialogue_harness import write_project

REPHRASING = {
    "data/ready_flows.yml": """
        flows:
          ready_flow:
            description: tells that the order is ready
            steps:
              - action: utter_ready
        """,
    "data/ready.yml": """
        responses:
          utter_ready:
            - text: "Your order {order} is ready."
              metadata: {rephrase: true}
        slots:
          order: {type: text, initial_value: A-7}
        """,
}
CASES = """
test_cases:
  - test_case: as_written_without_a_rephraser_script
    llm_script: {}
    steps:
      - user: /ready_flow
      - utter: utter_ready
      - bot: "Your order A-7 is ready."
  - test_case: also_as_written
    llm_script: {command_generator: []}
    steps:
      - user: /ready_flow
      - bot: "Your order A-7 is ready."
  - test_case: rephrased_with_a_rephraser_script
    llm_script:
      rephraser: ["Good news: A-7 is ready!"]
    steps:
      - user: /ready_flow
      - utter: utter_ready
      - bot: "Good news: A-7 is ready!"
"""


def _project(tmp_path, tools_url):
    endpoints = f"""
        model_groups:
          - id: llm
            models: [{{provider: openai, model: gpt-test}}]
        mcp_servers:
          - name: tools
            type: http
            url: {tools_url}
        nlg: {{type: rephrase}}
        """
    root = write_project(tmp_path / "assistant", tools_url,
                         {**REPHRASING, "endpoints.yml": endpoints})
    cases = root / "tests" / "e2e" / "ready.yml"
    cases.parent.mkdir(parents=True)
    cases.write_text(textwrap.dedent(CASES).lstrip("\n"), encoding="utf-8")
    return root, cases


async def test_a_case_without_a_rephraser_script_gets_responses_as_written(tmp_path, tools_url):
    root, cases = _project(tmp_path, tools_url)
    loaded = load_file(cases, root=root)
    async with Runner(root) as runner:
        with anyio.fail_after(60):
            results = {case.name: await runner.run_case(case) for case in loaded.cases}
        notices = runner.notices
    assert {name: r.failures for name, r in results.items() if not r.passed} == {}
    assert len(notices) == 1
    assert "2 scripted test case(s) have no rephraser script" in notices[0]


async def test_the_cli_prints_the_notice_once(tmp_path, tools_url):
    root, _ = _project(tmp_path, tools_url)
    # async, so that this event loop keeps serving the in-process MCP server meanwhile
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subagents.cli.main", "test", "--project", str(root),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    with anyio.fail_after(120):
        out, _ = await proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, text
    assert text.count("note: the project rephrases responses") == 1
