"""What reaches the model endpoint per provider: path, query string, headers and body, over real
HTTP to the fake model server."""

from __future__ import annotations

import pytest
from subagents.config.endpoints import EndpointsConfig
from subagents.exceptions import ConfigError
from subagents.llm import FallbackModel, build_model, resolve_model_settings
from subagents.testing import FakeModelServer

USER = [{"role": "user", "content": "hi"}]


def settings_for(model: dict, *, router: dict | None = None, more: list[dict] | None = None):
    group = {"id": "g", "models": [model, *(more or [])]}
    if router is not None:
        group["router"] = router
    endpoints = EndpointsConfig.model_validate({"model_groups": [group]})
    return resolve_model_settings({"model_group": "g"}, endpoints)


def host(fake: FakeModelServer) -> str:
    return f"http://{fake.host}:{fake.port}"


@pytest.mark.parametrize("stream", [False, True])
async def test_azure_calls_the_deployment_with_api_version_and_api_key(monkeypatch, stream):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-azure")
    monkeypatch.setenv("MY_AZURE_KEY", "azure-secret")
    async with FakeModelServer({"eu": ["Hello."]}) as fake:
        settings = settings_for({
            "provider": "azure", "deployment_name": "gpt4-eu", "api_type": "azure",
            "api_version": "2024-06-01", "api_base": f"{host(fake)}/eu/",
            "api_key": "${MY_AZURE_KEY}", "max_tokens": 50, "temperature": 0.2})
        llm = build_model(settings)
        response = await llm.complete(USER, None, stream=stream)
        await llm.close()
        fake.assert_done()
    request = fake.requests[0]
    assert request.path == "/eu/openai/deployments/gpt4-eu/chat/completions" \
                           "?api-version=2024-06-01"
    assert request.headers["api-key"] == "azure-secret"
    assert "sk-openai-not-for-azure" not in str(request.headers)
    assert request.body["model"] == "gpt4-eu"
    assert request.body["max_completion_tokens"] == 50
    assert request.body["temperature"] == 0.2
    for consumed in ("max_tokens", "api_type", "api_version", "deployment", "api_base"):
        assert consumed not in request.body
    assert response.text == "Hello."
    assert response.model == "gpt4-eu"


async def test_azure_reads_base_version_and_key_from_the_environment(monkeypatch):
    async with FakeModelServer({"az": ["Hi."]}) as fake:
        monkeypatch.setenv("AZURE_API_BASE", f"{host(fake)}/az")
        monkeypatch.setenv("AZURE_API_VERSION", "2024-10-21")
        monkeypatch.setenv("AZURE_API_KEY", "from-env")
        llm = build_model(settings_for({"provider": "azure", "engine": "dep-1"}))
        await llm.complete(USER, None)
        await llm.close()
    request = fake.requests[0]
    assert request.path == "/az/openai/deployments/dep-1/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == "from-env"


async def test_azure_without_an_api_version_is_a_config_error(monkeypatch):
    monkeypatch.delenv("AZURE_API_VERSION", raising=False)
    llm = build_model(settings_for({"provider": "azure", "deployment": "d",
                                        "api_base": "http://127.0.0.1:1", "api_key": "${K}"}))
    monkeypatch.setenv("K", "k")
    with pytest.raises(ConfigError) as info:
        await llm.complete(USER, None)
    assert info.value.issue.code == "llm.azure.api_version_missing"


async def test_self_hosted_keeps_max_tokens_and_never_gets_the_openai_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    async with FakeModelServer({"vllm": ["Hi."]}) as fake:
        llm = build_model(settings_for({
            "provider": "self-hosted", "model": "meta-llama/Llama-3.1-8B-Instruct",
            "api_base": f"{host(fake)}/vllm/v1", "max_tokens": 77, "request_timeout": 3}))
        assert llm.settings.timeout == 3
        await llm.complete(USER, None)
        await llm.close()
    request = fake.requests[0]
    assert request.path == "/vllm/v1/chat/completions"
    assert request.body["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert request.body["max_tokens"] == 77
    assert "max_completion_tokens" not in request.body
    assert "temperature" not in request.body  # openai's component defaults are not merged
    assert "sk-openai-secret" not in str(request.headers)


async def test_ollama_gets_its_openai_compatible_path(monkeypatch):
    async with FakeModelServer({"default": ["Hi."]}) as fake:
        llm = build_model(settings_for({"provider": "ollama", "model": "llama3.2",
                                            "api_base": host(fake)}))
        await llm.complete(USER, None)
        await llm.close()
    assert fake.requests[0].path == "/v1/chat/completions"
    assert fake.requests[0].body["model"] == "llama3.2"


async def test_openai_aliases_headers_and_extra_body(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("KEY", "sk-test")
    async with FakeModelServer({"default": ["Hi."]}) as fake:
        llm = build_model(settings_for({
            "type": "openai", "model_name": "gpt-4o", "openai_api_base": f"{host(fake)}/v1",
            "api_key": "${KEY}", "max_tokens": 64, "extra_headers": {"X-Team": "bots"},
            "extra_body": {"metadata": {"app": "demo"}}, "organization": "org-1",
            "drop_params": True, "weight": 3}))
        await llm.complete(USER, None)
        await llm.close()
    request = fake.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["x-team"] == "bots"
    assert request.headers["openai-organization"] == "org-1"
    body = request.body
    assert body["model"] == "gpt-4o"
    assert body["max_completion_tokens"] == 64
    assert body["metadata"] == {"app": "demo"}
    for consumed in ("extra_headers", "extra_body", "organization", "drop_params", "weight",
                     "max_tokens"):
        assert consumed not in body


def test_without_a_router_only_the_first_model_is_used():
    settings = settings_for({"model": "a"}, more=[{"model": "b"}])
    assert not isinstance(build_model(settings), FallbackModel)
    assert settings.model == "a"
    assert [m.model for m in settings.members()] == ["a"]


def test_with_a_router_every_model_is_used():
    settings = settings_for({"model": "a"}, more=[{"model": "b"}],
                            router={"routing_strategy": "least-busy"})
    client = build_model(settings, name="caller")
    assert isinstance(client, FallbackModel)
    assert [m.settings.model for m in client.members] == ["a", "b"]
    assert client.settings.model == "a"
    assert client.name == "caller"


def test_an_unknown_strategy_fails_when_the_client_is_built():
    with pytest.raises(ConfigError) as info:
        settings_for({"model": "a"}, more=[{"model": "b"}],
                     router={"routing_strategy": "round-robin"})
    assert info.value.issue.code == "llm.router.unknown_strategy"


async def test_options_set_on_a_routed_client_reach_every_model():
    """MCP sampling caps the completion length by replacing the client's settings."""
    import dataclasses

    down = {"error": {"status": 500, "message": "down"}}
    async with FakeModelServer({"a": [down], "b": ["B"]}) as fake:
        settings = settings_for({"model": "a", "api_base": fake.base_url("a"), "weight": 1e6},
                                more=[{"model": "b", "api_base": fake.base_url("b"),
                                       "weight": 1}],
                                router={"routing_strategy": "simple-shuffle"})
        llm = build_model(settings)
        llm.settings = dataclasses.replace(llm.settings, options={
            **llm.settings.options, "max_completion_tokens": 12})
        await llm.complete(USER, None)  # a fails, b answers
        await llm.close()
        fake.assert_done()
    assert [(r.caller, r.body["max_completion_tokens"]) for r in fake.requests] == [
        ("a", 12), ("b", 12)]
