"""Hosted Chroma's quotas: the test mode refuses what hosted Chroma would, and a store past 300 documents keeps
within them everywhere (open from Chroma alone, list, search, follow another writer, delete, reopen), embedded and
through a real ``chroma run`` server."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.chroma_quotas import (
    HOSTED,
    QUOTAS_ENV,
    ChromaQuotas,
    QuotaClient,
    QuotaExceeded,
    quotas_from_env,
)
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.records import parts_of, parts_value

DIM = 16
N_DOCS = 700  # over two of hosted Chroma's 300-result reads


pytestmark = pytest.mark.usefixtures("fresh_chroma")


@pytest.fixture(autouse=True)
def _hosted_quotas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client here refuses what hosted Chroma refuses, whatever the suite was started with."""
    monkeypatch.setenv(QUOTAS_ENV, "hosted")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _docs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [_unit(rng.standard_normal((int(rng.integers(3, 7)), DIM))) for _ in range(n)]


def _meta(i: int) -> dict:
    return {"source": f"/docs/{i}.pdf", "group": "even" if i % 2 == 0 else "odd"}


def _collection(tmp_path: Path, quotas: ChromaQuotas = HOSTED):
    import chromadb
    from chromadb.config import Settings

    client = QuotaClient(chromadb.PersistentClient(path=str(tmp_path / "c"), settings=Settings(anonymized_telemetry=False)),
                         quotas)
    col = client.get_or_create_collection("quota-test", embedding_function=None)
    col.upsert(ids=[f"r{i}" for i in range(250)], embeddings=np.ones((250, 1), np.float32))
    col.upsert(ids=[f"r{i}" for i in range(250, 400)], embeddings=np.ones((150, 1), np.float32))
    return col


def test_the_test_mode_refuses_what_hosted_chroma_refuses(tmp_path: Path) -> None:
    col = _collection(tmp_path)
    with pytest.raises(QuotaExceeded, match="300 results per read"):
        col.get(include=[])  # 400 records, no limit
    with pytest.raises(QuotaExceeded, match="limit 301"):
        col.get(include=[], limit=301)
    assert len(col.get(include=[], limit=300, offset=300)["ids"]) == 100
    with pytest.raises(QuotaExceeded, match="records per write"):
        col.upsert(ids=[f"w{i}" for i in range(301)], embeddings=np.ones((301, 1), np.float32))
    with pytest.raises(QuotaExceeded, match="4096 a value"):
        col.upsert(ids=["big"], embeddings=np.ones((1, 1), np.float32), metadatas=[{"v": "x" * 4097}])
    with pytest.raises(QuotaExceeded, match="33 metadata keys"):
        col.upsert(ids=["keys"], embeddings=np.ones((1, 1), np.float32), metadatas=[{f"k{i}": i for i in range(33)}])
    with pytest.raises(QuotaExceeded, match="16385 bytes"):
        col.upsert(ids=["doc"], embeddings=np.ones((1, 1), np.float32), documents=["y" * 16_385])
    assert col.count() == 400  # nothing refused was written


def test_the_test_mode_refuses_more_concurrent_reads_than_allowed(tmp_path: Path) -> None:
    col = _collection(tmp_path, ChromaQuotas(concurrent_reads=1))
    inside, release = threading.Event(), threading.Event()
    real = col._collection.get

    def slow_get(*args, **kwargs):
        inside.set()
        release.wait(10)
        return real(*args, **kwargs)

    col._collection.get = slow_get
    worker = threading.Thread(target=lambda: col.get(ids=["r1"], include=[]))
    worker.start()
    try:
        assert inside.wait(10)
        with pytest.raises(QuotaExceeded, match="2 reads in flight"):
            col.count()
    finally:
        release.set()
        worker.join()
    assert col.count() == 400  # the slot is free again


def test_the_mode_is_named_by_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert quotas_from_env() is HOSTED
    monkeypatch.setenv(QUOTAS_ENV, "")
    assert quotas_from_env() is None
    monkeypatch.setenv(QUOTAS_ENV, "cloudy")
    with pytest.raises(StoreError, match="'cloudy' is not known"):
        quotas_from_env()


def _store_round_trip(path: Path, **where) -> None:
    """Write 700 documents, then read them back from Chroma alone with a fresh cache, follow a second writer's
    additions and deletions, and delete past one write's quota: every request through the quota wrapper."""
    docs = _docs(N_DOCS)
    ids = [f"d{i:04d}" for i in range(N_DOCS)]
    with MultiVectorStore(path, writable=True, **where) as store:
        store.add(ids, docs, [_meta(i) for i in range(N_DOCS)], texts=[f"text {i}" for i in range(N_DOCS)])
        expected = [(h.id, h.score) for h in store.search(docs[7], top_k=5, exhaustive=True)]
    shutil.rmtree(path / "cache", ignore_errors=True)  # a new machine: everything from Chroma
    with MultiVectorStore(path, **where) as reader:
        assert reader.count() == N_DOCS
        assert sorted(reader.ids()) == ids
        assert len(reader.ids(where={"group": "even"})) == N_DOCS // 2
        assert [(h.id, h.score) for h in reader.search(docs[7], top_k=5, exhaustive=True)] == expected
        assert reader.search(docs[7], top_k=1)[0].id == "d0007"
        assert len(list(reader.iter_documents(page=1000))) == N_DOCS
        assert len(reader.get(ids)) == N_DOCS
        assert len(reader.texts(ids)) == N_DOCS
        with MultiVectorStore(path, writable=True, **where) as writer:
            more = _docs(320, seed=1)
            writer.add([f"e{i:04d}" for i in range(320)], more, [_meta(i) for i in range(320)])
            assert writer.delete(ids[:350]) == 350
        reader.refresh()
        assert reader.count() == N_DOCS - 350 + 320
        assert reader.search(more[3], top_k=1)[0].id == "e0003"
        assert reader.bytes_by_part()["vectors"] > 0


