"""``endpoints.yml``: model groups, MCP servers, stores, action endpoint."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from subagents.config._base import StrictModel, check_secret, is_env_ref, looks_secret
from subagents.config.mcp_sessions import SessionMode, is_template, template_names

SUPPORTED_PROVIDERS = ("openai", "azure", "self-hosted", "rasa", "ollama", "litellm_proxy")
"""Providers reached through an OpenAI-compatible chat-completions API."""
MODEL_KEY_ALIASES = {
    "request_timeout": "timeout", "model_name": "model", "type": "provider",
    "_type": "provider", "openai_api_type": "api_type", "openai_api_base": "api_base",
    "openai_api_version": "api_version", "deployment_name": "deployment", "engine": "deployment",
}
"""Older spellings Rasa still accepts, and the key each one stands for."""
REQUEST_OPTIONS = frozenset({
    "temperature", "top_p", "max_completion_tokens", "max_tokens", "reasoning_effort",
    "frequency_penalty", "presence_penalty", "seed", "stop", "logit_bias", "logprobs",
    "top_logprobs", "user", "response_format", "parallel_tool_calls", "tool_choice",
    "service_tier", "store", "metadata", "verbosity", "extra_headers", "extra_body",
    "organization", "use_chat_completions_endpoint", "drop_params", "cache"})
"""Well-known request options (any other key is passed through unless it looks misspelled)."""
FORBIDDEN_MODEL_KEYS = frozenset({"stream", "n"})
ROUTING_MODEL_KEYS = frozenset({"weight", "rpm", "tpm", "input_cost_per_token",
                                "output_cost_per_token"})
"""Per-model keys read by a group's router (never sent to the provider)."""
CLIENT_MODEL_KEYS = frozenset({"extra_headers", "extra_body", "organization", "drop_params",
                               "cache", "use_chat_completions_endpoint"})
"""Keys that shape the request (headers, body) or are accepted and ignored; never sent as is."""
STRUCTURED_OUTPUT_MODES = ("auto", "json_schema", "off")
"""The values of a model's ``structured_output``."""
CONSTRAINED_BY_DEFAULT = frozenset({"self-hosted", "ollama", "rasa"})
"""Providers whose models use ``structured_output: auto`` unless they say otherwise (small
self-hosted models need their output constrained; hosted ones follow the text formats)."""
MODEL_KEYS = frozenset({"provider", "model", "api_base", "api_key", "timeout", "max_retries",
                        "api_type", "api_version", "deployment", "model_group",
                        "structured_output"}
                       | set(MODEL_KEY_ALIASES) | REQUEST_OPTIONS | ROUTING_MODEL_KEYS)
ROUTING_STRATEGIES = ("simple-shuffle", "least-busy", "latency-based-routing",
                      "usage-based-routing", "usage-based-routing-v2", "cost-based-routing")
"""The values of ``router.routing_strategy`` (``simple-shuffle`` is the default)."""
ROUTER_KEYS = frozenset({"routing_strategy", "routing_strategy_args", "num_retries",
                         "allowed_fails", "cooldown_time", "retry_after", "timeout",
                         "redis_host", "redis_port", "redis_password", "redis_url",
                         "cache_responses"})
"""Keys of a model group's ``router:`` mapping."""

REPHRASER_CLASS = "ContextualResponseRephraser"
"""The class name Rasa 3.7 configured the rephraser with (``rasa_plus.ml.<this>``)."""


def is_rephraser_type(kind: Any) -> bool:
    """Whether ``nlg.type`` asks for the response rephraser: ``rephrase`` (Rasa 3.8 on), or a
    dotted path to Rasa's ``ContextualResponseRephraser`` class (Rasa 3.7's
    ``rasa_plus.ml.ContextualResponseRephraser``)."""
    return isinstance(kind, str) and (kind == "rephrase"
                                      or kind.rsplit(".", 1)[-1] == REPHRASER_CLASS)


def normalize_model_keys(data: dict[str, Any]) -> dict[str, Any]:
    """Map Rasa's older key spellings to current ones, as Rasa does.

    ``max_tokens`` becomes ``max_completion_tokens`` for the ``openai`` and ``azure`` providers
    (self-hosted servers keep ``max_tokens``).
    """
    out = dict(data)
    for old, new in MODEL_KEY_ALIASES.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    provider = str(out.get("provider", "openai"))
    if "max_tokens" in out and provider in ("openai", "azure"):
        value = out.pop("max_tokens")
        out.setdefault("max_completion_tokens", value)
    return out


