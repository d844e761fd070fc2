"""The embedded knowledge index, with embeddings from the fake model server over real HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from subagents.exceptions import ConfigError
from subagents.knowledge import (
    EmbeddingError,
    LocalIndex,
    ModelEmbedder,
    SearchError,
    VectorIndex,
    extractive_answer,
)
from subagents.testing import FakeModelServer

from tests.knowledge_helpers import embedder_for

DOCS = {
    "shipping.txt": "Shipping takes three working days. Express shipping arrives the next day.",
    "returns.txt": "You can return an item within thirty days for a full refund.",
    "payments/cards.txt": "We accept credit cards and debit cards. Payment is taken at dispatch.",
}
FAQ = ("Q: How long does shipping take?\nA: Three working days.\n\n"
       "Q: Can I return an item?\nA: Yes, within thirty days.\n\n"
       "Q: Which cards do you accept?\nA: Credit and debit cards.")


def write_docs(folder: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


@pytest.fixture
async def embedder(fake: FakeModelServer) -> AsyncIterator[ModelEmbedder]:
    client = embedder_for(fake.base_url())
    yield client
    await client.close()


def local_index(tmp_path: Path, embedder: ModelEmbedder, **options: object) -> LocalIndex:
    return LocalIndex(tmp_path / "docs", tmp_path / ".subagents" / "search" / "docs", embedder,
                      display_root=tmp_path, **options)  # type: ignore[arg-type]


async def test_the_index_answers_with_the_nearest_document_and_its_source(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    index = local_index(tmp_path, embedder)
    with anyio.fail_after(10):
        hits = await index.search("how long does shipping take")
    assert index.rebuilt
    assert hits[0].text == DOCS["shipping.txt"]
    assert hits[0].metadata == {"source": "docs/shipping.txt"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(hits) == 3  # fewer documents than k = 4
    # the three chunks in one request, then the query alone
    assert fake.embedding_inputs == [[DOCS["payments/cards.txt"], DOCS["returns.txt"],
                                      DOCS["shipping.txt"]], ["how long does shipping take"]]


async def test_a_persisted_index_is_loaded_without_embedding_the_documents_again(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    with anyio.fail_after(10):
        await local_index(tmp_path, embedder).ensure()
        fake.embedding_inputs.clear()
        again = local_index(tmp_path, embedder)
        hits = await again.search("which cards do you accept")
    assert not again.rebuilt
    assert fake.embedding_inputs == [["which cards do you accept"]]
    assert hits[0].metadata["source"] == "docs/payments/cards.txt"
    stored = sorted(p.name.split("-")[0] for p in
                    (tmp_path / ".subagents" / "search" / "docs").iterdir())
    assert stored == ["chunks", "manifest.json", "vectors"]  # no temporary file left


async def test_a_changed_document_triggers_a_rebuild_and_old_files_are_removed(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    docs = write_docs(tmp_path / "docs", DOCS)
    with anyio.fail_after(10):
        await local_index(tmp_path, embedder).ensure()
        (docs / "returns.txt").write_text("Returns are not accepted on sale items.",
                                          encoding="utf-8")
        changed = local_index(tmp_path, embedder)
        hits = await changed.search("sale items returns")
    assert changed.rebuilt
    assert hits[0].text == "Returns are not accepted on sale items."
    folder = tmp_path / ".subagents" / "search" / "docs"
    assert len(list(folder.glob("vectors-*.npy"))) == 1


async def test_a_new_file_and_another_embeddings_model_each_trigger_a_rebuild(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    docs = write_docs(tmp_path / "docs", DOCS)
    with anyio.fail_after(10):
        first = local_index(tmp_path, embedder)
        await first.ensure()
        unchanged = first.content_hash()
        (docs / "new.txt").write_text("Gift cards never expire.", encoding="utf-8")
        assert local_index(tmp_path, embedder).content_hash() != unchanged
        other = embedder_for(fake.base_url(), "text-embedding-3-large")
        try:
            rebuilt = local_index(tmp_path, other)
            await rebuilt.ensure()
        finally:
            await other.close()
    assert rebuilt.rebuilt


async def test_a_damaged_index_is_rebuilt_from_the_documents(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    folder = tmp_path / ".subagents" / "search" / "docs"
    with anyio.fail_after(10):
        await local_index(tmp_path, embedder).ensure()
        for vectors in folder.glob("vectors-*.npy"):
            vectors.write_bytes(b"not numpy")
        repaired = local_index(tmp_path, embedder)
        hits = await repaired.search("express shipping")
    assert repaired.rebuilt
    assert hits[0].metadata["source"] == "docs/shipping.txt"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["chunk_count"], manifest["dimension"]) == (3, 256)


async def test_long_documents_are_chunked_before_embedding(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    paragraphs = [f"Paragraph {i} about topic{i}. " * 10 for i in range(6)]  # ~300 chars each
    write_docs(tmp_path / "docs", {"long.txt": "\n\n".join(paragraphs)})
    index = local_index(tmp_path, embedder, chunk_size=400, chunk_overlap=0)
    with anyio.fail_after(10):
        hits = await index.search("topic4")
    assert len(fake.embedding_inputs[0]) == 6
    assert hits[0].text == paragraphs[4].strip()


async def test_extractive_mode_indexes_questions_and_returns_the_stored_answer(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", {"faq.txt": FAQ})
    index = local_index(tmp_path, embedder, qa_pairs=True)
    with anyio.fail_after(10):
        hits = await index.search("do you accept cards")
    assert fake.embedding_inputs[0] == ["How long does shipping take?", "Can I return an item?",
                                        "Which cards do you accept?"]
    assert hits[0].text == "Which cards do you accept?"
    assert extractive_answer(hits) == "Credit and debit cards."


async def test_min_score_drops_unrelated_results(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    index = local_index(tmp_path, embedder)
    with anyio.fail_after(10):
        assert len(await index.search("zebra giraffe", min_score=None)) == 3
        assert await index.search("zebra giraffe", min_score=0.2) == []


async def test_an_empty_query_finds_nothing_without_calling_the_model(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    index = local_index(tmp_path, embedder)
    with anyio.fail_after(10):
        await index.ensure()
        fake.embedding_inputs.clear()
        assert await index.search("  ") == []
    assert fake.embedding_inputs == []


async def test_a_document_that_is_not_utf8_is_named_in_the_error(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    (tmp_path / "docs" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError) as error:
        await local_index(tmp_path, embedder).ensure()
    assert error.value.code == "search.document_unreadable"
    assert error.value.issue.file == "docs/latin1.txt"
    assert fake.embedding_inputs == []


async def test_a_missing_or_empty_source_folder_is_a_config_error_with_a_fix(
        tmp_path: Path, embedder: ModelEmbedder):
    with pytest.raises(ConfigError) as missing:
        await local_index(tmp_path, embedder).ensure()
    assert missing.value.code == "search.source_missing"
    assert missing.value.issue.hint
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.md").write_text("not a .txt file")
    with pytest.raises(ConfigError) as empty:
        await local_index(tmp_path, embedder).ensure()
    assert empty.value.code == "search.source_empty"


async def test_documents_without_text_or_qa_entries_are_an_empty_index_error(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", {"blank.txt": "  \n\n ", "prose.txt": "No questions here."})
    with pytest.raises(ConfigError) as error:
        await local_index(tmp_path, embedder, qa_pairs=True).ensure()
    assert error.value.code == "search.index_empty"
    assert fake.embedding_inputs == []


async def test_an_unreachable_embeddings_server_is_an_embedding_error(tmp_path: Path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    write_docs(tmp_path / "docs", DOCS)
    embedder = embedder_for(f"http://127.0.0.1:{port}/v1", "m", timeout=5)
    try:
        with anyio.fail_after(10), pytest.raises(EmbeddingError) as error:
            await local_index(tmp_path, embedder).ensure()
    finally:
        await embedder.close()
    assert error.value.code == "search.embeddings_failed"
    assert not (tmp_path / ".subagents").exists()


async def test_a_query_of_another_dimension_is_refused(
        tmp_path: Path, fake: FakeModelServer, embedder: ModelEmbedder):
    write_docs(tmp_path / "docs", DOCS)
    with anyio.fail_after(10):
        index = await local_index(tmp_path, embedder).ensure()
    with pytest.raises(SearchError) as error:
        index.search([1.0, 0.0, 0.0])
    assert error.value.code == "search.dimension_mismatch"


def test_vector_index_search_is_exact_and_scores_are_cosine_similarities():
    from subagents.knowledge import Document

    documents = [Document(f"d{i}") for i in range(5)]
    vectors = [[1, 0], [0, 1], [1, 1], [-1, 0], [2, 0.1]]
    index = VectorIndex(documents, vectors)
    hits = index.search([3, 0], k=3)
    assert [h.text for h in hits] == ["d0", "d4", "d2"]
    assert hits[0].score == pytest.approx(1.0)
    assert hits[2].score == pytest.approx(2 ** -0.5, rel=1e-6)
    assert [h.text for h in index.search([0, 1], k=10)][-1] == "d3"


_WITHOUT = """
import asyncio, sys
sys.modules[{module!r}] = None  # as if the extra were not installed
from pathlib import Path
from subagents.exceptions import ConfigError
from subagents.knowledge import {cls}, Document, QdrantSettings
try:
    {call}
except ConfigError as error:
    print(error.code, error.issue.hint)
"""


@pytest.mark.parametrize(("module", "cls", "call", "extra"), [
    ("numpy", "VectorIndex", "VectorIndex([Document('a')], [[1.0]])", "search"),
    ("qdrant_client", "QdrantStore",
     "QdrantStore(QdrantSettings(collection='c'), None).client",
     "qdrant"),
])
def test_a_missing_extra_names_the_pip_command(module: str, cls: str, call: str, extra: str):
    script = _WITHOUT.format(module=module, cls=cls, call=call)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == f"search.extra_missing pip install 'subagents[{extra}]'"


def test_the_package_imports_without_numpy_or_qdrant_client():
    script = ("import sys; sys.modules['numpy'] = None; sys.modules['qdrant_client'] = None\n"
              "import subagents.knowledge as k; print(len(k.__all__) > 10)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "True"
