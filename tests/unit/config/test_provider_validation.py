"""`validate` on providers: the ones reached through LiteLLM need the ``providers`` extra (an
error naming the install command when it is missing), each provider's keys or variables (a
warning naming what to export), a secret in a provider key must be a ``${VAR}``, and an
unknown provider stays an error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from subagents.config import collect_issues
from subagents.config import providers as provider_table

from tests.provider_cases import NEEDS_LITELLM

SERVERS = """
        mcp_servers:
          - name: tools
            type: stdio
            command: python
            args: ["-m", "subagents.demo.stocks"]
"""
PROVIDER_VARIABLES = ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "GROQ_API_KEY",
                      "VERTEXAI_PROJECT", "VERTEXAI_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
                      "GOOGLE_APPLICATION_CREDENTIALS", "AWS_ACCESS_KEY_ID",
                      "AWS_SECRET_ACCESS_KEY", "AWS_REGION_NAME", "AWS_REGION",
                      "AWS_DEFAULT_REGION", "AWS_BEARER_TOKEN_BEDROCK", "COHERE_API_BASE")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def issues_for(make_project, model: str):
    _, issues = collect_issues(make_project({"endpoints.yml": f"""
        model_groups:
          - id: agent_llm
            models:
              - {model}
        """ + SERVERS}))
    return issues


def codes(issues) -> list[tuple[str, str]]:
    return [(i.code, i.severity) for i in issues]


def only(issues, code):
    found = [i for i in issues if i.code == code]
    assert len(found) == 1, [i.format() for i in issues]
    return found[0]


@NEEDS_LITELLM
@pytest.mark.parametrize("model", [
    "{provider: anthropic, model: claude-sonnet-4-5, api_key: '${MY_KEY}'}",
    "{provider: gemini, model: gemini-2.5-flash}",
    "{provider: vertex_ai, model: gemini-2.5-flash, vertex_project: p, vertex_location: "
    "europe-west4}",
    "{provider: bedrock, model: anthropic.claude-v2, aws_access_key_id: '${ID}', "
    "aws_secret_access_key: '${SECRET}', aws_region_name: eu-central-1}",
    "{provider: groq, model: llama-3.3-70b-versatile}",
    "{provider: cohere, model: command-r-plus, api_base: 'https://api.cohere.com/v2/chat'}",
    "{provider: fireworks_ai, model: accounts/fireworks/models/llama-v3p1-8b-instruct}",
], ids=["anthropic", "gemini", "vertex", "bedrock", "groq", "cohere-native", "fireworks"])
def test_providers_with_their_keys_validate_cleanly(make_project, monkeypatch, model):
    monkeypatch.setenv("GOOGLE_API_KEY", "g")
    monkeypatch.setenv("GROQ_API_KEY", "g")
    monkeypatch.setenv("COHERE_API_KEY", "c")
    monkeypatch.setenv("FIREWORKS_API_KEY", "f")
    assert codes(issues_for(make_project, model)) == []


@pytest.mark.parametrize(("model", "variables"), [
    ("{provider: anthropic, model: claude-sonnet-4-5}", ["ANTHROPIC_API_KEY", "api_key"]),
    ("{provider: gemini, model: gemini-2.5-flash}", ["GEMINI_API_KEY or GOOGLE_API_KEY"]),
    ("{provider: vertex_ai, model: gemini-2.5-flash}",
     ["VERTEXAI_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS", "vertex_project"]),
    ("{provider: groq, model: llama-3.3-70b-versatile}", ["GROQ_API_KEY"]),
    ("{provider: mistral, model: mistral-large-latest}", ["MISTRAL_API_KEY"]),
    ("{provider: huggingface, model: together/deepseek-ai/DeepSeek-R1}",
     ["HF_TOKEN or HUGGINGFACE_API_KEY"]),
], ids=["anthropic", "gemini", "vertex", "groq", "mistral", "huggingface"])
def test_a_missing_key_is_a_warning_naming_what_to_export(make_project, monkeypatch, model,
                                                          variables):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGINGFACE_API_KEY", raising=False)
    issue = only(issues_for(make_project, model), "llm.provider.key_missing")
    assert issue.severity == "warning"
    assert (issue.file, issue.line, issue.key) == (
        "endpoints.yml", 4, "model_groups[0].models[0].provider")
    for variable in variables:
        assert variable in (issue.hint or "")


def test_a_directly_called_provider_with_its_own_api_base_needs_no_key(make_project):
    issues = issues_for(make_project, "{provider: groq, model: llama, api_base: "
                                      "'http://127.0.0.1:8000/v1'}")
    assert codes(issues) == []


@pytest.mark.parametrize(("keys", "missing"), [
    ("aws_access_key_id: '${ID}'", ["a secret access key", "a region"]),
    ("aws_access_key_id: '${ID}', aws_secret_access_key: '${SECRET}'", ["a region"]),
])
def test_bedrock_needs_key_id_secret_and_region_together(make_project, keys, missing):
    issue = only(issues_for(make_project, f"{{provider: bedrock, model: m, {keys}}}"),
                 "llm.provider.key_missing")
    assert issue.message == f"the bedrock model lacks {' and '.join(missing)}"
    assert "AWS_REGION_NAME" in (issue.hint or "")


@pytest.mark.parametrize("model", [
    "{provider: bedrock, model: m}",  # an instance role or a profile: nothing to check
    "{provider: bedrock, model: m, api_key: '${BEDROCK_BEARER}'}",  # a bearer key
])
def test_bedrock_without_keys_or_with_a_bearer_key_is_fine(make_project, model):
    assert "llm.provider.key_missing" not in [c for c, _ in codes(issues_for(make_project,
                                                                             model))]


def test_bedrock_credentials_from_the_environment_count(make_project, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert "llm.provider.key_missing" not in [
        c for c, _ in codes(issues_for(make_project, "{provider: bedrock, model: m}"))]


def test_a_provider_secret_written_as_a_literal_is_an_error(make_project):
    issue = only(issues_for(make_project, "{provider: bedrock, model: m, aws_access_key_id: "
                                          "'${ID}', aws_secret_access_key: abc123, "
                                          "aws_region_name: eu-west-1}"),
                 "validation.sensitive_key_string_value_must_be_set_as_env_var")
    assert issue.key == "model_groups[0].models[0].aws_secret_access_key"
    assert issue.severity == "error"


def test_a_vertex_credentials_file_path_is_not_a_secret(make_project):
    issues = issues_for(make_project, "{provider: vertex_ai, model: gemini-2.5-flash, "
                                      "vertex_credentials: /etc/sa.json}")
    assert [c for c, _ in codes(issues)
            if c.startswith("validation.")] == []


@pytest.mark.parametrize(("provider", "hint"), [("anthropc", "'anthropic'"),
                                                ("huggingface_local", "self-hosted")])
def test_an_unknown_provider_is_still_an_error(make_project, provider, hint):
    issue = only(issues_for(make_project, f"{{provider: {provider}, model: m}}"),
                 "llm.provider.unsupported")
    assert issue.severity == "error"
    assert hint in (issue.hint or "")


@NEEDS_LITELLM
def test_a_vertex_region_litellm_would_replace_is_a_warning(make_project, monkeypatch):
    monkeypatch.setenv("VERTEXAI_PROJECT", "p")
    issue = only(issues_for(make_project, "{provider: vertex_ai, model: "
                                          "deepseek-ai/deepseek-v3.1-maas, vertex_location: "
                                          "europe-west4}"), "llm.vertex.location_replaced")
    assert issue.severity == "warning"
    assert "'us-central1'" in issue.message
    assert issue.key == "model_groups[0].models[0].vertex_location"
    assert provider_table.replaced_vertex_location("gemini-2.5-flash", "europe-west4") is None


def test_without_litellm_validate_names_the_extra_to_install(make_project):
    """In a process where LiteLLM cannot be imported (as without the extra), ``validate``
    fails on a provider that needs it and says how to install it; an OpenAI-compatible one
    still validates."""
    root = make_project({"endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - {provider: anthropic, model: claude-sonnet-4-5}
          - id: other
            models:
              - {provider: mistral, model: mistral-small}
        """ + SERVERS})
    program = textwrap.dedent("""
        import sys
        sys.modules["litellm"] = None  # what an environment without the extra looks like
        from subagents.cli.main import main
        sys.exit(main(["validate", "--project", sys.argv[1]]))
        """)
    done = subprocess.run([sys.executable, "-c", program, str(root)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if "llm.provider.extra_missing" in line]
    assert len(lines) == 1, done.stderr
    assert "endpoints.yml:4: error [llm.provider.extra_missing] " \
           "model_groups[0].models[0].provider" in lines[0]
    assert "pip install 'subagents[providers]'" in lines[0]
    assert "models[1]" not in done.stderr  # mistral is called directly: no LiteLLM needed
