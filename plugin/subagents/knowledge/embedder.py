"""Embeddings: the :class:`Embedder` protocol and an OpenAI-compatible implementation.

:class:`OpenAIEmbedder` posts to ``<base_url>/embeddings`` (the ``/v1/embeddings`` route of any
OpenAI-compatible server) through :class:`openai.AsyncOpenAI`, in batches of ``batch_size`` texts
(50, as Rasa batches them while building its index). Every reply is checked: one vector per text,
all of the same length, finite numbers. A failure of any kind is an :class:`EmbeddingError`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import structlog

from ..exceptions import ConfigError
from .errors import EmbeddingError, issue

__all__ = ["DEFAULT_BATCH_SIZE", "Embedder", "OpenAIEmbedder"]

log = structlog.get_logger("subagents.knowledge")

DEFAULT_BATCH_SIZE = 50
DEFAULT_TIMEOUT = 30.0


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed length."""

    @property
    def identity(self) -> str:
        """What the vectors depend on (model and size): a persisted index built with another
        identity is rebuilt."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; raise :class:`EmbeddingError` on failure."""
        ...


class OpenAIEmbedder:
    """An :class:`Embedder` on an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Args:
        model: The embeddings model name sent with each request.
        base_url: The OpenAI-compatible base URL (``http://host:port/v1``); the OpenAI API when
            omitted.
        api_key: The API key (already resolved from the environment by the caller). Without one,
            ``OPENAI_API_KEY`` is used; a server given by ``base_url`` may need none.
        dimensions: Ask the model for vectors of this length (models that support it).
        timeout: Seconds per request.
        max_retries: Retries of a failed request (the SDK's backoff).
        batch_size: Texts per request.
        headers: Extra HTTP headers sent with each request.
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 dimensions: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = 1, batch_size: int = DEFAULT_BATCH_SIZE,
                 headers: dict[str, str] | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.model = model
        self.base_url = base_url
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._options: dict[str, Any] = {
            "api_key": _api_key(api_key, base_url, model), "base_url": base_url,
            "timeout": timeout, "max_retries": max_retries, "default_headers": headers or None}
        self._client: Any = None

    @property
    def identity(self) -> str:
        """``<model>`` or ``<model>@<dimensions>``."""
        return self.model if self.dimensions is None else f"{self.model}@{self.dimensions}"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in batches; raise :class:`EmbeddingError` on any failure."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += await self._batch(list(texts[start:start + self.batch_size]))
        if vectors and any(len(v) != len(vectors[0]) for v in vectors):
            raise EmbeddingError(f"embeddings model {self.model!r} returned vectors of "
                                 "different lengths")
        return vectors

    async def close(self) -> None:
        """Close the HTTP client, if one was opened."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        from openai import AsyncOpenAI, OpenAIError

        if self._client is None:
            self._client = AsyncOpenAI(**self._options)
        extra: dict[str, Any] = {} if self.dimensions is None else {"dimensions": self.dimensions}
        try:
            response = await self._client.embeddings.create(
                model=self.model, input=texts, encoding_format="float", **extra)
        except OpenAIError as exc:
            log.warning("search.embeddings.failed", model=self.model, error=type(exc).__name__)
            raise EmbeddingError(f"embeddings model {self.model!r} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        return _vectors(response, len(texts), self.model)


def _vectors(response: Any, count: int, model: str) -> list[list[float]]:
    """The vectors of an embeddings reply, ordered by ``index``; checked."""
    data = getattr(response, "data", None)
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else "no"
        raise EmbeddingError(f"embeddings model {model!r} returned {got} vectors for "
                             f"{count} texts")
    try:
        ordered = sorted(data, key=lambda item: int(item.index))
        vectors = [[float(x) for x in item.embedding] for item in ordered]
    except (TypeError, ValueError, AttributeError) as exc:
        raise EmbeddingError(f"embeddings model {model!r} returned something that is not a "
                             f"list of vectors: {exc}") from exc
    for vector in vectors:
        if not vector or not all(math.isfinite(x) for x in vector):
            raise EmbeddingError(f"embeddings model {model!r} returned an empty vector or one "
                                 "with a non-finite number")
    return vectors


def _api_key(api_key: str | None, base_url: str | None, model: str) -> str:
    if api_key:
        return api_key
    if os.environ.get("OPENAI_API_KEY"):
        return os.environ["OPENAI_API_KEY"]
    if base_url:
        return "not-needed"  # self-hosted OpenAI-compatible servers often need no key
    raise ConfigError(issue("search.embeddings_api_key_missing",
                            f"no API key for the embeddings model {model!r}",
                            hint="export OPENAI_API_KEY=..., or give the model group an "
                                 "api_key: ${VAR} or an api_base"))
