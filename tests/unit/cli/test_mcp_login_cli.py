"""``subagents mcp login``: refuses servers it cannot log in to, saying why."""

from __future__ import annotations

from pathlib import Path

from tests.cli_process import run_cli

REPO = Path(__file__).resolve().parents[3]


def test_an_unknown_server_is_refused():
    assert run_cli("mcp", "login", "nope", "--project", str(REPO)).returncode == 2


def test_a_server_without_a_login_grant_is_refused_with_a_code():
    done = run_cli("mcp", "login", "stocks", "--project", str(REPO))
    assert done.returncode == 1
    assert "[mcp.login_not_configured]" in done.stderr
