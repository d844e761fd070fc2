"""The settings of one model, resolved from a model group or an inline ``llm:`` mapping, and
where a provider's requests go (URL, headers, key).

Providers: ``openai`` (and ``litellm_proxy``, ``ollama``, ``self-hosted``, ``rasa``: any
OpenAI-compatible server at ``api_base``) post to ``{api_base}/chat/completions`` with a bearer
key; ``azure`` posts to ``{api_base}/openai/deployments/{deployment}/chat/completions
?api-version={api_version}`` with an ``api-key`` header.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from subagents.config._base import resolve_env
from subagents.config.endpoints import (
    CLIENT_MODEL_KEYS,
    CONSTRAINED_BY_DEFAULT,
    ROUTING_MODEL_KEYS,
    ROUTING_STRATEGIES,
    normalize_model_keys,
)
from subagents.exceptions import ConfigError, ConfigIssue, LLMError
from subagents.llm.routing import RouterSettings

if TYPE_CHECKING:
    from subagents.config.endpoints import EndpointsConfig, ModelConfig, ModelGroup

DEFAULT_MODEL_SETTINGS: dict[str, Any] = {
    "provider": "openai", "model": "gpt-4.1-mini", "temperature": 1.0,
    "max_completion_tokens": 256, "timeout": 7.0,
}


@dataclass
class ModelSettings:
    """Resolved settings of one model (from a model group or an inline ``llm:`` mapping)."""

    model: str
    provider: str = "openai"
    api_base: str | None = None
    api_key: str | None = None
    """``${ENV}`` reference or None (then OPENAI_API_KEY); resolved when the client is built."""
    timeout: float = 7.0
    max_retries: int = 2
    options: dict[str, Any] = field(default_factory=dict)
    """Request-body options: temperature, max_completion_tokens, reasoning_effort, ..."""
    api_version: str | None = None
    """Azure: the ``api-version`` query parameter (else ``AZURE_API_VERSION``)."""
    deployment: str | None = None
    """Azure: the deployment that is called (``model`` only names it)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers (``extra_headers``, ``organization``)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Merged into the request body as is."""
    routing: dict[str, Any] = field(default_factory=dict)
    """What a group's router reads: weight, rpm, tpm, input/output_cost_per_token."""
    structured_output: str = "off"
    """``auto``, ``json_schema`` or ``off`` (see :mod:`subagents.llm.structured`)."""
    group: RoutedGroup | None = field(default=None, repr=False, compare=False)
    """Set when these are the first model of a group with a router: the whole group."""

    @property
    def called_model(self) -> str:
        """What the request names: the deployment for azure, else the model."""
        return (self.deployment or self.model) if self.provider == "azure" else self.model

    def members(self) -> list[ModelSettings]:
        """Every model a client built from these settings may call (the group's, or these)."""
        return list(self.group.models) if self.group is not None else [self]

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ModelSettings:
        """Settings from a model config mapping, over the defaults for the openai provider."""
        data = normalize_model_keys({k: v for k, v in data.items() if v is not None})
        merged = dict(DEFAULT_MODEL_SETTINGS) if data.get("provider", "openai") == "openai" else {}
        merged.update(data)
        known = {"provider", "model", "api_base", "api_key", "timeout", "max_retries",
                 "model_group", "api_type", "api_version", "deployment",
                 "structured_output"} | CLIENT_MODEL_KEYS
        provider = str(merged.get("provider") or "openai")
        headers = {str(k): str(v) for k, v in (merged.get("extra_headers") or {}).items()}
        if merged.get("organization"):
            headers.setdefault("OpenAI-Organization", str(merged["organization"]))
        return cls(model=str(merged.get("model") or merged.get("deployment") or ""),
                   provider=provider,
                   api_base=merged.get("api_base"), api_key=merged.get("api_key"),
                   timeout=float(merged.get("timeout") or 7.0),
                   max_retries=int(merged.get("max_retries", 2)),
                   options={k: v for k, v in merged.items()
                            if k not in known and k not in ROUTING_MODEL_KEYS},
                   api_version=merged.get("api_version"), deployment=merged.get("deployment"),
                   headers=headers, extra_body=dict(merged.get("extra_body") or {}),
                   routing={k: v for k, v in merged.items() if k in ROUTING_MODEL_KEYS},
                   structured_output=str(merged.get("structured_output") or (
                       "auto" if provider in CONSTRAINED_BY_DEFAULT else "off")))


@dataclass
class RoutedGroup:
    """A model group whose calls a router spreads over its models."""

    id: str
    router: RouterSettings
    models: list[ModelSettings]


def resolve_model_settings(llm: dict[str, Any] | None, endpoints: EndpointsConfig | None,
                           *, where: str = "") -> ModelSettings:
    """``{model_group: id}`` -> the group's first model; inline mapping as is; None -> defaults."""
    llm = llm or {}
    if "model_group" in llm:
        group = endpoints.model_group(str(llm["model_group"])) if endpoints else None
        if group is None:
            raise ConfigError(ConfigIssue(
                "agent.validation.llm.unknown_model_group",
                f"model group {llm['model_group']!r} cannot be resolved", file=where or None,
                key="llm.model_group", hint="define it under model_groups in endpoints.yml"))
        return _group_settings(group, where)
    if not llm and endpoints and endpoints.model_groups:
        return resolve_model_settings({"model_group": endpoints.model_groups[0].id}, endpoints)
    return ModelSettings.from_mapping(dict(llm))


def _model_data(model: ModelConfig) -> dict[str, Any]:
    data = model.model_dump(exclude_none=True)
    if model.deployment:
        data["deployment"] = model.deployment
    data.update(model.request_options())
    return data


