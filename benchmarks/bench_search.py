"""Knowledge search: index build time and query latency at 1,000 and 10,000 chunks.

Part 1, the index alone (vectors given, no embeddings call): the embedded index
(:class:`subagents.knowledge.VectorIndex`, exact search with numpy) at dimensions 384 and 1536 —
build, save, load, and the latency of one top-4 query. When they are installed, the same is
measured for FAISS's exact indexes (``IndexFlatIP``, ``IndexFlatL2``: what Rasa uses) and for
Qdrant's local mode (``:memory:``), so the choice of library can be checked on this machine.
Build, save and load are medians over the rounds; queries are interleaved (each query runs on
every library in turn), and both their CPU time (the figure that holds on a loaded machine) and
their wall time (median, p99) are shown.

Part 2, end to end: :class:`subagents.knowledge.LocalIndex` over a documents folder of N chunks,
embeddings from the fake model server over real HTTP through the package's model client
(:class:`subagents.knowledge.ModelEmbedder`; in this process, dimension 256): the first
build (chunking, embedding in batches of 50, persisting), loading the persisted index on the next
start, and a search including the query's embedding request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine, summary

K = 4


def _unit(np: Any, rows: int, dim: int, seed: int) -> Any:
    data = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    return data / np.linalg.norm(data, axis=1, keepdims=True)


def _ms(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


class _Lib:
    """One library's build/save/load/query, timed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.build: list[float] = []
        self.save: list[float] = []
        self.load: list[float] = []
        self.query: list[float] = []
        self.query_cpu: list[float] = []
        self.search: Callable[[Any], Any] = lambda q: None

    def time_query(self, query: Any) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.search(query)
        self.query_cpu.append((time.process_time() - cpu) * 1000)
        self.query.append((time.perf_counter() - wall) * 1000)

    def row(self, n: int, dim: int) -> str:
        def med(values: list[float]) -> str:
            return f"{statistics.median(values):9.2f}" if values else "        -"

        cpu = f"{statistics.median(self.query_cpu):7.3f}" if self.query_cpu else "      -"
        return (f"{self.name:22} {n:6} {dim:5} {med(self.build)} {med(self.save)} "
                f"{med(self.load)}  cpu {cpu} ms  wall {summary(self.query)}")


def _numpy_setup(lib: _Lib, data: Any, folder: Path) -> None:
    from subagents.knowledge import Document, VectorIndex

    documents = [Document(f"chunk {i}") for i in range(len(data))]
    index: list[VectorIndex] = []
    lib.build.append(_ms(lambda: index.append(VectorIndex(documents, data))))
    lib.save.append(_ms(lambda: index[0].save(folder, "bench")))
    lib.load.append(_ms(lambda: VectorIndex.load(folder, "vectors-bench.npy",
                                                 "chunks-bench.json")))
    lib.search = lambda q: index[0].search(q, K)


def _faiss_setup(lib: _Lib, faiss: Any, kind: str, data: Any, folder: Path) -> None:
    index: list[Any] = []

    def build() -> None:
        flat = getattr(faiss, kind)(data.shape[1])
        flat.add(data)
        index.append(flat)

    lib.build.append(_ms(build))
    path = str(folder / f"{kind}.faiss")
    lib.save.append(_ms(lambda: faiss.write_index(index[0], path)))
    lib.load.append(_ms(lambda: faiss.read_index(path)))
    lib.search = lambda q: index[0].search(q.reshape(1, -1), K)


async def _qdrant_round(lib: _Lib, data: Any, queries: Any) -> None:
    from qdrant_client import AsyncQdrantClient, models

    client = AsyncQdrantClient(location=":memory:")
    start = time.perf_counter()
    await client.create_collection("bench", vectors_config=models.VectorParams(
        size=data.shape[1], distance=models.Distance.COSINE))
    for offset in range(0, len(data), 1000):
        batch = data[offset:offset + 1000]
        await client.upsert("bench", points=models.Batch(
            ids=list(range(offset, offset + len(batch))), vectors=batch.tolist()), wait=True)
    lib.build.append((time.perf_counter() - start) * 1000)
    for query in queries:
        start, cpu = time.perf_counter(), time.process_time()
        await client.query_points("bench", query=query.tolist(), limit=K)
        lib.query_cpu.append((time.process_time() - cpu) * 1000)
        lib.query.append((time.perf_counter() - start) * 1000)
    await client.close()


