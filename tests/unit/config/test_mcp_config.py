"""endpoints.yml keys of the MCP client: OAuth grants, sampling, roots, resources."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from subagents.config import collect_issues
from subagents.config.endpoints import McpServerConfig

SERVER = {"name": "s", "type": "http", "url": "http://127.0.0.1:1/mcp"}


def test_a_sampling_model_group_must_exist(make_project):
    root = make_project({"endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - provider: openai
                model: gpt-4.1-mini
        mcp_servers:
          - name: tools
            type: stdio
            command: python
            args: ["-m", "subagents.demo.stocks"]
            sampling:
              model_group: nope
        """})
    project, issues = collect_issues(root)
    assert project is None
    [issue] = [i for i in issues if i.code == "endpoints.mcp_server.sampling_model_group_unknown"]
    assert (issue.file, issue.line) == ("endpoints.yml", 12)


XAA = {"grant": "identity_assertion", "client_id": "a", "client_secret": "${S}",
       "issuer": "https://auth.example.com", "id_token": "${ID_TOKEN}",
       "idp_token_url": "https://idp.example.com/token"}


@pytest.mark.parametrize("oauth", [
    {"client_id": "a"},  # client credentials without a secret
    {"client_id": "a", "auth_method": "private_key_jwt"},  # no private_key
    {"client_secret": "${S}"},  # client credentials without a client id
    {"grant": "authorization_code", "auth_method": "private_key_jwt",
     "private_key": "${K}"},
    {"client_id": "a", "client_secret": "literal-secret"},  # secrets only as ${ENV}
    {**XAA, "issuer": None},  # cross-app access names its authorization server
    {**XAA, "id_token": None},
    {**XAA, "idp_token_url": None},
    {**XAA, "id_token": "eyJhbGciOi.literal.token"},  # an ID token only as ${ENV} or template
    {**XAA, "idp_client_secret": "literal"},
])
def test_incomplete_oauth_settings_are_refused(oauth):
    with pytest.raises(ValidationError):
        McpServerConfig(**SERVER, oauth=oauth)


def test_cross_app_access_with_the_users_id_token_needs_its_own_sessions():
    config = McpServerConfig(**SERVER, oauth={**XAA, "id_token": "{{ metadata.id_token }}"},
                             session="per_conversation")
    assert config.template_refs() == [("metadata", "id_token")]
    with pytest.raises(ValidationError, match=r"mcp\.template\.shared_session"):
        McpServerConfig(**SERVER, oauth={**XAA, "id_token": "{{ metadata.id_token }}"})
    assert McpServerConfig(**SERVER, oauth=XAA).uses_templates is False


def test_the_new_keys_default_to_off():
    config = McpServerConfig(**SERVER)
    assert (config.roots, config.sampling, config.resources) == ([], None, False)
    login = McpServerConfig(**SERVER, oauth={"grant": "authorization_code"})
    assert login.oauth is not None
    assert login.oauth.client_id is None