def model_key_problems(data: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
    """Problems of one model's settings: ``(key, code, message, hint)`` each.

    An unsupported provider, ``stream``/``n`` (set by subagents itself), and an unknown key that
    looks like a misspelling of a known one (with a "did you mean"); any other unknown key is a
    request option passed to the provider.
    """
    problems: list[tuple[str, str, str, str | None]] = []
    provider = data.get("provider", data.get("type", data.get("_type", "openai")))
    if str(provider) not in SUPPORTED_PROVIDERS:
        key = next((k for k in ("provider", "type", "_type") if k in data), "provider")
        problems.append((key, "llm.provider.unsupported", f"provider {provider!r} is not "
                         f"supported (supported: {', '.join(SUPPORTED_PROVIDERS)})",
                         "any OpenAI-compatible server works with provider: self-hosted and "
                         "api_base"))
    for key in data:
        if key in FORBIDDEN_MODEL_KEYS:
            problems.append((key, "llm.option.forbidden", f"{key!r} cannot be set: subagents "
                             "decides it per call", f"remove {key!r}"))
        elif key not in MODEL_KEYS:
            close = difflib.get_close_matches(key, sorted(MODEL_KEYS), n=1, cutoff=0.75)
            if close:
                problems.append((key, "llm.option.unknown", f"unknown model option {key!r}",
                                 f"did you mean {close[0]!r}?"))
    if str(provider) == "azure" and not (data.get("deployment") or data.get("deployment_name")
                                         or data.get("engine")):
        problems.append(("provider", "llm.azure.deployment_missing",
                         "an azure model needs 'deployment'", "add deployment: <name>"))
    if str(provider) in ("self-hosted", "rasa") and not (data.get("api_base")
                                                        or data.get("openai_api_base")):
        problems.append(("provider", "llm.self_hosted.api_base_missing",
                         f"a {provider} model needs 'api_base' (the server's address)",
                         "add api_base: http://<host>:<port>/v1"))
    api_type = data.get("api_type", data.get("openai_api_type"))
    if api_type is not None and str(provider) in ("openai", "azure") \
            and str(api_type) != str(provider):
        key = "api_type" if "api_type" in data else "openai_api_type"
        problems.append((key, "llm.api_type.mismatch", f"api_type {api_type!r} does not match "
                         f"provider {provider!r}", "for Azure OpenAI write provider: azure; "
                         "otherwise remove api_type"))
    mode = data.get("structured_output")
    if mode is not None and mode not in STRUCTURED_OUTPUT_MODES:
        problems.append(("structured_output", "llm.structured_output.invalid",
                         f"structured_output {mode!r} is not a mode",
                         f"use one of: {', '.join(STRUCTURED_OUTPUT_MODES)}"))
    if data.get("use_chat_completions_endpoint") is False:
        problems.append(("use_chat_completions_endpoint", "llm.completions_endpoint.unsupported",
                         "only the chat completions endpoint is supported",
                         "remove use_chat_completions_endpoint: false"))
    return problems


def router_problems(router: Any, models: int) -> list[tuple[tuple[str, ...], str, str,
                                                           str | None, str]]:
    """Problems of a model group's ``router:`` mapping: ``(key path, code, message, hint,
    severity)`` each.

    An unknown routing strategy is an error (with a "did you mean"); an unknown router key, a
    router on a group of one model and ``cache_responses`` (not supported) are warnings.
    """
    if not isinstance(router, dict):
        return [((), "llm.router.invalid", "router must be a mapping of router settings",
                 "for example router: {routing_strategy: simple-shuffle}", "error")]
    problems: list[tuple[tuple[str, ...], str, str, str | None, str]] = []
    strategy = router.get("routing_strategy", ROUTING_STRATEGIES[0])
    if strategy not in ROUTING_STRATEGIES:
        close = difflib.get_close_matches(str(strategy), ROUTING_STRATEGIES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of: " \
            f"{', '.join(ROUTING_STRATEGIES)}"
        problems.append((("routing_strategy",), "llm.router.unknown_strategy",
                         f"unknown routing strategy {strategy!r}", hint, "error"))
    for key in router:
        if key not in ROUTER_KEYS:
            close = difflib.get_close_matches(str(key), sorted(ROUTER_KEYS), n=1, cutoff=0.75)
            problems.append(((str(key),), "llm.router.unknown_key", f"unknown router key {key!r}"
                             " (ignored)", f"did you mean {close[0]!r}?" if close else None,
                             "warning"))
    for key, kind in (("num_retries", int), ("allowed_fails", int), ("cooldown_time", float)):
        value = router.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | kind)
                                  or value < 0):
            problems.append(((key,), "llm.router.invalid", f"{key} must be a number >= 0",
                             None, "error"))
    if router.get("cache_responses"):
        problems.append((("cache_responses",), "llm.router.cache_unsupported",
                         "cache_responses is not supported: every call reaches a model",
                         "remove cache_responses", "warning"))
    if models < 2:
        problems.append(((), "llm.router.single_model", "the router has one model to route to: "
                         "calls go to it and nothing fails over", "add models to the group, "
                         "or remove router", "warning"))
    return problems


