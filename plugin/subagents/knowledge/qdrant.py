"""The distributed option: a Qdrant collection, through ``qdrant-client``.

Configured as Rasa configures it: ``vector_store: {type: qdrant}`` in the policy's config.yml
entry, and the connection in endpoints.yml::

    vector_store:
      type: qdrant
      collection: docs
      host: qdrant.internal        # or url: https://..., or path: ./qdrant-data (local mode)
      port: 6333
      api_key: ${QDRANT_API_KEY}
      content_payload_key: text    # the payload field holding the passage
      metadata_payload_key: metadata

A search embeds the query and asks for the 4 nearest points (``score_threshold`` = the policy's
``vector_store.threshold``); each point's payload gives the passage text and its metadata. Rasa
expects the collection to be filled by the user; :meth:`QdrantStore.add` fills one from documents
(what ``subagents index`` uses for a Qdrant store, and the tests).

Unlike Rasa, a ``url`` key reaches the client (Rasa's endpoint parser keeps it for itself, so it
is silently ignored there). ``qdrant-client`` is imported on first use; without the ``qdrant``
extra, using it raises a ConfigError naming ``pip install 'subagents[qdrant]'``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from .documents import Document
from .embedder import Embedder
from .errors import QDRANT_EXTRA, SearchBackendError, extra_missing
from .index import DEFAULT_TOP_K, SearchHit

if TYPE_CHECKING:
    from ..types import CallScope

__all__ = ["QdrantSettings", "QdrantStore"]

log = structlog.get_logger("subagents.knowledge")


class QdrantSettings(BaseModel):
    """The ``vector_store`` section of endpoints.yml for ``type: qdrant`` (Rasa's keys)."""

    model_config = ConfigDict(extra="ignore")

    type: str = "qdrant"
    collection: str
    """The collection to search."""
    host: str | None = None
    port: int = 6333
    grpc_port: int = 6334
    prefer_grpc: bool = False
    https: bool | None = None
    api_key: str | None = None
    """Resolve ``${VAR}`` before building the settings: a literal key is refused by validate."""
    prefix: str | None = None
    timeout: int = 5
    url: str | None = None
    location: str | None = None
    """``:memory:`` for an in-process collection (tests), or a server URL."""
    path: str | None = None
    """A folder: Qdrant's local mode, persisted on disk, no server."""
    vector_name: str | None = None
    """A named vector of the collection; the default vector when empty."""
    content_payload_key: str = "text"
    metadata_payload_key: str = "metadata"
    distance: str = Field("cosine", description="distance of a collection :meth:`add` creates")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``AsyncQdrantClient`` (only the keys that are set)."""
        options: dict[str, Any] = {"location": self.location, "url": self.url, "host": self.host,
                                   "path": self.path, "api_key": self.api_key,
                                   "prefix": self.prefix, "https": self.https}
        options = {k: v for k, v in options.items() if v is not None}
        if not any(k in options for k in ("location", "path")):
            options.update(port=self.port, grpc_port=self.grpc_port,
                           prefer_grpc=self.prefer_grpc, timeout=self.timeout)
        return options


def _qdrant() -> Any:
    try:
        import qdrant_client
    except ImportError as exc:
        raise extra_missing(QDRANT_EXTRA, "qdrant-client", what="vector_store type qdrant"
                            ) from exc
    return qdrant_client


class QdrantStore:
    """Searches (and can fill) one Qdrant collection.

    Args:
        settings: The endpoints.yml ``vector_store`` section.
        embedder: Embeds the queries (and the documents :meth:`add` stores).
    """

    def __init__(self, settings: QdrantSettings, embedder: Embedder) -> None:
        self.settings = settings
        self.embedder = embedder
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The ``AsyncQdrantClient``, created on first use."""
        if self._client is None:
            qdrant_client = _qdrant()
            self._client = qdrant_client.AsyncQdrantClient(**self.settings.client_options())
        return self._client

    async def close(self) -> None:
        """Close the client (releases a local-mode folder's lock)."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def search(self, query: str, k: int = DEFAULT_TOP_K,
                     min_score: float | None = None, *,
                     scope: CallScope | None = None) -> list[SearchHit]:
        """Embed ``query``; the ``k`` nearest points of the collection, best first
        (``scope``: the calling turn's).

        Raises:
            SearchBackendError: Qdrant failed, or a point lacks the content payload key.
            EmbeddingError: The query could not be embedded.
        """
        if not query.strip():
            return []
        [vector] = await self.embedder.embed([query], scope=scope)
        options: dict[str, Any] = {"collection_name": self.settings.collection, "query": vector,
                                   "limit": k, "with_payload": True}
        if min_score is not None:
            options["score_threshold"] = min_score
        if self.settings.vector_name:
            options["using"] = self.settings.vector_name
        try:
            response = await self.client.query_points(**options)
        except Exception as exc:  # qdrant-client raises many transport error types
            log.warning("search.qdrant.failed", collection=self.settings.collection,
                        error=type(exc).__name__)
            raise SearchBackendError(f"Qdrant search in collection "
                                     f"{self.settings.collection!r} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc
        return [self._hit(point) for point in response.points]

    def _hit(self, point: Any) -> SearchHit:
        payload = point.payload or {}
        key = self.settings.content_payload_key
        if not isinstance(payload.get(key), str):
            raise SearchBackendError(
                f"a point of collection {self.settings.collection!r} has no text under payload "
                f"key {key!r}; set content_payload_key (and metadata_payload_key) to the fields "
                "your points use", code="search.qdrant.payload_missing")
        metadata = payload.get(self.settings.metadata_payload_key) or {}
        return SearchHit(payload[key], metadata if isinstance(metadata, dict) else {},
                         float(point.score))

    async def add(self, documents: Sequence[Document]) -> int:
        """Embed ``documents`` and upsert them; create the collection if it does not exist.

        Point ids derive from the text and metadata, so adding the same document twice keeps one
        point. Returns the number of documents sent.
        """
        if not documents:
            return 0
        models = _qdrant().models
        vectors = await self.embedder.embed([d.text for d in documents])
        name, using = self.settings.collection, self.settings.vector_name
        try:
            if not await self.client.collection_exists(name):
                params = models.VectorParams(size=len(vectors[0]), distance=models.Distance(
                    self.settings.distance.capitalize()))
                await self.client.create_collection(
                    name, vectors_config={using: params} if using else params)
            points = [models.PointStruct(
                id=str(uuid.uuid5(uuid.NAMESPACE_URL, repr((d.text, sorted(d.metadata.items()))))),
                vector={using: vector} if using else vector,
                payload={self.settings.content_payload_key: d.text,
                         self.settings.metadata_payload_key: d.metadata})
                for d, vector in zip(documents, vectors, strict=True)]
            await self.client.upsert(name, points=points, wait=True)
        except Exception as exc:  # qdrant-client raises many transport error types
            raise SearchBackendError(f"storing documents in Qdrant collection {name!r} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc
        log.info("search.qdrant.added", collection=name, points=len(points))
        return len(points)
