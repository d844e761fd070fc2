"""The embedded knowledge index: exact nearest-neighbour search with numpy, persisted on disk.

:class:`VectorIndex` holds the chunk vectors as one unit-length float32 matrix; a query is one
matrix-vector product and a partial sort, so results are exact (like Rasa's FAISS flat index) and
the score of a hit is its cosine similarity to the query. The product runs in numpy's own loop
(``einsum``), not in the BLAS library: a threaded BLAS mat-vec keeps its worker threads spinning
after each call, which cost about ten times the CPU of the product itself on a busy 2-core machine.
At the sizes a project's documents reach (1,000 to 10,000 chunks) this is as fast as FAISS's flat
index; ``benchmarks/bench_search.py`` measures both.

:class:`LocalIndex` builds a :class:`VectorIndex` from a documents folder and persists it under a
folder of its own (``<project>/.subagents/search/<name>/``): ``manifest.json`` names the content
hash of the documents (every file's path and bytes, the chunking mode and sizes, the embedder's
identity) and the files that hold the vectors (``vectors-<hash>.npy``) and chunks
(``chunks-<hash>.json``). :meth:`LocalIndex.ensure` loads the persisted index when the hash still
matches and rebuilds it otherwise. Files are written under temporary names and renamed into place,
the manifest last, so a reader (another worker) sees the old index or the new one, never half.

numpy is imported on first use: without the ``search`` extra the module still imports, and using
it raises a :class:`~subagents.exceptions.ConfigError` naming ``pip install 'subagents[search]'``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from ..exceptions import ConfigError
from .documents import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    Document,
    TextSplitter,
    document_files,
    load_documents,
    parse_qa_documents,
    split_documents,
)
from .embedder import Embedder
from .errors import SEARCH_EXTRA, IndexCorruptError, SearchError, extra_missing, issue

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..types import CallScope

__all__ = ["DEFAULT_TOP_K", "INDEX_FORMAT", "LocalIndex", "SearchHit", "VectorIndex",
           "content_hash", "require_numpy"]

log = structlog.get_logger("subagents.knowledge")

DEFAULT_TOP_K = 4
"""Results per query, as Rasa's stores return."""
INDEX_FORMAT = 1
"""Version of the persisted layout; another version is rebuilt."""
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class SearchHit:
    """One search result: the chunk (or question), its metadata and its similarity score."""

    text: str
    metadata: dict[str, Any]
    score: float
    """Cosine similarity to the query (1 = same direction) for the embedded index; the
    collection's score for Qdrant."""


def require_numpy() -> Any:
    """The numpy module, or the error that names the ``search`` extra."""
    try:
        import numpy
    except ImportError as exc:
        raise extra_missing(SEARCH_EXTRA, "numpy", what="the embedded search index") from exc
    return numpy


