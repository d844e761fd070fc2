"""How a project reaches each provider stand-in (``tests/servers/providers``): the model entry a
Rasa user would write in ``endpoints.yml`` (with the endpoint override pointing at the
stand-in), the environment variables it reads, and what the provider's errors look like.

Shared by the tests that call the providers through our :class:`~subagents.llm.Model` and the
tests that drive a whole conversation through the assistant.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from subagents.config.providers import litellm_installed

from tests.servers.providers import (
    AnthropicServer,
    BedrockServer,
    CohereServer,
    GeminiServer,
    MistralServer,
    VertexServer,
    WireRequest,
    WireServer,
)

KEY = "test-key-not-real"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

NEEDS_LITELLM = pytest.mark.skipif(not litellm_installed(), reason=(
    "LiteLLM is not installed (pip install 'subagents[providers]'; CI runs these in "
    ".ci/suites/providers.sh)"))
LITELLM_WARNINGS = [
    pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the .* attribute on the instance is "
                               "deprecated:DeprecationWarning:litellm"),
]


@dataclass(frozen=True)
class ProviderCase:
    """One provider, reached through its stand-in."""

    name: str
    server: Callable[[list[Any]], WireServer]
    entry: Callable[[WireServer, Path], dict[str, Any]]
    """The model's entry in endpoints.yml for a running stand-in (``tmp_path`` for files)."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables the entry relies on (the provider's own, or ``${...}`` references)."""
    via: str = "litellm"
    streams: bool = True
    """Whether a streamed call reaches the provider as a stream."""
    retry_after: float | None = 7.0
    """The wait a 429 asking for 7 s carries (None: the provider does not say)."""
    auth_status: int = 401
    cut_stream_raises: bool = True
    """Whether a stream cut by a broken event fails (LiteLLM reports a cut Gemini stream as
    finished)."""
    text_beside_calls: bool = True
    """Whether text sent beside tool calls comes back as text (Cohere sends it as its
    ``tool_plan``, which LiteLLM does not hand on)."""

    @property
    def marks(self) -> list[Any]:
        """Skip the case without LiteLLM when it needs it."""
        return [NEEDS_LITELLM] if self.via == "litellm" else []


def _vertex_entry(server: WireServer, tmp: Path) -> dict[str, Any]:
    assert isinstance(server, VertexServer)
    credentials = tmp / "vertex-service-account.json"
    credentials.write_text(json.dumps(server.credentials("weather-project")))
    return {"provider": "vertex_ai", "model": "gemini-2.5-flash", "api_base": server.base_url,
            "vertex_project": "weather-project", "vertex_location": "europe-west4",
            "vertex_credentials": str(credentials)}


CASES = [
    ProviderCase("anthropic", AnthropicServer,
                 lambda s, _: {"provider": "anthropic", "model": "claude-sonnet-4-5",
                               "api_base": s.base_url},
                 env={"ANTHROPIC_API_KEY": KEY}),
    ProviderCase("gemini", GeminiServer,
                 lambda s, _: {"provider": "gemini", "model": "gemini-2.5-flash",
                               "api_base": f"{s.base_url}/v1beta"},
                 env={"GEMINI_API_KEY": KEY}, cut_stream_raises=False),
    ProviderCase("vertex_ai", VertexServer, _vertex_entry, cut_stream_raises=False),
    ProviderCase("bedrock", BedrockServer,
                 lambda s, _: {"provider": "bedrock",
                               "model": "anthropic.claude-3-5-sonnet-20240620-v1:0",
                               "aws_bedrock_runtime_endpoint": s.base_url,
                               "aws_access_key_id": "${BEDROCK_KEY_ID}",
                               "aws_secret_access_key": "${BEDROCK_SECRET}",
                               "aws_region_name": "eu-central-1"},
                 env={"BEDROCK_KEY_ID": "AKIDSTANDIN", "BEDROCK_SECRET": KEY},
                 retry_after=None, auth_status=403),
    ProviderCase("mistral", MistralServer,
                 lambda s, _: {"provider": "mistral", "model": "mistral-large-latest",
                               "api_base": s.base_url},  # "/v1" is added, as LiteLLM adds it
                 env={"MISTRAL_API_KEY": KEY}, via="direct"),
    ProviderCase("cohere", CohereServer,
                 lambda s, _: {"provider": "cohere", "model": "command-r-plus",
                               "api_base": f"{s.base_url}/v2/chat"},
                 env={"COHERE_API_KEY": KEY}, streams=False, retry_after=None,
                 text_beside_calls=False),
]
"""One case per stand-in. Cohere's ``api_base`` is its native v2 chat URL (written for
LiteLLM), so it goes through LiteLLM, without streaming (LiteLLM cannot read Cohere's
stream); Cohere's compatibility API is the direct way (tested with the fake server)."""


def case_params(cases: list[ProviderCase] | None = None) -> list[Any]:
    """The cases as pytest params (id = provider, skipped without LiteLLM where needed)."""
    return [pytest.param(c, id=c.name, marks=c.marks) for c in cases or CASES]


def chat_requests(server: WireServer) -> list[WireRequest]:
    """The chat calls a stand-in received (a Vertex token exchange is not one)."""
    return [r for r in server.requests if server.classify(r) is not None]


def tool_names(server: WireServer, request: WireRequest) -> list[str]:
    """The tools a chat call offered, in the provider's format."""
    return list(server.tool_names(request))  # type: ignore[attr-defined]


@pytest.fixture
def no_internet(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse, and remember, any host name lookup other than loopback."""
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in LOOPBACK:
            looked_up.append(str(host))
            raise OSError(f"test refused to look up {host}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)
    yield looked_up
    assert looked_up == [], f"the test tried to reach {sorted(set(looked_up))}"
