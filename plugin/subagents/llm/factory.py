"""Where a model is assembled: the provider's implementation, wrapped once in what every call
gets (recording, constrained output, token counting, spans and metrics), and a routed group's
members behind a :class:`~subagents.llm.fallback.FallbackModel`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from subagents.llm.fallback import FallbackModel
from subagents.llm.model import Model
from subagents.llm.openai_compat import OpenAICompatibleModel
from subagents.llm.settings import ModelSettings
from subagents.llm.structured import StructuredOutputModel
from subagents.llm.wrappers import CountingModel, InstrumentedModel, RecordingModel


def build_model(settings: ModelSettings, *, name: str = "llm",
                rng: random.Random | None = None,
                clock: Callable[[], float] = time.monotonic) -> Model:
    """The model for ``settings``, called by ``name``: one model, or a routed group's (whose
    router draws from ``rng`` and times cool-downs with ``clock``)."""
    group = settings.group
    if group is not None and len(group.models) > 1:
        members = [_member(member, name) for member in group.models]
        return FallbackModel(members, group.router, group_id=group.id, name=name, rng=rng,
                             clock=clock)
    return _member(settings, name)


def _member(settings: ModelSettings, name: str) -> Model:
    """One model with the wrappers every call goes through, outermost first: the recording
    (what the caller asked and got), constrained output (``structured_output``), the tally
    (tokens), the span and metrics."""
    return RecordingModel(StructuredOutputModel(CountingModel(InstrumentedModel(
        provider_model(settings, name)))))


def provider_model(settings: ModelSettings, name: str) -> Model:
    """The implementation that speaks the provider's API: our OpenAI-compatible client for the
    providers that speak OpenAI's (:data:`subagents.config.providers.HOSTED` included), LiteLLM
    for the others (imported at the model's first use, not here)."""
    if settings.route == "litellm":
        from subagents.llm.litellm_model import LiteLLMModel

        return LiteLLMModel(settings, name=name)
    return OpenAICompatibleModel(settings, name=name)