class VectorIndex:
    """Documents and their vectors; exact top-k search by cosine similarity."""

    def __init__(self, documents: Sequence[Document], vectors: Any, *,
                 normalized: bool = False) -> None:
        """Index ``documents``; ``vectors`` is one row per document (any float array-like).

        ``normalized`` says the rows already have unit length (a persisted index's do).
        """
        np = require_numpy()
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(documents):
            raise ValueError(f"need one vector per document: {len(documents)} documents, "
                             f"vectors of shape {matrix.shape}")
        self.documents = list(documents)
        self.matrix: npt.NDArray[Any] = (np.ascontiguousarray(matrix) if normalized
                                         else _unit_rows(np, matrix))
        """One unit-length float32 row per document."""

    @property
    def dimension(self) -> int:
        """The length of the vectors."""
        return int(self.matrix.shape[1])

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, vector: Sequence[float], k: int = DEFAULT_TOP_K,
               min_score: float | None = None) -> list[SearchHit]:
        """The ``k`` documents nearest to ``vector``, best first.

        Args:
            vector: The query's embedding (any length but the index's is an error).
            k: How many results at most.
            min_score: Drop results whose score is below this.
        """
        np = require_numpy()
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != self.dimension:
            raise SearchError(f"the query vector has {query.shape[0]} numbers, the index "
                              f"{self.dimension}: the embeddings model changed; rebuild the "
                              "index", code="search.dimension_mismatch")
        if not len(self) or k < 1:
            return []
        norm = float(np.linalg.norm(query))
        scores = np.einsum("ij,j->i", self.matrix, query / norm if norm else query)
        k = min(k, len(self))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(self) else np.arange(len(self))
        top = top[np.argsort(-scores[top], kind="stable")]
        hits = [SearchHit(self.documents[i].text, self.documents[i].metadata, float(scores[i]))
                for i in top.tolist()]
        return hits if min_score is None else [h for h in hits if h.score >= min_score]

    def save(self, folder: Path, tag: str) -> tuple[str, str]:
        """Write ``vectors-<tag>.npy`` and ``chunks-<tag>.json`` into ``folder``; their names."""
        np = require_numpy()
        folder.mkdir(parents=True, exist_ok=True)
        vectors, chunks = f"vectors-{tag}.npy", f"chunks-{tag}.json"
        _write_atomic(folder / vectors, lambda handle: np.save(handle, self.matrix))
        payload = json.dumps([d.to_dict() for d in self.documents], ensure_ascii=False)
        _write_atomic(folder / chunks, lambda handle: handle.write(payload.encode()))
        return vectors, chunks

    @classmethod
    def load(cls, folder: Path, vectors: str, chunks: str) -> VectorIndex:
        """Read what :meth:`save` wrote; raise :class:`IndexCorruptError` if it is damaged."""
        np = require_numpy()
        try:
            matrix = np.load(folder / vectors, allow_pickle=False)
            raw = json.loads((folder / chunks).read_text(encoding="utf-8"))
            documents = [Document.from_dict(item) for item in raw]
            return cls(documents, matrix, normalized=True)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise IndexCorruptError(f"the index in {folder} cannot be read: {exc}") from exc


