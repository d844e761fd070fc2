"""Embedders for the knowledge tests: a model of the package pointed at a server over HTTP."""

from __future__ import annotations

from subagents.knowledge import ModelEmbedder
from subagents.llm import ModelSettings, build_model


def embedder_for(base_url: str, model: str = "text-embedding-3-small", *,
                 timeout: float = 30.0) -> ModelEmbedder:
    """A :class:`ModelEmbedder` on the OpenAI-compatible server at ``base_url`` (no retries)."""
    settings = ModelSettings.from_mapping({"provider": "openai", "model": model,
                                           "api_base": base_url, "max_retries": 0,
                                           "timeout": timeout})
    return ModelEmbedder(build_model(settings, name="search_embeddings"))
