"""`subagents validate` reports every problem with file:line [code] and exits 1 on errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "subagents.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60, check=False)


def test_validate_the_example_project_succeeds():
    result = run("validate", "--project", str(REPO))
    assert result.returncode == 0, result.stderr
    assert "is valid: 3 sub agent(s)" in result.stdout


def test_validate_lists_all_errors_and_exits_1(make_project):
    root = make_project({
        "sub_agents/weather/config.yml": "agent:\n  name: weather_agent\n",
        "data/flows.yml": "flows:\n  f:\n    description: d\n    steps:\n      - collect: x\n",
    })
    result = run("validate", "--project", str(root))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert any(line.startswith("sub_agents/weather/config.yml:1: error "
                               "[agent.validation.mandatory.fields_missing]") for line in lines)
    assert any(line.startswith("data/flows.yml:5: error [flow.collect.unknown_slot]")
               for line in lines)
    assert any("fix:" in line for line in lines)
    assert lines[-1].startswith("2 error(s), 0 warning(s)")


def test_demo_prints_the_project_structure():
    result = run("demo", "--structure", "--project", str(REPO))
    assert result.returncode == 0, result.stderr
    assert "call: appointment_booker  <- task agent" in result.stdout


def test_validate_reads_files_where_the_location_options_say(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yml").write_text("recipe: default.v1\nlanguage: en\n")
    (tmp_path / "domain").mkdir()
    (tmp_path / "domain" / "slots.yml").write_text("slots:\n  town: {type: text}\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "f.yml").write_text(
        "flows:\n  f:\n    description: d\n    steps:\n      - collect: town\n")
    (tmp_path / "prod.yml").write_text("action_endpoint:\n  actions_module: actions\n")
    result = run("validate", "--project", str(tmp_path), "-c", "config/config.yml",
                 "-d", "domain", "--data", "flows", "--endpoints", "prod.yml")
    assert result.returncode == 0, result.stderr
    assert "1 flow(s)" in result.stdout
    result = run("validate", "--project", str(tmp_path), "--data", "missing")
    assert result.returncode == 1
    assert "[project.path_not_found] --data:" in result.stderr


def test_validate_an_empty_folder_fails(tmp_path):
    result = run("validate", "--project", str(tmp_path))
    assert result.returncode == 1
    assert "[project.empty]" in result.stderr
