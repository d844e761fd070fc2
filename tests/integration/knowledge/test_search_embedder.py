"""ModelEmbedder: embeddings through the package's model client, in batches, over real HTTP."""

from __future__ import annotations

import socket

import anyio
import pytest
from subagents.knowledge import EmbeddingError
from subagents.testing import FakeModelServer
from subagents.testing.fake_server import embed_text

from tests.knowledge_helpers import embedder_for


async def test_texts_are_sent_in_batches_of_fifty_and_come_back_in_order():
    texts = [f"document number {i}" for i in range(120)]
    async with FakeModelServer() as fake:
        embedder = embedder_for(fake.base_url())
        try:
            with anyio.fail_after(30):
                vectors = await embedder.embed(texts)
        finally:
            await embedder.close()
        sizes = [len(batch) for batch in fake.embedding_inputs]
    assert sizes == [50, 50, 20]
    assert vectors[7] == pytest.approx(embed_text(texts[7]))
    assert vectors[119] == pytest.approx(embed_text(texts[119]))


async def test_the_identity_names_the_endpoint_and_the_model():
    async with FakeModelServer() as fake:
        embedder = embedder_for(fake.base_url(), "e5-large")
        assert embedder.identity == f"openai:{fake.base_url()}:e5-large"
        await embedder.close()


async def test_an_unreachable_endpoint_is_an_embedding_error_naming_the_models_code():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = embedder_for(f"http://127.0.0.1:{port}/v1", timeout=5)
    try:
        with anyio.fail_after(30), pytest.raises(EmbeddingError) as error:
            await embedder.embed(["hello"])
    finally:
        await embedder.close()
    assert error.value.code == "search.embeddings_failed"
    assert "[llm.connection]" in str(error.value)