def test_a_store_past_300_documents_keeps_hosted_quotas_embedded(tmp_path: Path) -> None:
    _store_round_trip(tmp_path / "s")


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    from docpc_retrievers.testing.chroma_server import chroma_server as started

    with started(tmp_path_factory.mktemp("chroma-server")) as server:
        yield server.host, server.port


def test_a_store_past_300_documents_keeps_hosted_quotas_through_chroma_run(
    tmp_path: Path, chroma_server: tuple[str, int]
) -> None:
    host, port = chroma_server
    _store_round_trip(tmp_path / "s", host=host, port=port, collection="quota-srv")


def test_a_long_part_split_fits_one_metadata_value() -> None:
    pages = [760] * 3000
    value = parts_value("long.pdf", pages)
    assert isinstance(value, str) and len(value) <= HOSTED.metadata_value_bytes
    assert parts_of(value) == tuple(pages)
    assert parts_value("short.pdf", [3, 4]) == [3, 4] and parts_of([3, 4]) == (3, 4)
    distinct = list(np.random.default_rng(0).integers(1, 60_000, size=3000))
    with pytest.raises(ValueError, match="distinct.pdf: 3000 parts"):
        parts_value("distinct.pdf", distinct)


def test_metadata_over_the_quota_is_refused_naming_the_document_and_key(tmp_path: Path) -> None:
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        with pytest.raises(ValueError, match="document a: metadata 'note' holds 5000 bytes"):
            store.add(["a"], _docs(1), [{"note": "n" * 5000}])
        with pytest.raises(ValueError, match="document b: 30 metadata keys"):
            store.add(["b"], _docs(1), [{f"k{i}": i for i in range(30)}])
        store.add(["c"], _docs(1), [{f"k{i}": "v" * 4000 for i in range(20)}])
        assert store.count() == 1


def test_a_fresh_writer_of_a_big_store_reads_only_the_records_it_replaces(tmp_path: Path) -> None:
    """With a cold cache and more documents than one read, a writer writes without loading the view (no paged read
    of every record); a reader opened afterwards still sees what it wrote and deleted."""
    path = tmp_path / "s"
    docs = _docs(N_DOCS)
    ids = [f"d{i:04d}" for i in range(N_DOCS)]
    with MultiVectorStore(path, writable=True) as store:
        store.add(ids, docs, [_meta(i) for i in range(N_DOCS)])
    shutil.rmtree(path / "cache")
    with MultiVectorStore(path, writable=True) as writer:
        reads: list[dict] = []
        real_get = writer.engine.docs.get

        def get(*args, **kwargs):
            reads.append(kwargs)
            return real_get(*args, **kwargs)

        writer.engine.docs.get = get
        assert writer.known("d0003") and not writer.known("new")
        new = _docs(1, seed=5)
        writer.add(["new"], new, [_meta(999)])
        assert writer.delete(["d0001", "gone"]) == 1
        assert writer.ids(where={"source": "/docs/999.pdf"}) == ["new"]
        assert [d.id for d in writer.get(["new", "d0001"])] == ["new"]
        assert not [r for r in reads if r.get("ids") is None and r.get("where") is None], reads
        assert not writer.reader.loaded  # the view was never opened
    with MultiVectorStore(path) as reader:
        assert reader.count() == N_DOCS
        assert "d0001" not in reader and "new" in reader
        assert reader.search(new[0], top_k=1)[0].id == "new"


def test_long_ids_split_the_feed_within_a_documents_quota(tmp_path: Path) -> None:
    """250 ids of 90 characters in one commit: the feed's records stay under 16 KB of text each, and a reader with
    a cold cache lists the store from the feed."""
    ids = [f"s3://archive/reports/{'z' * 60}-{i:06d}" for i in range(250)]
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids, _docs(250, seed=3), [{} for _ in ids])
        keys = store.engine.log.get(include=["documents"])
        assert len(keys["ids"]) == 2 and all(len(t.encode()) <= HOSTED.document_bytes for t in keys["documents"])
    shutil.rmtree(tmp_path / "s" / "cache")
    with MultiVectorStore(tmp_path / "s") as reader:
        assert reader.engine.live_ids() == ids
        assert sorted(reader.ids()) == sorted(ids) and reader.count() == 250


def test_a_reader_prefetches_every_payload_in_the_background(tmp_path: Path) -> None:
    """A cold reader started with prefetch() fills its cache 300 documents a read while it can already answer;
    once done, a search reads no payload from Chroma."""
    path = tmp_path / "s"
    docs = _docs(N_DOCS, seed=2)
    ids = [f"d{i:04d}" for i in range(N_DOCS)]
    with MultiVectorStore(path, writable=True) as store:
        store.add(ids, docs, [_meta(i) for i in range(N_DOCS)])
    shutil.rmtree(path / "cache")
    with MultiVectorStore(path) as reader:
        reader.prefetch()
        assert reader.search(docs[11], top_k=1)[0].id == "d0011"  # answers while the prefetch runs
        thread = reader.reader._prefetcher
        assert thread is not None
        thread.join(60)
        assert not thread.is_alive() and all(i in reader.cache for i in ids)
        fetched: list[list[str]] = []
        real = reader.engine.payload
        reader.engine.payload = lambda wanted, kind: fetched.append(list(wanted)) or real(wanted, kind)
        assert reader.search(docs[500], top_k=1)[0].id == "d0500"
        assert fetched == []
