"""``subagents validate`` catches what would otherwise only fail when the assistant starts.

Each check runs the real command in a child process on a project made by ``subagents init``.
A missing extra is simulated without uninstalling anything: the child gets
``tests/fixtures/without_extras`` on ``PYTHONPATH``, whose ``sitecustomize`` makes the modules
named in ``SUBAGENTS_TEST_HIDE_MODULES`` unfindable and unimportable for that process only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli.test_cli_first_run import cli

REPO = Path(__file__).resolve().parents[3]
HIDER = REPO / "tests" / "fixtures" / "without_extras"


def without(*modules: str, **extra_env: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SUBAGENTS_METRICS", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")}
    env["PYTHONPATH"] = os.pathsep.join([str(HIDER), *filter(None, [env.get("PYTHONPATH")])])
    env["SUBAGENTS_TEST_HIDE_MODULES"] = ",".join(modules)
    env.update(extra_env)
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    assert cli("init", "p", cwd=tmp_path).returncode == 0
    return tmp_path / "p"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_module_hider_hides_only_what_it_is_told(project):
    check = [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('redis'))"]
    hidden = subprocess.run(check, env=without("redis"), capture_output=True, text=True,
                            check=False)
    assert "ModuleNotFoundError" in hidden.stderr
    shown = subprocess.run(check, env=without("asyncpg"), capture_output=True, text=True,
                           check=False)
    assert "ModuleSpec" in shown.stdout
    assert cli("validate", "--project", str(project), cwd=project,
               env=without("a2a", "asyncpg", "redis", "socketio")).returncode == 0


def test_an_a2a_agent_without_the_a2a_extra_is_an_error(tmp_path):
    result = cli("validate", "--project", str(REPO), cwd=tmp_path, env=without("a2a"))
    assert result.returncode == 1
    line = next(x for x in result.stderr.splitlines() if "[project.extra_missing]" in x)
    assert line.startswith("sub_agents/insurance_checker/config.yml:")
    assert "pip install 'subagents[a2a]'" in line


@pytest.mark.parametrize(("section", "module", "extra"), [
    ("tracker_store:\n  type: sql\n  url: postgresql+asyncpg://u:${PG_PW}@db/a\n", "asyncpg",
     "postgres"),
    ("lock_store:\n  type: redis\n  url: redis://cache:6379/0\n", "redis", "redis"),
])
def test_a_store_without_its_extra_is_an_error(project, section, module, extra):
    endpoints = project / "endpoints.yml"
    text = endpoints.read_text()
    text = text[:text.index("tracker_store:")] if "tracker_store" in section else text
    endpoints.write_text(text + section)
    result = cli("validate", cwd=project, env=without(module))
    assert result.returncode == 1
    assert "[project.extra_missing]" in result.stderr
    assert f"pip install 'subagents[{extra}]'" in result.stderr
    assert cli("validate", cwd=project, env=without()).returncode == 0


def test_metrics_switched_on_without_the_metrics_extra_is_an_error(project):
    result = cli("validate", cwd=project,
                 env=without("prometheus_client", SUBAGENTS_METRICS="true"))
    assert result.returncode == 1
    assert "pip install 'subagents[metrics]'" in result.stderr


def test_tracing_switched_on_without_the_tracing_extra_is_an_error(project):
    result = cli("validate", cwd=project,
                 env=without("opentelemetry",
                             OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:4318/v1/traces"))
    assert result.returncode == 1
    assert "pip install 'subagents[tracing]'" in result.stderr
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in result.stderr


def test_a_channel_without_its_extra_fails_validate_and_serve_says_it_once(project):
    (project / "credentials.yml").write_text("rest:\nsocketio:\n")
    validated = cli("validate", cwd=project, env=without("socketio"))
    assert validated.returncode == 1
    assert "error [credentials.channel.extra_missing]" in validated.stderr
    assert "pip install 'subagents[socketio]'" in validated.stderr
    served = cli("serve", "--no-model-check", cwd=project, env=without("socketio"))
    assert served.returncode == 1
    assert served.stderr.count("credentials.channel.extra_missing") == 1
    assert "serving on" not in served.stderr
    # the commands that open no channel still run
    tested = cli("test", cwd=project, env=without("socketio"))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize("connect", [False, True])
def test_a_stdio_script_that_does_not_exist_is_an_error(project, connect):
    edit(project / "endpoints.yml", "mcp_servers/shop.py", "mcp_servers/shopp.py")
    result = cli("validate", *(["--connect"] if connect else []), cwd=project)
    assert result.returncode == 1
    line = next(x for x in result.stderr.splitlines() if "[mcp.stdio.script_not_found]" in x)
    assert line.startswith("endpoints.yml:")
    assert "mcp_servers/shopp.py" in line


def test_a_stdio_command_that_does_not_exist_is_an_error(project):
    edit(project / "endpoints.yml", "command: python", "command: no-such-interpreter-here")
    result = cli("validate", cwd=project)
    assert result.returncode == 1
    assert "[mcp.stdio.command_not_found]" in result.stderr


def test_include_tools_naming_a_tool_the_server_lacks_is_an_error_with_connect(project):
    edit(project / "sub_agents" / "order_assistant" / "config.yml",
         "include_tools: [find_order, list_orders]", "include_tools: [find_order, list_order]")
    result = cli("validate", "--connect", cwd=project)
    assert result.returncode == 1
    line = next(x for x in result.stderr.splitlines()
                if "[agent.validation.mcp.unknown_tool]" in x)
    assert line.startswith("sub_agents/order_assistant/config.yml:")
    assert "did you mean 'list_orders'?" in line


@pytest.mark.parametrize("value", ["Berlin", "RET-5001"])
def test_a_condition_comparing_with_an_unquoted_word_is_a_warning_with_the_fix(project, value):
    edit(project / "data" / "flows.yml", "slots.return_reference is not null",
         f"slots.return_reference = {value}")
    result = cli("validate", cwd=project)
    assert result.returncode == 0
    line = next(x for x in result.stdout.splitlines() if "[flow.condition.unquoted_word]" in x)
    assert f"write '{value}' (in quotes)" in line
    assert "1 warning(s)" in result.stdout


def test_a_missing_endpoints_file_is_one_error_saying_so(project):
    (project / "endpoints.yml").unlink()
    result = cli("validate", cwd=project)
    assert result.returncode == 1
    errors = [x for x in result.stderr.splitlines() if ": error [" in x]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("endpoints.yml: error [endpoints.not_found]")
    assert "does not exist" in errors[0]


def test_custom_actions_without_the_actions_extra_are_an_error(project):
    (project / "actions").mkdir()
    (project / "actions" / "__init__.py").write_text("from rasa_sdk import Action\n")
    result = cli("validate", cwd=project, env=without("rasa_sdk"))
    assert result.returncode == 1
    line = next(x for x in result.stderr.splitlines() if "[project.extra_missing]" in x)
    assert line.startswith("actions:")
    assert "pip install 'subagents[actions]'" in line
    assert cli("validate", cwd=project, env=without()).returncode == 0
