"""`validate` on model groups: routers, providers and model options, with code and line."""

from __future__ import annotations

import pytest
from subagents.config import collect_issues

SERVERS = """
        mcp_servers:
          - name: tools
            type: stdio
            command: python
            args: ["-m", "subagents.demo.stocks"]
"""


def issues_of(make_project, groups: str):
    _, issues = collect_issues(make_project({"endpoints.yml": groups + SERVERS}))
    return issues


def only(issues, code):
    found = [i for i in issues if i.code == code]
    assert len(found) == 1, [i.format() for i in issues]
    return found[0]


def test_an_unknown_routing_strategy_is_an_error_with_a_suggestion(make_project):
    issue = only(issues_of(make_project, """
        model_groups:
          - id: agent_llm
            models:
              - {model: gpt-4.1-mini}
              - {model: gpt-4.1-mini, api_base: "http://127.0.0.1:9/v1"}
            router:
              routing_strategy: least_busy
        """), "llm.router.unknown_strategy")
    assert issue.severity == "error"
    assert (issue.file, issue.line) == ("endpoints.yml", 7)
    assert "least-busy" in (issue.hint or "")


def test_a_negative_router_number_is_an_error(make_project):
    issue = only(issues_of(make_project, """
        model_groups:
          - id: agent_llm
            models: [{model: a}, {model: b}]
            router: {routing_strategy: least-busy, num_retries: -1}
        """), "llm.router.invalid")
    assert (issue.severity, issue.line) == ("error", 4)


def test_a_router_on_a_single_model_group_is_a_warning(make_project):
    issues = issues_of(make_project, """
        model_groups:
          - id: agent_llm
            models:
              - {model: gpt-4.1-mini}
            router: {routing_strategy: simple-shuffle}
        """)
    assert only(issues, "llm.router.single_model").severity == "warning"
    assert not [i for i in issues if i.severity == "error"]


def test_unknown_router_keys_and_response_caching_are_warnings(make_project):
    issues = issues_of(make_project, """
        model_groups:
          - id: agent_llm
            models:
              - {model: a}
              - {model: b}
            router:
              routing_strategy: latency-based-routing
              cooldown_tme: 3
              cache_responses: true
        """)
    unknown = only(issues, "llm.router.unknown_key")
    assert (unknown.severity, unknown.line) == ("warning", 8)
    assert "cooldown_time" in (unknown.hint or "")
    assert only(issues, "llm.router.cache_unsupported").severity == "warning"
    assert not [i for i in issues if i.severity == "error"]


@pytest.mark.parametrize(("model", "code"), [
    ("{provider: huggingface_local, model: g}", "llm.provider.unsupported"),
    ("{provider: self-hosted, model: llama}", "llm.self_hosted.api_base_missing"),
    ("{provider: azure, model: gpt-4, api_version: '2024-06-01'}", "llm.azure.deployment_missing"),
    ("{model: gpt-4.1-mini, stream: true}", "llm.option.forbidden"),
    ("{model: gpt-4.1-mini, n: 2}", "llm.option.forbidden"),
    ("{model: gpt-4.1-mini, temprature: 0.2}", "llm.option.unknown"),
    ("{provider: self-hosted, model: m, api_base: 'http://h/v1', "
     "use_chat_completions_endpoint: false}", "llm.completions_endpoint.unsupported"),
    ("{type: openai, model: gpt-4, openai_api_type: azure}", "llm.api_type.mismatch"),
], ids=["provider", "self-hosted-base", "azure-deployment", "stream", "n", "misspelled",
        "completions-endpoint", "api-type"])
def test_model_problems_of_a_used_group_are_errors(make_project, model, code):
    issue = only(issues_of(make_project, f"""
        model_groups:
          - id: agent_llm
            models:
              - {model}
        """), code)
    assert issue.severity == "error"
    assert (issue.file, issue.line) == ("endpoints.yml", 4)


def test_a_routed_group_of_several_providers_validates(make_project):
    issues = issues_of(make_project, """
        model_groups:
          - id: agent_llm
            models:
              - provider: azure
                deployment: gpt-4-eu
                api_base: https://eu.example.openai.azure.com
                api_version: "2024-06-01"
                api_key: ${AZURE_EU_KEY}
                weight: 2
              - provider: self-hosted
                model: meta-llama/Llama-3.1-8B-Instruct
                api_base: http://127.0.0.1:8000/v1
                max_tokens: 256
                rpm: 60
            router:
              routing_strategy: usage-based-routing-v2
              num_retries: 1
              allowed_fails: 2
              cooldown_time: 10
        """)
    assert not [i.format() for i in issues if i.severity == "error"]


async def test_preflight_checks_every_model_of_a_routed_group(make_project, monkeypatch):
    from subagents.config import load_project
    from subagents.llm.preflight import check_models

    monkeypatch.delenv("AZURE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    project = load_project(make_project({"endpoints.yml": """
        model_groups:
          - id: agent_llm
            models:
              - {provider: openai, model: gpt-4.1-mini, api_base: "http://127.0.0.1:9/v1"}
              - {provider: azure, deployment: eu, api_base: "https://eu.example",
                 api_version: "2024-06-01"}
            router: {routing_strategy: simple-shuffle}
        """ + SERVERS}))
    problems = await check_models(project, timeout=2)
    missing = [p for p in problems if p.code == "preflight.api_key_missing"]
    assert [p.model for p in missing] == ["eu"]
