"""Knowledge answers: document loading, chunking, embeddings and vector search.

The parts Rasa's enterprise search is made of, usable on their own:

* :mod:`.documents` — a folder of ``.txt`` files as documents; passages (chunks of 1000
  characters, 20 overlapping) or ``Q:``/``A:`` pairs for extractive search.
* :mod:`.embedder` — the :class:`Embedder` protocol and :class:`ModelEmbedder` (embeddings
  through a model of the package: a model group's ``/v1/embeddings`` or a provider).
* :mod:`.index` — the embedded index (:class:`LocalIndex`: exact search with numpy, persisted
  under ``.subagents/``, rebuilt when the documents change); extra ``search``.
* :mod:`.qdrant` — a Qdrant collection as the store (:class:`QdrantStore`); extra ``qdrant``.
* :mod:`.settings`, :mod:`.validation` — the policy's config.yml keys and their checks.
* :mod:`.answers`, :mod:`.prompt` — the query, the answer's metadata, relevancy, citations and
  the default prompt.

numpy and qdrant-client are imported only when used, so this package imports without them.
"""

from __future__ import annotations

from .answers import (
    NO_ANSWER_MARKER,
    NO_RELEVANT_ANSWER_REASON,
    POLICY_NAME,
    answer_metadata,
    extractive_answer,
    is_relevant,
    renumber_citations,
    search_query,
)
from .documents import (
    Document,
    TextSplitter,
    load_documents,
    parse_qa_documents,
    split_documents,
)
from .embedder import Embedder, ModelEmbedder
from .errors import EmbeddingError, IndexCorruptError, SearchBackendError, SearchError
from .index import DEFAULT_TOP_K, LocalIndex, SearchHit, VectorIndex, content_hash
from .prompt import DEFAULT_SEARCH_PROMPT, render_search_prompt
from .qdrant import QdrantSettings, QdrantStore
from .settings import SearchPolicySettings, VectorStoreSettings
from .validation import check_search_setup

__all__ = [
    "DEFAULT_SEARCH_PROMPT",
    "DEFAULT_TOP_K",
    "NO_ANSWER_MARKER",
    "NO_RELEVANT_ANSWER_REASON",
    "POLICY_NAME",
    "Document",
    "Embedder",
    "EmbeddingError",
    "IndexCorruptError",
    "LocalIndex",
    "ModelEmbedder",
    "QdrantSettings",
    "QdrantStore",
    "SearchBackendError",
    "SearchError",
    "SearchHit",
    "SearchPolicySettings",
    "TextSplitter",
    "VectorIndex",
    "VectorStoreSettings",
    "answer_metadata",
    "check_search_setup",
    "content_hash",
    "extractive_answer",
    "is_relevant",
    "load_documents",
    "parse_qa_documents",
    "render_search_prompt",
    "renumber_citations",
    "search_query",
    "split_documents",
]
