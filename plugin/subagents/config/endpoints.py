"""``endpoints.yml``: model groups, MCP servers, stores, action endpoint."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ._base import StrictModel, check_secret, is_env_ref, looks_secret


class ModelConfig(StrictModel):
    """One model of a group. Keys not listed are sent to the provider as request options."""

    model_config = StrictModel.model_config | {"extra": "allow"}

    provider: str = "openai"
    model: str
    api_base: str | None = None
    api_key: str | None = None
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_retries: int | None = Field(default=None, ge=0)
    temperature: float | None = None
    max_completion_tokens: int | None = None

    @field_validator("api_key")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        return check_secret(value, "api_key")

    def request_options(self) -> dict[str, Any]:
        """Extra keys (e.g. ``reasoning_effort``) passed through to the request body."""
        return dict(self.model_extra or {})


class ModelGroup(StrictModel):
    id: str
    models: list[ModelConfig] = Field(min_length=1)
    router: dict[str, Any] | None = None


class MetaFromSlot(StrictModel):
    slot: str
    param: str


class MetaMap(StrictModel):
    static: dict[str, str] = Field(default_factory=dict)
    from_slots: list[MetaFromSlot] = Field(default_factory=list)


class OAuthConfig(StrictModel):
    token_url: str | None = None
    """Without it the token endpoint is discovered from the server's OAuth metadata."""
    grant: Literal["client_credentials", "authorization_code"] = "client_credentials"
    """``authorization_code``: a person logs in once with ``subagents mcp login <server>``."""
    client_id: str | None = None
    """Required for client credentials; for a login, omit it to register dynamically."""
    client_secret: str | None = None
    scope: str | None = None
    audience: str | None = None
    timeout: float | None = None
    auth_method: Literal["client_secret_post", "client_secret_basic",
                         "private_key_jwt"] = "client_secret_post"
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

    @field_validator("client_secret", "private_key")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        return check_secret(value, "this key")

    @model_validator(mode="after")
    def _credentials(self) -> OAuthConfig:
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
            raise ValueError(f"auth_method {self.auth_method} needs 'client_secret'")
        return self


class McpSamplingConfig(StrictModel):
    """Lets the server ask our model for a completion (MCP sampling); off unless configured."""

    model_group: str
    max_tokens: int = Field(default=1000, gt=0)
    """Cap on the completion length, whatever the server asks for."""


class McpServerConfig(StrictModel):
    """An MCP server reachable over streamable HTTP, SSE or stdio (DECISIONS D1, D2)."""

    name: str
    type: Literal["http", "https", "sse", "stdio"] = "http"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    meta_map: MetaMap | None = None
    pre_call_hook: str | None = None
    api_key: str | None = None
    header_name: str = "Authorization"
    header_format: str = "Bearer {key}"
    token: str | None = None
    oauth: OAuthConfig | None = None
    module: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """Connect / HTTP timeout in seconds."""
    roots: list[str] = Field(default_factory=list)
    """Directories (relative to the project) or ``file://`` URIs offered to the server as roots."""
    sampling: McpSamplingConfig | None = None
    resources: bool = False
    """Offer agents a ``read_resource`` tool for this server's resources."""

    @field_validator("type", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_key", "token")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        return check_secret(value, "this key")

    @field_validator("headers", "env")
    @classmethod
    def _secret_map(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
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
        auth = [k for k in ("api_key", "token", "oauth", "module") if getattr(self, k)]
        if len(auth) > 1:
            raise ValueError(f"choose one authentication method, not {', '.join(auth)}")
        return self

    @property
    def address(self) -> str:
        if self.type == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        return self.url or ""


class StoreConfig(StrictModel):
    model_config = StrictModel.model_config | {"extra": "allow"}
    type: str = "sql"


class ActionEndpoint(StrictModel):
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
        return next((g for g in self.model_groups if g.id == group_id), None)

    def mcp_server(self, name: str) -> McpServerConfig | None:
        return next((s for s in self.mcp_servers or [] if s.name == name), None)
