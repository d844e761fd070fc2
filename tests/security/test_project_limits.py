"""Issue 30, item 11 (its response-template and MCP ``cwd`` parts): a response template cannot
expand without bound whatever the user's slot values are, and a stdio MCP server cannot be
started in a folder outside the project."""

from __future__ import annotations

import textwrap

from subagents.testing import FakeModelServer

from tests.cli_process import run_cli
from tests.security.served import served, served_project

STARS = {
    "data/flows.yml": """
        flows:
          stars_flow:
            description: draws stars
            steps:
              - action: utter_stars
              - action: utter_echo
        """,
    "data/domain.yml": """
        slots:
          stars: {type: float}
          note: {type: text}
        responses:
          utter_stars:
            - text: "{{ '*' * (stars | int) }}"
              metadata: {template: jinja}
          utter_echo:
            - text: "NOTE{note}{note}{note}{note}{note}{note}{note}{note}{note}{note}"
        """,
}


async def test_a_response_template_cannot_expand_without_bound(tmp_path, tools_url):
    note = "n" * 500_000  # what a user can type: the REST body cap is 1 MB
    script = {"command_generator": [
        f"start flow stars_flow\nset slot stars 200000000\nset slot note {note}"]}
    async with FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, files=STARS)
        async with served(project) as (_, client):
            reply = await client.post("/webhooks/rest/webhook",
                                      json={"sender": "stars", "message": "stars please"})
            tracker = (await client.get("/conversations/stars/tracker")).json()
    assert reply.status_code == 200, reply.text[:300]
    texts = [m.get("text", "") for m in reply.json()]
    assert tracker["slots"]["stars"] == 200_000_000  # the slots were set as asked
    assert len(tracker["slots"]["note"]) == 500_000
    assert texts[:2]
    assert all(len(text) <= 100_000 for text in texts), [len(t) for t in texts]


def test_a_stdio_mcp_server_cannot_start_outside_the_project(tmp_path):
    root = tmp_path / "p"
    (root / "data").mkdir(parents=True)
    (root / "config.yml").write_text("assistant_id: a\n", encoding="utf-8")
    (root / "data" / "flows.yml").write_text("flows: {}\n", encoding="utf-8")
    (root / "endpoints.yml").write_text(textwrap.dedent("""
        mcp_servers:
          - name: inside
            type: stdio
            command: python
            cwd: tools
          - name: escape
            type: stdio
            command: python
            cwd: ../../
          - name: absolute
            type: stdio
            command: python
            cwd: /etc
        """), encoding="utf-8")
    (root / "tools").mkdir()
    done = run_cli("validate", "--project", str(root))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert out.count("[endpoints.mcp_servers.cwd_outside_project]") == 2, out
    assert "mcp_servers[1].cwd" in out
    assert "mcp_servers[2].cwd" in out
    assert "mcp_servers[0].cwd" not in out


def test_jinja_refuses_what_would_grow_huge_and_keeps_the_template():
    from subagents.templating import MAX_RENDERED_CHARS, render_jinja

    n = {"n": 10**9, "width": 10**9}
    growing = ["{{ 'ab' * n }}", "{{ [1] * n }}", "{{ 7 ** n }}", "{{ '%*d' % (width, 1) }}",
               "{{ 'x' | center(width) }}",
               "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}"
               "{% endfor %}"]
    for template in growing:
        assert render_jinja(template, n) == template
    assert render_jinja("{{ 'ab' * 3 }} {{ 2 ** 10 }}", n) == "ababab 1024"
    longest = "{{ 'a' * " + str(MAX_RENDERED_CHARS) + " }}"
    assert len(render_jinja(longest, n)) == MAX_RENDERED_CHARS
