"""The model providers subagents reaches, how it reaches each, and what each needs.

Three kinds, chosen by a model's ``provider`` (the names and keys Rasa uses):

* **OpenAI-compatible servers** (``openai``, ``azure``, ``self-hosted``, ``rasa``, ``ollama``,
  ``litellm_proxy``): called directly at ``api_base``.
* **Hosted OpenAI-compatible providers** (:data:`HOSTED`: ``groq``, ``mistral``, ``cohere``,
  ...): called directly too, at the provider's known address, with its key variable; their
  request spelling differences are in their entry.
* **Providers reached through LiteLLM** (:data:`LITELLM_PROVIDERS`: ``anthropic``, ``gemini``,
  ``vertex_ai``, ``bedrock``, ...): LiteLLM (the optional ``providers`` extra) translates the
  OpenAI-shaped call into the provider's own API; every other key of the model is handed to
  it as is, as Rasa does (``vertex_project``, ``aws_region_name``, ...).

Nothing here imports LiteLLM: ``validate`` checks its presence with
:func:`importlib.util.find_spec`, and the keys and variables each provider needs come from the
table :data:`NEEDS` (the variables Rasa's providers read).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

OPENAI_COMPATIBLE = ("openai", "azure", "self-hosted", "rasa", "ollama", "litellm_proxy")
"""Providers that are any OpenAI-compatible chat completions server."""
EXTRA_INSTALL = "pip install 'subagents[providers]'"
"""What installs LiteLLM, for messages."""


@dataclass(frozen=True)
class Hosted:
    """A hosted provider with an OpenAI-compatible chat completions API, called directly."""

    base_url: str
    """Its address (where ``/chat/completions`` lives) when neither ``api_base`` nor one of
    :attr:`base_variables` says otherwise."""
    key_variables: tuple[str, ...]
    """Where the key comes from when the model sets no ``api_key``, first set wins."""
    base_variables: tuple[str, ...] = ()
    """Environment variables that replace :attr:`base_url`."""
    stream_usage: bool = True
    """Whether it accepts ``stream_options: {include_usage: true}`` (else a stream reports
    usage on its own, or not at all)."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Request keys it spells differently (OpenAI's name -> its own)."""
    ensure_v1: bool = False
    """``/v1`` is added to an ``api_base`` that lacks it (as LiteLLM does for it)."""


HOSTED: dict[str, Hosted] = {
    "groq": Hosted("https://api.groq.com/openai/v1", ("GROQ_API_KEY",), ("GROQ_API_BASE",)),
    "deepinfra": Hosted("https://api.deepinfra.com/v1/openai", ("DEEPINFRA_API_KEY",),
                        ("DEEPINFRA_API_BASE",)),
    "mistral": Hosted("https://api.mistral.ai/v1", ("MISTRAL_API_KEY",), ("MISTRAL_API_BASE",),
                      stream_usage=False, ensure_v1=True,
                      renamed={"max_completion_tokens": "max_tokens", "seed": "random_seed"}),
    "huggingface": Hosted("https://router.huggingface.co/v1", ("HF_TOKEN", "HUGGINGFACE_API_KEY"),
                          ("HF_API_BASE", "HUGGINGFACE_API_BASE"), ensure_v1=True),
    "cohere": Hosted("https://api.cohere.ai/compatibility/v1", ("COHERE_API_KEY", "CO_API_KEY"),
                     stream_usage=False, renamed={"max_completion_tokens": "max_tokens"}),
    "together_ai": Hosted("https://api.together.xyz/v1",
                          ("TOGETHER_API_KEY", "TOGETHERAI_API_KEY", "TOGETHER_AI_API_KEY",
                           "TOGETHER_AI_TOKEN"), ("TOGETHER_AI_API_BASE",)),
    "openrouter": Hosted("https://openrouter.ai/api/v1", ("OPENROUTER_API_KEY", "OR_API_KEY"),
                         ("OPENROUTER_API_BASE",)),
    "deepseek": Hosted("https://api.deepseek.com/v1", ("DEEPSEEK_API_KEY",),
                       ("DEEPSEEK_API_BASE",)),
    "xai": Hosted("https://api.x.ai/v1", ("XAI_API_KEY",), ("XAI_API_BASE",)),
}
"""Hosted OpenAI-compatible providers, with the addresses and variables LiteLLM (and so Rasa)
uses for them."""

