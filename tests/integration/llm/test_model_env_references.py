"""Every string setting of a model may name environment variables (``${VAR}``): ``api_base``,
``model``, request options, ``extra_body``, provider keys; the preflight resolves them too
(it used to probe the literal text, "Request URL is missing an 'http://'")."""

from __future__ import annotations

import importlib.util

import pytest
from subagents.config import load_project
from subagents.config.endpoints import EndpointsConfig
from subagents.exceptions import ConfigError, ProjectInvalidError
from subagents.llm import build_model, resolve_model_settings
from subagents.llm.preflight import check_models
from subagents.testing import FakeModelServer

from tests.servers.providers import MistralServer

SERVERS = """
        mcp_servers:
          - name: tools
            type: stdio
            command: python
            args: ["-m", "subagents.demo.stocks"]
"""
USER = [{"role": "user", "content": "hi"}]


def project_with(make_project, model: str):
    return load_project(make_project({"endpoints.yml": f"""
        model_groups:
          - id: agent_llm
            models:
              - {model}
        """ + SERVERS}))


async def test_the_preflight_resolves_api_base_and_key_references(make_project, monkeypatch):
    async with MistralServer() as server:  # any server that records what it is asked
        monkeypatch.setenv("MODEL_BASE", f"{server.base_url}/v1")
        monkeypatch.setenv("MODEL_KEY", "sk-from-env")
        project = project_with(make_project, "{provider: openai, model: gpt-4.1-mini, "
                                             "api_base: '${MODEL_BASE}', api_key: '${MODEL_KEY}'}")
        problems = await check_models(project, timeout=5)
    assert problems == []
    (probe,) = server.requests
    assert (probe.method, probe.path) == ("GET", "/v1/models")
    assert probe.headers["authorization"] == "Bearer sk-from-env"


async def test_the_preflight_names_a_variable_that_is_not_set(make_project, monkeypatch):
    monkeypatch.delenv("MODEL_BASE", raising=False)
    project = project_with(make_project, "{provider: self-hosted, model: llama, "
                                         "api_base: '${MODEL_BASE}'}")
    (problem,) = await check_models(project, timeout=2)
    assert "MODEL_BASE" in problem.message
    assert "http://" not in problem.message


async def test_the_preflight_checks_a_hosted_provider_s_key_and_address(make_project,
                                                                        monkeypatch):
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    missing = await check_models(project_with(make_project, "{provider: groq, model: llama}"))
    assert [(p.code, p.endpoint) for p in missing] == [
        ("preflight.api_key_missing", "https://api.groq.com/openai/v1")]
    assert "GROQ_API_KEY" in missing[0].message
    async with MistralServer() as server:
        monkeypatch.setenv("GROQ_API_KEY", "gsk-test")
        monkeypatch.setenv("GROQ_API_BASE", f"{server.base_url}/openai/v1")
        assert await check_models(project_with(make_project,
                                               "{provider: groq, model: llama}")) == []
    (probe,) = server.requests
    assert probe.path == "/openai/v1/models"
    assert probe.headers["authorization"] == "Bearer gsk-test"


async def test_the_preflight_does_not_probe_providers_reached_through_litellm(make_project,
                                                                              monkeypatch):
    pytest.importorskip("litellm", reason="the providers extra is installed by make providers")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    project = project_with(make_project, "{provider: anthropic, model: claude-sonnet-4-5}")
    (problem,) = await check_models(project, timeout=2)
    assert problem.code == "preflight.api_key_missing"
    assert problem.endpoint == "anthropic (through LiteLLM)"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert await check_models(project, timeout=2) == []


def test_a_provider_reached_through_litellm_without_the_extra_fails_at_load(make_project):
    if importlib.util.find_spec("litellm") is not None:
        pytest.skip("the providers extra is installed here")
    with pytest.raises(ProjectInvalidError) as caught:
        project_with(make_project, "{provider: anthropic, model: claude-sonnet-4-5}")
    text = str(caught.value)
    assert "endpoints.yml:4" in text
    assert "[llm.provider.extra_missing]" in text
    assert "pip install 'subagents[providers]'" in text


@pytest.mark.parametrize("stream", [False, True])
async def test_model_name_options_and_extra_body_resolve_references(monkeypatch, stream):
    async with FakeModelServer({"default": ["Hi."]}) as fake:
        monkeypatch.setenv("MODEL_BASE", fake.base_url())
        monkeypatch.setenv("MODEL_NAME", "llama-3.1-8b")
        monkeypatch.setenv("END_USER", "team-a")
        monkeypatch.setenv("TENANT", "acme")
        endpoints = EndpointsConfig.model_validate({"model_groups": [{"id": "g", "models": [{
            "provider": "self-hosted", "model": "${MODEL_NAME}", "api_base": "${MODEL_BASE}",
            "user": "${END_USER}", "extra_body": {"tenant": "${TENANT}"},
            "extra_headers": {"X-Tenant": "${TENANT}"}}]}]})
        model = build_model(resolve_model_settings({"model_group": "g"}, endpoints))
        reply = await model.complete(USER, None, stream=stream)
        await model.close()
    body = fake.requests[0].body
    assert (body["model"], body["user"], body["tenant"]) == ("llama-3.1-8b", "team-a", "acme")
    assert fake.requests[0].headers["x-tenant"] == "acme"
    assert reply.model == "llama-3.1-8b"


async def test_a_reference_to_an_unset_variable_fails_the_call_with_its_name(monkeypatch):
    monkeypatch.delenv("MODEL_NAME", raising=False)
    model = build_model(resolve_model_settings(
        {"provider": "self-hosted", "model": "${MODEL_NAME}",
         "api_base": "http://127.0.0.1:9/v1"}, None))
    with pytest.raises(ConfigError) as info:
        await model.complete(USER, None)
    assert info.value.issue.code == "config.env_var_missing"
    assert "MODEL_NAME" in info.value.issue.message
