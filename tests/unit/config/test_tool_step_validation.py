"""`validate` checks an MCP tool step's tool against its server: the names declared under
`tools:` in endpoints.yml, or (`validate --connect`) the list a real stdio server returns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from subagents.cli.validate_connect import connected_issues
from subagents.config.project import collect_issues

REPO = Path(__file__).resolve().parents[3]
TOOLS_SERVER = REPO / "tests" / "servers" / "tools_server.py"

FLOWS = """
    flows:
      shout:
        description: repeat the name back
        steps:
          - id: the_call
            call: {tool}
            mcp_server: tools
            mapping:
              input:
                - param: text
                  slot: city
              output:
                - slot: city
                  value: result.structuredContent.result
    """


def endpoints(server: str) -> str:
    return f"""
        model_groups:
          - id: agent_llm
            models:
              - provider: openai
                model: gpt-4.1-mini
        mcp_servers:
          - {server}
        """


STDIO = f'{{name: tools, type: stdio, command: python, args: ["{TOOLS_SERVER}"]}}'
DOWN = '{name: tools, type: http, url: "http://127.0.0.1:9/mcp", timeout: 5}'


def project(make_project, tool: str, server: str) -> Path:
    return make_project({"data/flows.yml": FLOWS.format(tool=tool),
                         "endpoints.yml": endpoints(server),
                         "sub_agents/weather/config.yml": None,
                         "sub_agents/booking/config.yml": None})


def test_a_tool_missing_from_the_declared_list_is_an_error_with_the_closest_name(make_project):
    root = project(make_project, "ecko",
                   '{name: tools, type: stdio, command: python, args: [x.py], '
                   'tools: [echo, add]}')
    loaded, issues = collect_issues(root)
    assert loaded is None
    [issue] = [i for i in issues if i.code == "flow.call.unknown_mcp_tool"]
    assert (issue.file, issue.line, issue.key) == ("data/flows.yml", 6,
                                                   "flows.shout.steps[0].call")
    assert issue.hint == "did you mean 'echo'?"


def test_a_declared_tool_passes_and_no_list_means_no_check(make_project):
    root = project(make_project, "echo",
                   '{name: tools, type: stdio, command: python, args: [x.py], tools: [echo]}')
    assert collect_issues(root)[0] is not None
    root = project(make_project, "anything", "{name: tools, type: stdio, command: python, "
                                             "args: [x.py]}")
    assert collect_issues(root)[0] is not None


def test_connect_lists_the_real_servers_tools(make_project):
    loaded, _ = collect_issues(project(make_project, "ecko", STDIO))
    assert loaded is not None
    [issue] = connected_issues(loaded)
    assert (issue.code, issue.severity, issue.line) == ("flow.call.unknown_mcp_tool", "error", 6)
    assert issue.hint == "did you mean 'echo'?"
    loaded, _ = collect_issues(project(make_project, "echo", STDIO))
    assert loaded is not None
    assert connected_issues(loaded) == []


def test_an_unreachable_server_is_a_warning_not_a_failure(make_project):
    loaded, _ = collect_issues(project(make_project, "echo", DOWN))
    assert loaded is not None
    [issue] = connected_issues(loaded)
    assert (issue.code, issue.severity) == ("flow.call.mcp_server_unreachable", "warning")
    assert (issue.file, issue.line) == ("data/flows.yml", 6)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "subagents.cli.main", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_validate_connect_exits_1_on_an_unknown_tool_and_0_when_the_server_is_down(
        make_project):
    root = project(make_project, "ecko", STDIO)
    assert run("validate", "--project", str(root)).returncode == 0
    result = run("validate", "--connect", "--project", str(root))
    assert result.returncode == 1
    assert "data/flows.yml:6: error [flow.call.unknown_mcp_tool]" in result.stderr
    root = project(make_project, "echo", DOWN)
    result = run("validate", "--connect", "--project", str(root))
    assert result.returncode == 0, result.stderr
    assert "[flow.call.mcp_server_unreachable]" in result.stdout