def _group_settings(group: ModelGroup, where: str) -> ModelSettings:
    """The first model without a router (as Rasa does); with one, every model, routed."""
    if group.router is None or len(group.models) == 1:
        return ModelSettings.from_mapping(_model_data(group.models[0]))
    try:
        router = RouterSettings.from_mapping(group.router)
    except (ValueError, TypeError) as exc:
        strategy = group.router.get("routing_strategy")
        code = "llm.router.unknown_strategy" if strategy is not None and \
            strategy not in ROUTING_STRATEGIES else "llm.router.invalid"
        raise ConfigError(ConfigIssue(
            code, f"model group {group.id!r}: {exc}",
            file=where or None, key="router.routing_strategy",
            hint="use simple-shuffle, least-busy, latency-based-routing, usage-based-routing "
                 "or cost-based-routing")) from exc
    models = []
    for model in group.models:
        data = _model_data(model)
        data.setdefault("max_retries", 0)  # the next model is the retry
        models.append(ModelSettings.from_mapping(data))
    models[0].group = RoutedGroup(group.id, router, models)
    return models[0]


KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "azure": "AZURE_API_KEY",
                  "litellm_proxy": "LITELLM_PROXY_API_KEY"}
"""The environment variable a provider's key comes from when the model sets no api_key."""


def api_key(settings: ModelSettings) -> str:
    """The key to send: ``api_key`` (an ``${ENV}`` reference), else the provider's variable; a
    local OpenAI-compatible server (an ``api_base`` that is not azure's, or ollama) needs none.

    Raises:
        ConfigError: no key where one is needed (``llm.api_key_missing``), or the variable the
            reference names is not set (``config.env_var_missing``).
    """
    if settings.api_key:
        return resolve_env(settings.api_key, what=f"the api_key of model {settings.model!r}")
    variable = KEY_VARIABLES.get(settings.provider)
    if variable and os.environ.get(variable):
        return os.environ[variable]
    if settings.provider == "ollama" or (settings.api_base and settings.provider != "azure"):
        return "not-needed"  # local OpenAI-compatible servers often need no key
    variable = variable or "OPENAI_API_KEY"
    raise ConfigError(ConfigIssue(
        "llm.api_key_missing", f"no API key for model {settings.model!r}",
        hint=f"export {variable}, or set api_key: ${{MY_KEY}} / api_base on the model"))


def _setting(settings: ModelSettings, value: str | None, key: str) -> str | None:
    """A string setting with its ``${ENV}`` references resolved."""
    if value is None:
        return None
    return resolve_env(value, what=f"the {key} of model {settings.model!r}")


def base_url(settings: ModelSettings) -> str:
    """Where ``/chat/completions`` lives (not used for azure)."""
    provider, base = settings.provider, _setting(settings, settings.api_base, "api_base")
    if not base and provider == "openai":
        base = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    if not base and provider == "ollama":
        base = "http://localhost:11434"
    if not base:
        raise ConfigError(ConfigIssue(
            "llm.api_base_missing", f"the {provider} model {settings.model!r} has no "
            "api_base", hint="set api_base to the server's address, e.g. "
            "http://localhost:8000/v1"))
    base = base.rstrip("/")
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise LLMError(f"the api_base of model {settings.model!r} is not an http(s) URL "
                       f"({base!r}): write it as http://host:port/v1 or https://...",
                       code="llm.api_base_invalid")
    if provider == "ollama" and not base.endswith("/v1"):
        base += "/v1"  # Ollama's OpenAI-compatible API
    return base


def azure_endpoint(settings: ModelSettings) -> tuple[str, str, str]:
    """(endpoint, deployment, api version) of an azure model, with the env fallbacks."""
    base = _setting(settings, settings.api_base, "api_base") or os.environ.get("AZURE_API_BASE")
    version = _setting(settings, settings.api_version, "api_version") or os.environ.get(
        "AZURE_API_VERSION")
    for value, key, variable in ((base, "api_base", "AZURE_API_BASE"),
                                 (version, "api_version", "AZURE_API_VERSION")):
        if not value:
            raise ConfigError(ConfigIssue(
                f"llm.azure.{key}_missing", f"the azure model {settings.called_model!r} "
                f"has no {key}", hint=f"set {key} on the model or export {variable}"))
    assert base is not None
    assert version is not None
    return base.rstrip("/"), settings.called_model, version


def endpoint(settings: ModelSettings, path: str = "/chat/completions"
             ) -> tuple[str, dict[str, str]]:
    """The URL of ``path`` (``/chat/completions`` or ``/embeddings``) and the request headers.

    Raises:
        ConfigError: a key, address or header the model needs is missing or malformed.
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.provider == "azure":
        base, deployment, version = azure_endpoint(settings)
        url = (f"{base}/openai/deployments/{urllib.parse.quote(deployment, safe='')}"
               f"{path}?{urllib.parse.urlencode({'api-version': version})}")
        headers["api-key"] = api_key(settings)
    else:
        url = base_url(settings) + path
        headers["Authorization"] = f"Bearer {api_key(settings)}"
        if settings.provider == "openai":
            for variable, header in (("OPENAI_ORG_ID", "OpenAI-Organization"),
                                     ("OPENAI_PROJECT_ID", "OpenAI-Project")):
                if os.environ.get(variable):
                    headers[header] = os.environ[variable]
    for name, value in settings.headers.items():
        value = resolve_env(value, what=f"the header {name} of model {settings.model!r}")
        if any(c in name or c in value for c in "\r\n\0"):
            raise LLMError(f"the model's request header {name!r} has a line break or a NUL "
                           "character: fix extra_headers (or the key) in its settings",
                           code="llm.header_invalid")
        headers[name] = value
    return url, headers
