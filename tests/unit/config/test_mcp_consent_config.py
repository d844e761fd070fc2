"""``oauth.per_user``: validate names what a server that each user authorizes still needs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from subagents.config import collect_issues
from subagents.config.endpoints import McpServerConfig

fernet = pytest.importorskip("cryptography.fernet")

OAUTH = "{grant: authorization_code, per_user: true, public_url: 'https://bot.example.com'}"
ENDPOINTS = """
    model_groups:
      - id: llm
        models: [{{provider: openai, model: gpt-4.1-mini}}]
    mcp_servers:
      - name: calendar
        type: http
        url: https://calendar.example.com/mcp
        {session}
        oauth: {oauth}
    """


def issues_of(make_project, session: str, oauth: str = OAUTH) -> list[tuple[str, str, int]]:
    root = make_project({"endpoints.yml": ENDPOINTS.format(session=session, oauth=oauth)})
    _, issues = collect_issues(root)
    return [(i.code, i.file or "", i.line or 0) for i in issues
            if i.code.startswith("mcp.oauth.")]


@pytest.fixture
def token_key(monkeypatch):
    monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", fernet.Fernet.generate_key().decode())


def test_a_complete_per_user_server_passes(make_project, token_key):
    assert issues_of(make_project, "session: {per_user: metadata.user_id}") == []


def test_per_user_consent_needs_to_know_the_user(make_project, token_key):
    assert issues_of(make_project, "session: per_conversation") == [
        ("mcp.oauth.per_user_session_missing", "endpoints.yml", 9)]


def test_per_user_consent_needs_a_public_url(make_project, token_key):
    oauth = "{grant: authorization_code, per_user: true}"
    assert issues_of(make_project, "session: {per_user: metadata.user_id}", oauth) == [
        ("mcp.oauth.public_url_missing", "endpoints.yml", 9)]
    oauth = "{grant: authorization_code, per_user: true, public_url: 'bot.example.com'}"
    assert [code for code, _, _ in issues_of(
        make_project, "session: {per_user: metadata.user_id}", oauth)] == [
        "mcp.oauth.public_url_invalid"]


@pytest.mark.parametrize(("key", "code"), [
    (None, "mcp.oauth.token_key_missing"),
    ("not-a-fernet-key", "mcp.oauth.token_key_invalid"),
])
def test_per_user_consent_needs_a_token_key(make_project, monkeypatch, key, code):
    if key is None:
        monkeypatch.delenv("SUBAGENTS_OAUTH_TOKEN_KEY", raising=False)
    else:
        monkeypatch.setenv("SUBAGENTS_OAUTH_TOKEN_KEY", key)
    assert issues_of(make_project, "session: {per_user: metadata.user_id}") == [
        (code, "endpoints.yml", 9)]


def test_per_user_consent_is_an_authorization_code_grant():
    with pytest.raises(ValidationError, match="per_user consent needs grant"):
        McpServerConfig.model_validate({
            "name": "s", "url": "http://127.0.0.1:1/mcp",
            "oauth": {"client_id": "a", "client_secret": "${S}", "per_user": True}})


def test_without_the_oauth_extra_validate_says_what_to_install(make_project, token_key,
                                                                monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cryptography.fernet", None)  # not installed
    assert issues_of(make_project, "session: {per_user: metadata.user_id}") == [
        ("mcp.oauth.extra_missing", "endpoints.yml", 9)]