class ModelConfig(StrictModel):
    """One model of a group. Keys not listed are sent to the provider as request options.

    Rasa's older spellings are accepted and mapped (``request_timeout`` -> ``timeout``,
    ``model_name`` -> ``model``, ``max_tokens`` -> ``max_completion_tokens`` for openai/azure,
    ``deployment_name``/``engine`` -> ``deployment``, ...).
    """

    model_config = StrictModel.model_config | {"extra": "allow"}

    provider: str = "openai"
    model: str = ""
    api_base: str | None = None
    api_key: str | None = None
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_retries: int | None = Field(default=None, ge=0)
    temperature: float | None = None
    max_completion_tokens: int | None = None
    api_type: str | None = None
    """Azure: ``azure``; consumed here, never sent."""
    api_version: str | None = None
    """Azure API version."""
    deployment: str | None = Field(default=None, exclude=True)
    """Azure deployment name (what is called instead of ``model``)."""
    structured_output: Literal["auto", "json_schema", "off"] | None = None
    """Constrained output: the command generator's reply as JSON under a schema, agents' tool
    calls under a schema where the server has no native tool calling (``auto``: what the server
    supports; default ``auto`` for self-hosted, ollama and rasa models, ``off`` for others)."""

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return normalize_model_keys(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _model_named(self) -> ModelConfig:
        if not self.model and not self.deployment:
            raise ValueError("a model needs 'model' (or 'deployment' for azure)")
        return self

    @field_validator("api_key")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        return check_secret(value, "api_key")

    def request_options(self) -> dict[str, Any]:
        """Extra keys (e.g. ``reasoning_effort``) passed through to the request body."""
        return dict(self.model_extra or {})


class ModelGroup(StrictModel):
    """A named list of models (``model_groups`` in endpoints.yml)."""

    id: str
    models: list[ModelConfig] = Field(min_length=1)
    router: dict[str, Any] | None = None
    """With a router, calls are spread over the models by ``routing_strategy`` and fail over to
    the next model; without one, only the first model is called (as in Rasa)."""


class MetaFromSlot(StrictModel):
    """Send the value of ``slot`` to the MCP server as the metadata key ``param``."""

    slot: str
    """The slot whose current value is sent."""
    param: str
    """The metadata key it is sent under."""


class MetaMap(StrictModel):
    """Metadata sent with every tool call to a server: static values, then slot values."""

    static: dict[str, str] = Field(default_factory=dict)
    from_slots: list[MetaFromSlot] = Field(default_factory=list)


class OAuthConfig(StrictModel):
    """OAuth settings of an MCP server."""

    token_url: str | None = None
    """Without it the token endpoint is discovered from the server's OAuth metadata."""
    grant: Literal["client_credentials", "authorization_code",
                   "identity_assertion"] = "client_credentials"
    """``authorization_code``: a person logs in once with ``subagents mcp login <server>``;
    ``identity_assertion``: cross-app access (the user's ID token from the enterprise identity
    provider is exchanged there for an identity assertion, which buys the access token)."""
    client_id: str | None = None
    """Required for client credentials; for a login, omit it to register dynamically."""
    client_secret: str | None = None
    scope: str | None = None
    audience: str | None = None
    timeout: float | None = None
    auth_method: Literal["client_secret_post", "client_secret_basic",
                         "private_key_jwt"] | None = None
    """How the token request authenticates the client. Unset: HTTP Basic, unless the
    authorization server's metadata lists only ``client_secret_post`` (RFC 6749 §2.3.1)."""
    issuer: str | None = None
    resource: str | None = None
    private_key: str | None = None
    """PEM private key for ``private_key_jwt``, as a ``${ENV_VAR}`` reference."""
    signing_algorithm: str = "RS256"
    client_metadata_url: str | None = None
    """HTTPS address of this client's metadata document, used as its client id by servers that
    support client ID metadata documents (instead of registering)."""
    redirect_port: int = Field(default=0, ge=0, le=65535)
    """Port of the login's local callback (``http://127.0.0.1:<port>/callback``); 0 = any."""
    per_user: bool = False
    """Each end user authorizes the server themselves (consent link in the conversation);
    needs ``session: {per_user: ...}`` and ``public_url`` (see mcp/consent.py)."""
    public_url: str | None = None
    """Where users' browsers reach ``subagents serve`` (``https://...`` or ``${ENV_VAR}``); the
    consent callback is ``<public_url>/oauth/callback``."""
    id_token: str | None = None
    """``identity_assertion``: the user's ID token (``${ENV_VAR}``, or a conversation template
    such as ``{{ metadata.id_token }}``)."""
    idp_token_url: str | None = None
    """``identity_assertion``: the identity provider's token endpoint (RFC 8693 exchange)."""
    idp_client_id: str | None = None
    idp_client_secret: str | None = None

    @field_validator("client_secret", "private_key", "idp_client_secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        return check_secret(value, "this key")

    @field_validator("id_token")
    @classmethod
    def _id_token(cls, value: str | None) -> str | None:
        if value is not None and is_template(value):
            template_names(value)
            return value
        return check_secret(value, "the ID token")

    @model_validator(mode="after")
    def _credentials(self) -> OAuthConfig:
        if self.per_user and self.grant != "authorization_code":
            raise ValueError("per_user consent needs grant: authorization_code")
        if self.grant == "identity_assertion":
            missing = [key for key in ("client_id", "client_secret", "issuer", "id_token",
                                       "idp_token_url") if not getattr(self, key)]
            if missing:
                raise ValueError("cross-app access (grant: identity_assertion) needs "
                                 + ", ".join(repr(key) for key in missing))
            if self.auth_method == "private_key_jwt":
                raise ValueError("cross-app access cannot use private_key_jwt")
            return self
        if self.grant == "authorization_code":
            if self.auth_method == "private_key_jwt":
                raise ValueError("a login (authorization_code) cannot use private_key_jwt")
            return self
        if not self.client_id:
            raise ValueError("client credentials need 'client_id'")
        if self.auth_method == "private_key_jwt":
            if not self.private_key:
                raise ValueError("auth_method private_key_jwt needs 'private_key'")
        elif not self.client_secret:
            raise ValueError(f"auth_method {self.auth_method} needs 'client_secret'"
                             if self.auth_method else
                             "client credentials need 'client_secret' (or auth_method "
                             "private_key_jwt with 'private_key')")
        return self


class McpSamplingConfig(StrictModel):
    """Lets the server ask our model for a completion (MCP sampling); off unless configured."""

    model_group: str
    max_tokens: int = Field(default=1000, gt=0)
    """Cap on the completion length, whatever the server asks for."""


class McpServerConfig(StrictModel):
    """An MCP server reachable over streamable HTTP, SSE or stdio, with api_key, token, OAuth,
    a custom auth module or plain headers (secrets always as ``${ENV_VAR}``)."""

    name: str
    type: Literal["http", "https", "sse", "stdio"] = "http"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    meta_map: MetaMap | None = None
    """Metadata sent with every tool call (static values and slot values)."""
    pre_call_hook: str | None = None
    """``pkg.mod.func`` called before each tool call; the metadata it returns is sent too."""
    api_key: str | None = None
    """Sent in ``header_name``, formatted by ``header_format``."""
    header_name: str = "Authorization"
    header_format: str = "Bearer {key}"
    """How the API key is written into the header; ``{key}`` stands for the key."""
    token: str | None = None
    """Sent as ``Authorization: Bearer <token>``."""
    oauth: OAuthConfig | None = None
    module: str | None = None
    """``pkg.mod.Class`` whose ``get_headers()`` (sync or async) returns the headers to send."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request."""
    timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """Connect / HTTP timeout in seconds."""
    roots: list[str] = Field(default_factory=list)
    """Directories (relative to the project) or ``file://`` URIs offered to the server as roots."""
    sampling: McpSamplingConfig | None = None
    resources: bool = False
    """Offer agents a ``read_resource`` tool for this server's resources."""
    session: SessionMode = "shared"
    """``shared``, ``per_conversation`` or ``{per_user: metadata.<key>}`` (see mcp_sessions)."""
    max_sessions: int = Field(default=100, ge=1)
    """Per-conversation / per-user sessions open at once; the least recently used idle one
    is closed to make room."""
    session_idle_timeout: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    """Seconds after which an unused per-conversation / per-user session is closed."""
    tools: list[str] | None = None
    """The names of the tools the server offers, if declared: ``validate`` checks the flows'
    MCP tool steps against them without connecting (nothing else uses this list)."""

    @field_validator("type", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_key", "token")
    @classmethod
    def _secret(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.field_name == "token" and value is not None and is_template(value):
            template_names(value)
            return value
        return check_secret(value, "this key")

    @field_validator("headers", "env")
    @classmethod
    def _secret_map(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if is_template(str(item)):
                template_names(str(item))
                continue
            if looks_secret(name) and not is_env_ref(item) and "${" not in str(item):
                check_secret(item, f"the value of {name!r}")
        return {k: str(v) for k, v in value.items()}

    @model_validator(mode="after")
    def _transport(self) -> McpServerConfig:
        if self.type == "stdio":
            if not self.command:
                raise ValueError("a stdio MCP server needs 'command' (and optional args/env/cwd)")
        elif not self.url:
            raise ValueError(f"an MCP server of type {self.type!r} needs 'url'")
        if any(is_template(v) for v in self.env.values()):
            raise ValueError("mcp.template.not_allowed: env values cannot be templates; only "
                             "headers and token can")
        if self.uses_templates and self.session == "shared":
            raise ValueError("mcp.template.shared_session: headers, token or id_token with "
                             "{{ ... }} templates need 'session: per_conversation' or "
                             "'session: {per_user: metadata.<key>}'")
        auth = [k for k in ("api_key", "token", "oauth", "module") if getattr(self, k)]
        if len(auth) > 1:
            raise ValueError(f"choose one authentication method, not {', '.join(auth)}")
        return self

    def _templatable(self) -> list[str]:
        """The values that may be templates: headers, the token, the OAuth ID token."""
        return [*self.headers.values(), self.token or "",
                (self.oauth.id_token or "") if self.oauth else ""]

    @property
    def uses_templates(self) -> bool:
        """Whether headers, the token or the ID token are templates over the conversation."""
        return any(is_template(v) for v in self._templatable())

    def template_refs(self) -> list[tuple[str, str]]:
        """Every ``(source, name)`` the templates of headers, token and ID token use."""
        return [pair for v in self._templatable() for pair in template_names(v)]

    @property
    def address(self) -> str:
        """The server's address: its command line (stdio) or its URL."""
        if self.type == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        return self.url or ""


class StoreConfig(StrictModel):
    """``tracker_store`` or ``lock_store`` settings: a ``type`` plus its own keys."""

    model_config = StrictModel.model_config | {"extra": "allow"}
    type: str = "sql"
    """Tracker store: ``sql`` (SQLite or PostgreSQL) or ``memory``; lock store: ``redis``, or
    anything else for locks within the process."""


class ActionEndpoint(StrictModel):
    """Where custom actions run: a webhook ``url`` or a Python ``actions_module``."""

    model_config = StrictModel.model_config | {"extra": "allow"}
    url: str | None = None
    actions_module: str | None = None


class EndpointsConfig(StrictModel):
    """Everything in ``endpoints.yml`` that subagents reads; other Rasa keys are accepted."""

    model_config = StrictModel.model_config | {"extra": "allow"}

    model_groups: list[ModelGroup] = Field(default_factory=list)
    mcp_servers: list[McpServerConfig] | None = None
    tracker_store: StoreConfig | None = None
    lock_store: StoreConfig | None = None
    action_endpoint: ActionEndpoint | None = None

    def model_group(self, group_id: str) -> ModelGroup | None:
        """The model group with id ``group_id``, or None."""
        return next((g for g in self.model_groups if g.id == group_id), None)

    def mcp_server(self, name: str) -> McpServerConfig | None:
        """The MCP server called ``name``, or None."""
        return next((s for s in self.mcp_servers or [] if s.name == name), None)
