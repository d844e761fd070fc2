"""What the rest of the package knows of a language model: the :class:`Model` protocol and the
data a call returns.

A model is built once, where the assistant is assembled (:func:`subagents.llm.build_model`):
one provider implementation (:class:`~subagents.llm.openai_compat.OpenAICompatibleModel` for
every OpenAI-compatible endpoint, :class:`~subagents.llm.litellm_model.LiteLLMModel` for the
providers reached through LiteLLM) wrapped in what every call needs - constrained output
(:class:`~subagents.llm.structured.StructuredOutputModel`), spans and metrics, token counting
and recording (:mod:`subagents.llm.wrappers`), and routing between the models of a group
(:class:`~subagents.llm.fallback.FallbackModel`). What a call needs from its turn (the
deadline, where usage is counted, where the call is recorded) travels as an argument, the
turn's :class:`~subagents.types.CallScope`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from subagents.types import CallScope, ChatMessage, JsonObject

if TYPE_CHECKING:
    from subagents.llm.settings import ModelSettings

TextCallback = Callable[[str], Awaitable[None]]
"""Receives each piece of streamed text as it arrives."""


@dataclass
class ToolCall:
    """One tool call of a model response; ``arguments`` is None when the JSON did not parse."""

    id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None
    parse_error: str | None = None


@dataclass
class Usage:
    """Tokens used by model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        """Add ``other``'s token counts to these."""
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass
class LLMResponse:
    """One model reply: text and tool calls, token usage and timings."""

    text: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    streamed: bool = False
    time_to_first_token_ms: float | None = None
    total_time_ms: float = 0.0
    model: str | None = None
    """The model (for azure, the deployment) that answered."""


@runtime_checkable
class Model(Protocol):
    """A language model the assistant calls: chat completions (streamed or not) and embeddings.

    Every failure is raised as :class:`~subagents.exceptions.LLMError` with a stable code
    (``llm.timeout``, ``llm.connection``, ``llm.auth``, ``llm.rate_limit``, ``llm.http_<status>``,
    ``llm.bad_response``, ``llm.deadline``).
    """

    @property
    def name(self) -> str:
        """Who calls the model (``command_generator``, an agent's name, ...), for spans, logs
        and recordings."""
        ...

    @property
    def settings(self) -> ModelSettings:
        """The settings of the model (of a group's first model for a routed group)."""
        ...

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """One chat completion. With ``stream``, ``on_text`` receives the text as it arrives;
        ``scope`` bounds the call by its turn's deadline and counts and records it;
        ``options`` are request options for this call only (``max_completion_tokens``,
        ``response_format``, ...), over the model's own."""
        ...

    async def embed(self, texts: list[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """One embedding vector per text, in order."""
        ...

    async def prepare(self) -> None:
        """Open what the first call would otherwise open (a connection pool), on the running
        event loop; never fails for a model that is not reachable yet."""
        ...

    async def close(self) -> None:
        """Release connections; the model may be used again afterwards."""
        ...
