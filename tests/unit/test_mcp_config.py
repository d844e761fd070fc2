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


@pytest.mark.parametrize("oauth", [
    {"client_id": "a"},  # client credentials without a secret
    {"client_id": "a", "auth_method": "private_key_jwt"},  # no private_key
    {"client_secret": "${S}"},  # client credentials without a client id
    {"grant": "authorization_code", "auth_method": "private_key_jwt",
     "private_key": "${K}"},
    {"client_id": "a", "client_secret": "literal-secret"},  # secrets only as ${ENV}
])
def test_incomplete_oauth_settings_are_refused(oauth):
    with pytest.raises(ValidationError):
        McpServerConfig(**SERVER, oauth=oauth)


def test_the_new_keys_default_to_off():
    config = McpServerConfig(**SERVER)
    assert (config.roots, config.sampling, config.resources) == ([], None, False)
    login = McpServerConfig(**SERVER, oauth={"grant": "authorization_code"})
    assert login.oauth is not None
    assert login.oauth.client_id is None
