"""`subagents validate` reports every problem with file:line [code] and exits 1 on errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "subagents.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60, check=False)


def test_validate_the_example_project_succeeds():
    result = run("validate", "--project", str(REPO))
    assert result.returncode == 0, result.stderr
    assert "is valid: 2 sub agent(s)" in result.stdout


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