LITELLM_PROVIDERS = frozenset({
    "anthropic", "anthropic_text", "gemini", "vertex_ai", "vertex_ai_beta", "bedrock",
    "bedrock_mantle", "sagemaker", "sagemaker_chat", "cohere_chat", "azure_ai", "azure_text",
    "fireworks_ai", "perplexity", "replicate", "ai21", "ai21_chat", "nlp_cloud", "petals",
    "oobabooga", "ollama_chat", "hosted_vllm", "vllm", "lm_studio", "llamafile", "xinference",
    "triton", "predibase", "databricks", "watsonx", "watsonx_text", "cloudflare", "nvidia_nim",
    "cerebras", "sambanova", "codestral", "dashscope", "moonshot", "volcengine", "friendliai",
    "featherless_ai", "galadriel", "nebius", "novita", "meta_llama", "nscale", "hyperbolic",
    "lambda_ai", "baseten", "github", "github_copilot", "snowflake", "heroku", "maritalk",
    "clarifai", "openai_like", "custom_openai", "text-completion-openai", "jina_ai", "voyage",
    "infinity", "oci", "minimax", "zai", "reka", "scaleway", "ovhcloud", "wandb",
    "vercel_ai_gateway", "inception", "gradient_ai", "datarobot", "docker_model_runner",
})
"""Chat (and embedding) providers that are reached through LiteLLM (besides :data:`HOSTED`,
which LiteLLM also knows)."""
LITELLM_NO_STREAMING = frozenset({"cohere", "cohere_chat"})
"""Providers whose LiteLLM route cannot read the provider's stream (LiteLLM 1.110 parses each
line of Cohere v2's server-sent events as bare JSON): called without streaming, the whole text
handed on at once."""
DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` sent through LiteLLM when the model sets none (LiteLLM would otherwise ask
Anthropic models for their maximum, 64,000 tokens)."""

Route = Literal["direct", "litellm", "unknown"]


def known(provider: str) -> bool:
    """Whether ``provider`` is one subagents reaches (directly or through LiteLLM)."""
    return provider in OPENAI_COMPATIBLE or provider in HOSTED or provider in LITELLM_PROVIDERS


def route(provider: str, api_base: str | None = None,
          env: Mapping[str, str] | None = None) -> Route:
    """How a model of ``provider`` is called: ``direct`` (our OpenAI-compatible client),
    ``litellm`` or ``unknown``. A cohere model whose ``api_base`` (or ``COHERE_API_BASE``) is
    the native chat URL (``.../v2/chat``, written for LiteLLM) goes through LiteLLM."""
    if provider in OPENAI_COMPATIBLE:
        return "direct"
    if provider == "cohere":
        base = api_base or (os.environ if env is None else env).get("COHERE_API_BASE") or ""
        return "litellm" if native_cohere_url(base) else "direct"
    if provider in HOSTED:
        return "direct"
    return "litellm" if provider in LITELLM_PROVIDERS else "unknown"


def native_cohere_url(base: str) -> bool:
    """Whether ``base`` is Cohere's native chat endpoint (``/v1/chat`` or ``/v2/chat``)."""
    return base.rstrip("/").endswith(("/v1/chat", "/v2/chat"))


def litellm_installed() -> bool:
    """Whether LiteLLM can be imported (found without importing it)."""
    return importlib.util.find_spec("litellm") is not None


def litellm_model(provider: str, model: str) -> str:
    """The model string LiteLLM is called with: ``<provider>/<model>`` unless ``model`` already
    starts with the provider, as Rasa builds it."""
    return model if model.startswith(f"{provider}/") else f"{provider}/{model}"


def hosted_model(provider: str, model: str) -> str:
    """The model name a hosted provider's API expects: the provider prefix LiteLLM would take
    off is taken off; a Hugging Face ``<inference provider>/<org>/<model>`` becomes the router's
    ``<org>/<model>:<inference provider>``."""
    model = model.removeprefix(f"{provider}/")
    if provider == "huggingface":
        parts = model.split("/")
        if len(parts) >= 3 and ":" not in parts[-1]:
            return f"{'/'.join(parts[1:])}:{parts[0]}"
    return model


# ---------------------------------------------------------------------------- what they need
@dataclass(frozen=True)
class Need:
    """Something a provider needs: any one of the model keys or environment variables."""

    what: str
    keys: tuple[str, ...]
    variables: tuple[str, ...]

    def met(self, data: Mapping[str, Any], env: Mapping[str, str]) -> bool:
        """Whether a model key or a variable provides it."""
        return any(data.get(k) not in (None, "") for k in self.keys) or any(
            env.get(v) for v in self.variables)

    def fix(self) -> str:
        """How to provide it."""
        ways = [f"export {' or '.join(self.variables)}"] if self.variables else []
        ways += [f"set {' or '.join(self.keys)} on the model"] if self.keys else []
        return ", or ".join(ways)


_KEY = ("api_key",)
NEEDS: dict[str, tuple[Need, ...]] = {
    "anthropic": (Need("an API key", _KEY, ("ANTHROPIC_API_KEY",)),),
    "gemini": (Need("an API key", _KEY, ("GEMINI_API_KEY", "GOOGLE_API_KEY")),),
    "vertex_ai": (Need("a Google Cloud project or credentials",
                       ("vertex_project", "vertex_ai_project", "vertex_credentials",
                        "vertex_ai_credentials"),
                       ("VERTEXAI_PROJECT", "VERTEXAI_CREDENTIALS",
                        "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT")),),
    "cohere_chat": (Need("an API key", _KEY, ("COHERE_API_KEY", "CO_API_KEY")),),
    "fireworks_ai": (Need("an API key", _KEY, ("FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY")),),
    "perplexity": (Need("an API key", _KEY, ("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY")),),
    **{name: (Need("an API key", _KEY, hosted.key_variables),) for name, hosted in HOSTED.items()},
}
"""What each provider needs before a call can succeed (the variables Rasa's providers read).
Providers not listed are not checked here (LiteLLM reports what it misses at the call)."""

BEDROCK_KEY_ID = Need("an access key id", ("aws_access_key_id",), ("AWS_ACCESS_KEY_ID",))
BEDROCK_SECRET = Need("a secret access key", ("aws_secret_access_key",),
                      ("AWS_SECRET_ACCESS_KEY",))
BEDROCK_REGION = Need("a region", ("aws_region_name",),
                      ("AWS_REGION_NAME", "AWS_REGION", "AWS_DEFAULT_REGION"))
BEDROCK_BEARER = Need("a bearer API key", _KEY, ("AWS_BEARER_TOKEN_BEDROCK",))


def missing(provider: str, data: Mapping[str, Any], env: Mapping[str, str] | None = None
            ) -> list[Need]:
    """What a ``provider`` model with the keys ``data`` lacks, given the environment ``env``
    (``os.environ`` by default). A model with an ``api_base`` of its own needs no key for a
    directly called provider (a local stand-in or proxy may want none).

    Bedrock (as Rasa checks it): once an access key id or secret is given, the id, the secret
    and a region are all needed; a bearer key, or none of them (an instance role, a profile),
    needs nothing more.
    """
    env = os.environ if env is None else env
    if provider in ("bedrock", "sagemaker", "sagemaker_chat"):
        if BEDROCK_BEARER.met(data, env) or not (BEDROCK_KEY_ID.met(data, env)
                                                 or BEDROCK_SECRET.met(data, env)):
            return []
        return [n for n in (BEDROCK_KEY_ID, BEDROCK_SECRET, BEDROCK_REGION)
                if not n.met(data, env)]
    if data.get("api_base") and route(provider, str(data["api_base"]), env) == "direct":
        return []
    if provider == "cohere" and route(provider, None, env) == "litellm":
        provider = "cohere_chat"
    return [need for need in NEEDS.get(provider, ()) if not need.met(data, env)]


def describe_missing(provider: str, needs: list[Need]) -> tuple[str, str]:
    """(message, fix) naming what a model lacks."""
    what = " and ".join(n.what for n in needs)
    return (f"the {provider} model lacks {what}",
            "; ".join(n.fix() for n in needs))


# ---------------------------------------------------------------------------- vertex regions
def replaced_vertex_location(model: str, location: str) -> str | None:
    """The region LiteLLM would call instead of ``location`` for the vertex_ai ``model`` (its
    model map lists the regions some partner models are served in, and it silently takes the
    first when the requested one is not listed); None when it keeps ``location`` or LiteLLM is
    not installed."""
    regions = _vertex_regions().get(model.removeprefix("vertex_ai/"))
    if not regions or location in regions:
        return None
    return regions[0]


@functools.cache
def _vertex_regions() -> dict[str, list[str]]:
    """Model -> supported regions, from the model map bundled with LiteLLM (read as a file,
    without importing LiteLLM)."""
    spec = importlib.util.find_spec("litellm")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "model_prices_and_context_window_backup.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return {name.removeprefix("vertex_ai/"): list(info["supported_regions"])
                for name, info in data.items()
                if name.startswith("vertex_ai/") and isinstance(info, dict)
                and isinstance(info.get("supported_regions"), list)
                and info["supported_regions"]}
    return {}