class LocalIndex:
    """A documents folder, indexed and persisted; rebuilt when the documents change.

    Args:
        source: The documents folder (``.txt`` files, searched recursively).
        folder: Where the index is persisted (created when needed).
        embedder: Embeds the chunks and the queries.
        qa_pairs: Index ``Q:``/``A:`` entries (extractive search) instead of passages.
        display_root: Paths in ``metadata["source"]`` are relative to this (the project folder).
        chunk_size: Characters per chunk (passages only).
        chunk_overlap: Characters shared by neighbouring chunks (passages only).
    """

    def __init__(self, source: Path, folder: Path, embedder: Embedder, *,
                 qa_pairs: bool = False, display_root: Path | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 chunk_overlap: int = DEFAULT_CHUNK_OVERLAP) -> None:
        self.source = Path(source)
        self.folder = Path(folder)
        self.embedder = embedder
        self.qa_pairs = qa_pairs
        self.display_root = display_root
        self.splitter = TextSplitter(chunk_size, chunk_overlap)
        self.index: VectorIndex | None = None
        self.rebuilt = False
        """Whether the last :meth:`ensure` built the index (rather than loading it)."""

    def content_hash(self) -> str:
        """The hash of everything the index depends on (see :func:`content_hash`)."""
        mode = "qa" if self.qa_pairs else (f"passages:{self.splitter.chunk_size}:"
                                           f"{self.splitter.chunk_overlap}")
        return content_hash(self.source, mode=mode, embedder=self.embedder.identity)

    async def ensure(self) -> VectorIndex:
        """Load the persisted index if it matches the documents, else build and persist it."""
        self.check_source()
        digest = self.content_hash()
        index = self._load_matching(digest)
        self.rebuilt = index is None
        if index is None:
            index = await self.build(digest)
        self.index = index
        return index

    async def build(self, digest: str | None = None) -> VectorIndex:
        """Chunk, embed and persist the documents now, whatever is on disk."""
        self.check_source()
        digest = digest or self.content_hash()
        started = time.perf_counter()
        documents = self.documents()
        if not documents:
            what = "no Q:/A: entry" if self.qa_pairs else "no text"
            raise ConfigError(issue("search.index_empty",
                                    f"the documents in {self.source} hold {what} to index",
                                    hint=("write entries as 'Q: question' then 'A: answer', "
                                          "separated by a blank line") if self.qa_pairs else
                                         "add text to the .txt files"))
        vectors = await self.embedder.embed([d.text for d in documents])
        index = VectorIndex(documents, vectors)
        self._persist(index, digest)
        self.index = index
        log.info("search.index.built", source=str(self.source), chunks=len(documents),
                 dimension=index.dimension, duration_ms=round(
                     (time.perf_counter() - started) * 1000, 1))
        return index

    def documents(self) -> list[Document]:
        """The documents the index holds: chunks, or Q/A pairs."""
        files = load_documents(self.source, display_root=self.display_root)
        return parse_qa_documents(files) if self.qa_pairs else split_documents(files,
                                                                               self.splitter)

    async def search(self, query: str, k: int = DEFAULT_TOP_K,
                     min_score: float | None = None, *,
                     scope: CallScope | None = None) -> list[SearchHit]:
        """Embed ``query`` and return the ``k`` nearest documents (builds the index first);
        ``scope`` is the calling turn's."""
        if not query.strip():
            return []
        index = self.index if self.index is not None else await self.ensure()
        [vector] = await self.embedder.embed([query], scope=scope)
        return index.search(vector, k, min_score)

    def check_source(self) -> None:
        """Raise :class:`ConfigError` when the documents folder is missing or has no file."""
        if not self.source.is_dir():
            raise ConfigError(issue("search.source_missing",
                                    f"the documents folder {self.source} does not exist",
                                    hint="create it and put .txt files in it, or set "
                                         "vector_store.source to the folder that has them"))
        if not document_files(self.source):
            raise ConfigError(issue("search.source_empty",
                                    f"the documents folder {self.source} has no .txt file",
                                    hint="add .txt documents (subfolders count too)"))

    def _load_matching(self, digest: str) -> VectorIndex | None:
        try:
            manifest = json.loads((self.folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if (not isinstance(manifest, dict) or manifest.get("format") != INDEX_FORMAT
                or manifest.get("content_hash") != digest):
            return None
        try:
            index = VectorIndex.load(self.folder, str(manifest["vectors"]),
                                     str(manifest["chunks"]))
        except (IndexCorruptError, KeyError) as exc:
            log.warning("search.index.unreadable", folder=str(self.folder), error=str(exc))
            return None
        log.info("search.index.loaded", folder=str(self.folder), chunks=len(index))
        return index

    def _persist(self, index: VectorIndex, digest: str) -> None:
        tag = digest[:16]
        vectors, chunks = index.save(self.folder, tag)
        manifest = {"format": INDEX_FORMAT, "content_hash": digest, "vectors": vectors,
                    "chunks": chunks, "chunk_count": len(index), "dimension": index.dimension,
                    "embedder": self.embedder.identity, "qa_pairs": self.qa_pairs,
                    "source": str(self.source)}
        text = json.dumps(manifest, indent=2).encode()
        _write_atomic(self.folder / MANIFEST, lambda handle: handle.write(text))
        for stale in self.folder.glob("*-*.*"):
            if stale.name not in (vectors, chunks) and stale.suffix in (".npy", ".json"):
                stale.unlink(missing_ok=True)


def content_hash(source: Path, *, mode: str, embedder: str) -> str:
    """SHA-256 of the documents under ``source`` (relative paths and bytes), ``mode`` and the
    embedder's identity: any change to one of them changes the hash."""
    digest = hashlib.sha256()
    digest.update(f"subagents-index:{INDEX_FORMAT}\0{mode}\0{embedder}\0".encode())
    for path in document_files(source):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(source).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _unit_rows(np: Any, matrix: Any) -> Any:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(matrix / norms, dtype=np.float32)


def _write_atomic(path: Path, write: Any) -> None:
    """Write through ``write(handle)`` into a temporary file beside ``path``, then rename it."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
