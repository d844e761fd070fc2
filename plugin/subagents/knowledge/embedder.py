"""Embeddings: the :class:`Embedder` protocol and :class:`ModelEmbedder`, which embeds through
one of the package's models (:meth:`subagents.llm.Model.embed`).

A model group's model posts to its endpoint's ``/embeddings`` route (any OpenAI-compatible
server) or goes through the providers extra, with the model's own timeout, retries, recording and
token counting. :class:`ModelEmbedder` sends ``batch_size`` texts per call (50, as Rasa batches
them while building its index) and checks every reply: one vector per text, all of the same
length, finite numbers. A model failure or a malformed reply is an :class:`EmbeddingError`; a
configuration problem (a missing API key) stays a :class:`~subagents.exceptions.ConfigError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog

from ..exceptions import LLMError
from .errors import EmbeddingError

if TYPE_CHECKING:
    from ..llm.model import Model
    from ..types import CallScope

__all__ = ["DEFAULT_BATCH_SIZE", "Embedder", "ModelEmbedder"]

log = structlog.get_logger("subagents.knowledge")

DEFAULT_BATCH_SIZE = 50


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed length."""

    @property
    def identity(self) -> str:
        """What the vectors depend on (model and endpoint): a persisted index built with
        another identity is rebuilt."""
        ...

    async def embed(self, texts: Sequence[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """One vector per text, in order; raise :class:`EmbeddingError` on failure.

        ``scope`` is the calling turn's (its deadline, usage tally and recording), if any.
        """
        ...


class ModelEmbedder:
    """An :class:`Embedder` on a :class:`~subagents.llm.Model`.

    Args:
        model: The embeddings model (built from a model group or inline settings).
        identity: What the vectors depend on; by default the model's provider, endpoint and
            name (``openai:http://host/v1:text-embedding-3-small``).
        batch_size: Texts per call.
    """

    def __init__(self, model: Model, *, identity: str | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.model = model
        self.batch_size = batch_size
        self._identity = identity or model_identity(model)

    @property
    def identity(self) -> str:
        """``<provider>:<api_base>:<model>`` unless given."""
        return self._identity

    async def embed(self, texts: Sequence[str], *, scope: CallScope | None = None
                    ) -> list[list[float]]:
        """Embed ``texts`` in batches; raise :class:`EmbeddingError` on any failure."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            try:
                reply = await self.model.embed(batch, scope=scope)
            except LLMError as exc:
                log.warning("search.embeddings.failed", model=self.identity,
                            error_code=exc.code)
                raise EmbeddingError(f"embeddings model {self.identity!r} failed: "
                                     f"[{exc.code}] {exc}") from exc
            vectors += _checked(reply, len(batch), self.identity)
        if vectors and any(len(v) != len(vectors[0]) for v in vectors):
            raise EmbeddingError(f"embeddings model {self.identity!r} returned vectors of "
                                 "different lengths")
        return vectors

    async def close(self) -> None:
        """Close the model's connections."""
        await self.model.close()


def model_identity(model: Model) -> str:
    """``<provider>:<api_base>:<model>`` of a model (its first member for a routed group)."""
    settings = model.settings
    return f"{settings.provider}:{settings.api_base or ''}:{settings.called_model}"


def _checked(reply: object, count: int, model: str) -> list[list[float]]:
    """The vectors of one reply, checked: ``count`` non-empty vectors of finite numbers."""
    if not isinstance(reply, list) or len(reply) != count:
        got = len(reply) if isinstance(reply, list) else "no"
        raise EmbeddingError(f"embeddings model {model!r} returned {got} vectors for "
                             f"{count} texts")
    try:
        vectors = [[float(x) for x in vector] for vector in reply]
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"embeddings model {model!r} returned something that is not a "
                             f"list of vectors: {exc}") from exc
    for vector in vectors:
        if not vector or not all(math.isfinite(x) for x in vector):
            raise EmbeddingError(f"embeddings model {model!r} returned an empty vector or one "
                                 "with a non-finite number")
    return vectors
