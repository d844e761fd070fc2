"""Which way each provider is called, the model name its API gets, and its address."""

from __future__ import annotations

import pytest
from subagents.config import providers
from subagents.llm import ModelSettings
from subagents.llm.factory import provider_model
from subagents.llm.litellm_model import LiteLLMModel
from subagents.llm.openai_compat import OpenAICompatibleModel
from subagents.llm.settings import api_key, base_url


@pytest.mark.parametrize(("provider", "api_base", "way"), [
    ("openai", None, "direct"), ("self-hosted", "http://h/v1", "direct"),
    ("groq", None, "direct"), ("mistral", None, "direct"), ("huggingface", None, "direct"),
    ("cohere", None, "direct"), ("cohere", "https://api.cohere.com/v2/chat", "litellm"),
    ("cohere", "https://api.cohere.com/v1/chat/", "litellm"), ("cohere_chat", None, "litellm"),
    ("anthropic", None, "litellm"), ("gemini", None, "litellm"), ("vertex_ai", None, "litellm"),
    ("bedrock", None, "litellm"), ("fireworks_ai", None, "litellm"),
    ("huggingface_local", None, "unknown"), ("anthropc", None, "unknown"),
])
def test_each_provider_s_way(provider, api_base, way):
    assert providers.route(provider, api_base, env={}) == way
    settings = ModelSettings(model="m", provider=provider, api_base=api_base)
    if way != "unknown":  # (an unknown provider does not load)
        assert type(provider_model(settings, "x")) is (
            LiteLLMModel if way == "litellm" else OpenAICompatibleModel)


def test_cohere_s_native_address_in_the_environment_means_litellm():
    assert providers.route("cohere", None, env={
        "COHERE_API_BASE": "https://api.cohere.com/v2/chat"}) == "litellm"


@pytest.mark.parametrize(("provider", "written", "sent"), [
    ("groq", "groq/llama-3.3-70b-versatile", "llama-3.3-70b-versatile"),
    ("groq", "llama-3.3-70b-versatile", "llama-3.3-70b-versatile"),
    ("huggingface", "huggingface/together/deepseek-ai/DeepSeek-R1",
     "deepseek-ai/DeepSeek-R1:together"),
    ("huggingface", "hf-inference/meta-llama/Llama-3.1-8B-Instruct",
     "meta-llama/Llama-3.1-8B-Instruct:hf-inference"),
    ("huggingface", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("huggingface", "openai/gpt-oss-120b:cerebras", "openai/gpt-oss-120b:cerebras"),
    ("openrouter", "openai/gpt-4o", "openai/gpt-4o"),
])
def test_the_model_name_a_hosted_provider_gets(provider, written, sent):
    assert ModelSettings(model=written, provider=provider).called_model == sent


@pytest.mark.parametrize(("provider", "model", "string"), [
    ("anthropic", "claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
    ("gemini", "gemini/gemini-2.5-flash", "gemini/gemini-2.5-flash"),
    ("bedrock", "converse/anthropic.claude-v2", "bedrock/converse/anthropic.claude-v2"),
])
def test_the_model_string_litellm_gets_is_rasa_s(provider, model, string):
    assert providers.litellm_model(provider, model) == string


@pytest.mark.parametrize(("provider", "api_base", "env", "url"), [
    ("groq", None, {}, "https://api.groq.com/openai/v1"),
    ("groq", None, {"GROQ_API_BASE": "http://127.0.0.1:9/openai/v1"},
     "http://127.0.0.1:9/openai/v1"),
    ("mistral", "https://api.mistral.ai", {}, "https://api.mistral.ai/v1"),
    ("mistral", "http://127.0.0.1:9/v1/chat/completions", {}, "http://127.0.0.1:9/v1"),
    ("huggingface", "https://x.endpoints.huggingface.cloud", {},
     "https://x.endpoints.huggingface.cloud/v1"),
    ("cohere", None, {}, "https://api.cohere.ai/compatibility/v1"),
    ("deepinfra", None, {}, "https://api.deepinfra.com/v1/openai"),
])
def test_a_hosted_provider_s_address(monkeypatch, provider, api_base, env, url):
    for variable in ("GROQ_API_BASE", "MISTRAL_API_BASE", "HF_API_BASE",
                     "HUGGINGFACE_API_BASE", "DEEPINFRA_API_BASE"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    assert base_url(ModelSettings(model="m", provider=provider, api_base=api_base)) == url


def test_a_hosted_provider_s_key_comes_from_the_first_variable_set(monkeypatch):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    monkeypatch.setenv("TOGETHER_AI_API_KEY", "third")
    monkeypatch.setenv("TOGETHERAI_API_KEY", "second")
    assert api_key(ModelSettings(model="m", provider="together_ai")) == "second"