async def index_only(sizes: list[int], dims: list[int], queries: int, rounds: int) -> None:
    import numpy as np

    try:
        import faiss

        faiss.omp_set_num_threads(1)  # one query at a time: threads only add jitter here
    except ImportError:
        faiss = None
    try:
        import qdrant_client  # noqa: F401
        has_qdrant = True
    except ImportError:
        has_qdrant = False
    print(f"numpy {np.__version__}"
          + (f", faiss-cpu {faiss.__version__}" if faiss else ", faiss-cpu not installed")
          + ("" if has_qdrant else ", qdrant-client not installed"))
    print(f"{'library':22} {'chunks':>6} {'dim':>5} {'build ms':>9} {'save ms':>9} "
          f"{'load ms':>9}")
    for n in sizes:
        for dim in dims:
            data = _unit(np, n, dim, seed=n + dim)
            probe = _unit(np, queries, dim, seed=7)
            libs = [_Lib("numpy (embedded index)")]
            if faiss is not None:
                libs += [_Lib("faiss IndexFlatIP"), _Lib("faiss IndexFlatL2")]
            qdrant = _Lib("qdrant local :memory:") if has_qdrant else None
            with tempfile.TemporaryDirectory() as tmp:
                for _ in range(rounds):
                    _numpy_setup(libs[0], data, Path(tmp))
                    if faiss is not None:
                        _faiss_setup(libs[1], faiss, "IndexFlatIP", data, Path(tmp))
                        _faiss_setup(libs[2], faiss, "IndexFlatL2", data, Path(tmp))
                    for query in probe:  # interleaved, so a load spike hits every library
                        for lib in libs:
                            lib.time_query(query)
            if qdrant is not None:  # slow to build: one round, fewer queries
                await _qdrant_round(qdrant, data, probe[:max(20, queries // 5)])
                libs.append(qdrant)
            for lib in libs:
                print(lib.row(n, dim))


def _write_docs(folder: Path, chunks: int) -> None:
    """``chunks`` paragraphs of ~900 characters, 100 per file: one chunk each."""
    words = [f"term{i}" for i in range(2000)]
    for file_number in range(max(1, chunks // 100)):
        paragraphs = []
        for p in range(min(100, chunks - file_number * 100)):
            seed = file_number * 100 + p
            paragraphs.append(" ".join(words[(seed * 7 + j * 13) % 2000] for j in range(100)))
        (folder / f"doc{file_number:04d}.txt").write_text("\n\n".join(paragraphs),
                                                          encoding="utf-8")


async def end_to_end(sizes: list[int], queries: int) -> None:
    from subagents.knowledge import LocalIndex, ModelEmbedder
    from subagents.llm import ModelSettings, build_model
    from subagents.testing import FakeModelServer

    print(f"{'chunks':>6} {'first build ms':>15} {'load ms':>9}   "
          "search (query embedded over HTTP)")
    async with FakeModelServer() as fake:
        settings = ModelSettings.from_mapping({"provider": "openai", "model": "bench",
                                               "api_base": fake.base_url(), "max_retries": 0,
                                               "timeout": 120})
        embedder = ModelEmbedder(build_model(settings, name="search_embeddings"))
        for n in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                source = Path(tmp) / "docs"
                source.mkdir()
                _write_docs(source, n)
                index = LocalIndex(source, Path(tmp) / "index", embedder)
                start = time.perf_counter()
                built = await index.ensure()
                build_ms = (time.perf_counter() - start) * 1000
                assert index.rebuilt
                assert len(built) == n, len(built)
                again = LocalIndex(source, Path(tmp) / "index", embedder)
                start = time.perf_counter()
                await again.ensure()
                load_ms = (time.perf_counter() - start) * 1000
                assert not again.rebuilt
                samples = []
                for q in range(queries):
                    start = time.perf_counter()
                    await again.search(f"term{q} term{q * 3 % 2000}")
                    samples.append((time.perf_counter() - start) * 1000)
                print(f"{n:6} {build_ms:15.0f} {load_ms:9.1f}   {summary(samples)}")
        await embedder.close()


async def main(sizes: list[int] | None = None, dims: list[int] | None = None,
               queries: int = 200, rounds: int = 5, embeddings: bool = True) -> None:
    sizes = sizes or [1000, 10000]
    print("== Knowledge search: index alone (exact top-4, unit vectors) ==")
    await index_only(sizes, dims or [384, 1536], queries, rounds)
    if embeddings:
        print("\n== Knowledge search end to end: LocalIndex, fake embeddings server over HTTP ==")
        await end_to_end(sizes, min(queries, 100))


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", type=_ints, default=[1000, 10000],
                        help="numbers of chunks, comma-separated (default 1000,10000)")
    parser.add_argument("--dims", type=_ints, default=[384, 1536],
                        help="vector dimensions of part 1 (default 384,1536)")
    parser.add_argument("--queries", type=int, default=200, help="queries per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per library (part 1)")
    parser.add_argument("--no-embeddings", action="store_true",
                        help="skip part 2 (the end-to-end build with the fake server)")
    args = parser.parse_args()
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.disable(logging.INFO)
    print(f"machine: {machine()}, {os.cpu_count()} cpus\n")
    asyncio.run(main(args.sizes, args.dims, args.queries, args.rounds, not args.no_embeddings))
