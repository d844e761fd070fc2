"""Qdrant as the knowledge store: qdrant-client's local mode, and a server when one is given.

The server tests run when ``SUBAGENTS_TEST_QDRANT_URL`` (for example ``http://127.0.0.1:6333``)
names a reachable Qdrant server; otherwise they are skipped with that reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from subagents.knowledge import (
    Document,
    ModelEmbedder,
    QdrantSettings,
    QdrantStore,
    SearchBackendError,
)
from subagents.testing import FakeModelServer

from tests.knowledge_helpers import embedder_for

DOCUMENTS = [
    Document("Shipping takes three working days.", {"source": "docs/shipping.txt"}),
    Document("You can return an item within thirty days.", {"source": "docs/returns.txt"}),
    Document("We accept credit cards and debit cards.", {"source": "docs/cards.txt"}),
]


@pytest.fixture
async def embedder() -> AsyncIterator[ModelEmbedder]:
    async with FakeModelServer() as fake:
        client = embedder_for(fake.base_url())
        yield client
        await client.close()


async def test_documents_added_to_an_in_memory_collection_are_found(embedder: ModelEmbedder):
    store = QdrantStore(QdrantSettings(collection="docs", location=":memory:"), embedder)
    try:
        with anyio.fail_after(20):
            assert await store.add(DOCUMENTS) == 3
            assert await store.add(DOCUMENTS[:1]) == 1  # same id: no duplicate point
            hits = await store.search("how long does shipping take")
    finally:
        await store.close()
    assert next(h.text for h in hits) == "Shipping takes three working days."
    assert hits[0].metadata == {"source": "docs/shipping.txt"}
    assert len(hits) == 3
    assert hits[0].score > hits[1].score


async def test_a_local_collection_on_disk_survives_a_new_client(tmp_path: Path,
                                                                 embedder: ModelEmbedder):
    settings = QdrantSettings(collection="docs", path=str(tmp_path / "qdrant"))
    first = QdrantStore(settings, embedder)
    try:
        with anyio.fail_after(20):
            await first.add(DOCUMENTS)
    finally:
        await first.close()
    second = QdrantStore(settings, embedder)
    try:
        with anyio.fail_after(20):
            hits = await second.search("credit cards", k=1)
    finally:
        await second.close()
    assert [h.metadata["source"] for h in hits] == ["docs/cards.txt"]


async def test_the_threshold_and_a_named_vector_are_passed_to_qdrant(embedder: ModelEmbedder):
    settings = QdrantSettings(collection="named", location=":memory:", vector_name="dense",
                              content_payload_key="body", metadata_payload_key="meta")
    store = QdrantStore(settings, embedder)
    try:
        with anyio.fail_after(20):
            await store.add(DOCUMENTS)
            related = await store.search("return an item", min_score=0.3)
            unrelated = await store.search("zebra giraffe", min_score=0.3)
    finally:
        await store.close()
    assert [h.metadata["source"] for h in related] == ["docs/returns.txt"]
    assert unrelated == []


async def test_a_point_without_the_content_key_is_a_clear_error(embedder: ModelEmbedder):
    from qdrant_client import models

    store = QdrantStore(QdrantSettings(collection="docs", location=":memory:"), embedder)
    try:
        with anyio.fail_after(20):
            await store.add(DOCUMENTS[:1])
            [vector] = await embedder.embed(["anything"])
            await store.client.upsert("docs", points=[models.PointStruct(
                id=str(uuid.uuid4()), vector=vector, payload={"content": "other layout"})])
            with pytest.raises(SearchBackendError) as error:
                await store.search("anything")
    finally:
        await store.close()
    assert error.value.code == "search.qdrant.payload_missing"


async def test_a_missing_collection_is_a_backend_error(embedder: ModelEmbedder):
    store = QdrantStore(QdrantSettings(collection="absent", location=":memory:"), embedder)
    try:
        with anyio.fail_after(20), pytest.raises(SearchBackendError) as error:
            await store.search("anything")
    finally:
        await store.close()
    assert error.value.code == "search.backend_failed"


def test_settings_take_rasas_keys_and_pass_only_what_is_set():
    settings = QdrantSettings.model_validate({
        "type": "qdrant", "collection": "docs", "host": "qdrant.internal", "port": 6334,
        "api_key": "secret", "timeout": 3, "unknown_key": 1})
    assert settings.client_options() == {
        "host": "qdrant.internal", "api_key": "secret", "port": 6334, "grpc_port": 6334,
        "prefer_grpc": False, "timeout": 3}
    assert QdrantSettings(collection="c", path="/data").client_options() == {"path": "/data"}
    assert (settings.content_payload_key, settings.metadata_payload_key) == ("text", "metadata")


QDRANT_URL = os.environ.get("SUBAGENTS_TEST_QDRANT_URL")


@pytest.mark.skipif(not QDRANT_URL, reason="no Qdrant server: set SUBAGENTS_TEST_QDRANT_URL "
                                           "(for example http://127.0.0.1:6333) to run it")
async def test_a_qdrant_server_collection_is_filled_and_searched(embedder: ModelEmbedder):
    name = f"subagents_test_{uuid.uuid4().hex[:8]}"
    store = QdrantStore(QdrantSettings(collection=name, url=QDRANT_URL), embedder)
    try:
        with anyio.fail_after(30):
            await store.add(DOCUMENTS)
            hits = await store.search("debit cards", k=2)
            await store.client.delete_collection(name)
    finally:
        await store.close()
    assert hits[0].metadata["source"] == "docs/cards.txt"
