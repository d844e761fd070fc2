"""``subagents mcp login``: refuses servers it cannot log in to, saying why."""

from __future__ import annotations

from pathlib import Path

from subagents.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_an_unknown_server_is_refused():
    assert main(["mcp", "login", "nope", "--project", str(REPO)]) == 2


def test_a_server_without_a_login_grant_is_refused_with_a_code(capsys):
    assert main(["mcp", "login", "stocks", "--project", str(REPO)]) == 1
    assert "[mcp.login_not_configured]" in capsys.readouterr().err
