"""What every model call gets, as wrappers around a :class:`~subagents.llm.model.Model`:
spans and metrics (:class:`InstrumentedModel`), token counting into the turn's tally
(:class:`CountingModel`) and, for a recorded conversation, the call in the turn's recording
(:class:`RecordingModel`). :func:`subagents.llm.build_model` composes them once per model."""

from __future__ import annotations

from typing import Any

from subagents import observability
from subagents.llm.model import LLMResponse, Model, TextCallback
from subagents.llm.settings import ModelSettings
from subagents.types import CallScope, ChatMessage, JsonObject


class WrapperModel:
    """A model that hands every call to ``inner``; subclasses add what they do around it."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        """What the wrapped models have (e.g. ``schema_refused``), looked up inwards."""
        if name == "inner":  # not set yet (during copying): no recursion through it
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        """The caller's name, the inner model's."""
        return self.inner.name

    @property
    def settings(self) -> ModelSettings:
        """The inner model's settings (replacing them replaces the inner model's)."""
        return self.inner.settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        self.inner.settings = value  # type: ignore[misc]

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """The inner model's answer."""
        return await self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                         scope=scope, options=options)

    async def embed(self, texts: list[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """The inner model's embeddings."""
        return await self.inner.embed(texts, scope=scope)

    async def prepare(self) -> None:
        """Prepare the inner model."""
        await self.inner.prepare()

    async def close(self) -> None:
        """Close the inner model."""
        await self.inner.close()


class InstrumentedModel(WrapperModel):
    """One GenAI ``chat`` span and the model metrics per call (when tracing or metrics are on)."""

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """The inner model's answer, observed."""
        if not observability.enabled():
            return await self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                             scope=scope, options=options)
        settings = self.inner.settings
        return await observability.observe_model_call(
            self.inner.name, settings.called_model, settings.provider, stream,
            lambda: self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                        scope=scope, options=options))


class CountingModel(WrapperModel):
    """Adds each call's tokens to the turn's tally, under the model's name."""

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """The inner model's answer, counted."""
        response = await self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                             scope=scope, options=options)
        if scope is not None and scope.usage is not None:
            scope.usage.add(self.inner.settings.model,
                            response.usage.prompt_tokens, response.usage.completion_tokens)
        return response


class RecordingModel(WrapperModel):
    """Records each call (what was asked, what came back or how it failed) in the turn's
    recording, when the conversation is recorded."""

    async def complete(self, messages: list[ChatMessage], tools: list[JsonObject] | None, *,
                       stream: bool = False, on_text: TextCallback | None = None,
                       scope: CallScope | None = None, options: JsonObject | None = None
                       ) -> LLMResponse:
        """The inner model's answer, recorded."""
        recorder = None if scope is None else scope.recorder
        if recorder is None:
            return await self.inner.complete(messages, tools, stream=stream, on_text=on_text,
                                             scope=scope, options=options)
        try:
            response = await self.inner.complete(messages, tools, stream=stream,
                                                 on_text=on_text, scope=scope, options=options)
        except Exception as exc:
            recorder.record_model_error(self.inner.name, exc)
            raise
        recorder.record_model_call(self.inner.name, messages, tools, response)
        return response
