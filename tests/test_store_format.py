"""Formats 2 and 3: everything in Chroma, compact vectors, a cache that can vanish, old stores migrated."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from docpc_retrievers.errors import DocumentNotFoundError, StoreError
import base64
import os

from docpc_retrievers.store.codec import (
    b85_decode, b85_encode, chunk_payload, dequantize, join_payload, pack_vectors, quantize, unpack_vectors,
)
from docpc_retrievers.store.engine import STORE_FORMAT
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.encoders.pooling import pool_vectors

DIM = 32


@pytest.fixture(autouse=True)
def _fresh_chroma_systems() -> Iterator[None]:
    yield
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _docs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [_unit(rng.standard_normal((int(rng.integers(10, 40)), DIM))) for _ in range(n)]


def _ids(n: int) -> list[str]:
    return [f"{i:032x}" for i in range(n)]


def test_codec_round_trips_and_chunks_fit_hosted_quotas() -> None:
    x = _unit(np.random.default_rng(1).standard_normal((300, 128)))
    q, scale = quantize(x)
    assert q.dtype == np.int8 and scale.dtype == np.float16
    assert np.abs(dequantize(q, scale) - x).max() <= float(scale.max()) * 0.51 + 1e-4
    anchors = np.arange(300, dtype=np.uint16)
    data = pack_vectors(x, anchors)
    assert len(data) == 300 * (128 + 2) + 300 * 2
    q2, s2, a2 = unpack_vectors(data, 128, 300)
    assert np.array_equal(q2, q) and np.array_equal(s2, scale) and np.array_equal(a2, anchors)
    records = chunk_payload(data)
    for meta in records:
        assert len(meta) <= 24 and all(len(v) <= 4000 for v in meta.values())  # 32 keys, 4 KB per value
    assert join_payload(records) == data


@pytest.mark.parametrize("n", [*range(13), 4000, 60_001])
def test_base85_is_the_standard_library_s_and_every_packing_round_trips(n: int) -> None:
    data = os.urandom(n)
    assert b85_encode(data) == base64.b85encode(data).decode("ascii")
    assert b85_decode(b85_encode(data)) == data
    for packing in ("b64", "b85", "z85"):
        records = chunk_payload(data, packing)
        assert all(len(m) <= 25 and all(len(v) <= 4000 for v in m.values()) for m in records)
        assert join_payload(records) == data


def test_z85_compresses_what_shrinks_and_falls_back_to_base85_for_what_does_not() -> None:
    """Vectors' bytes compress (zeros here, entirely); random bytes (like a WebP grid) are only base85-packed."""
    zeros, noise = bytes(60_000), os.urandom(60_000)
    assert chunk_payload(zeros, "z85")[0]["c"] == "z85" and len(chunk_payload(zeros, "z85")[0]["p0"]) < 1000
    packed = chunk_payload(noise, "z85")
    assert {m["c"] for m in packed} == {"b85"}
    assert sum(len(v) for m in packed for k, v in m.items() if k != "c") == 75_000  # 5 characters per 4 bytes
    assert "c" not in chunk_payload(noise, "b64")[0]  # base64 records look as format 2 wrote them
    with pytest.raises(ValueError, match="upgrade docpc-retrievers"):
        join_payload([{"c": "zstd", "p0": "abc"}])
    with pytest.raises(ValueError, match="unknown payload packing"):
        chunk_payload(b"x", "b32")


def _blob_packings(store: MultiVectorStore) -> set[str]:
    got = store.engine.blobs.get(include=["metadatas"])["metadatas"]
    return {str(m.get("c", "b64")) for m in got}


def test_a_new_store_is_format_3_with_packed_payloads_and_a_format_2_store_stays_base64(tmp_path: Path) -> None:
    """New stores pack payloads as zlib+base85 (format 3); a store written as format 2 keeps writing base64, so an
    older version still reads what this one adds; both read back the same vectors, grids and long texts."""
    docs, ids = _docs(6), _ids(6)
    grid = os.urandom(3000)
    with MultiVectorStore(tmp_path / "new", writable=True) as store:
        store.add(ids, docs, [{"n": i} for i in range(6)], texts=["y" * 30_000] * 6, grids=[grid] * 6)
        assert store.engine.read_manifest()["format"] == STORE_FORMAT == 3
        assert _blob_packings(store) == {"z85", "b85"}  # vectors and text compress; the random grid does not
    with MultiVectorStore(tmp_path / "old", writable=True) as store:
        store.add(ids[:1], docs[:1], [{"n": 0}])
        manifest = store.engine.read_manifest()
        store.engine.write_manifest({**manifest, "format": 2})
    with MultiVectorStore(tmp_path / "old", writable=True) as store:
        store.add(ids[1:], docs[1:], [{"n": i} for i in range(1, 6)], texts=["y" * 30_000] * 5, grids=[grid] * 5)
        assert store.engine.read_manifest()["format"] == 2
        new_records = store.engine.blobs.get(where={"doc": ids[3]}, include=["metadatas"])["metadatas"]
        assert new_records and all("c" not in m for m in new_records)
    for name in ("new", "old"):
        shutil.rmtree(tmp_path / name / "cache", ignore_errors=True)
        with MultiVectorStore(tmp_path / name) as store:
            np.testing.assert_allclose(store.vectors(ids[3]), docs[3], atol=0.01)
            assert store.grid(ids[3]) == grid
            assert store.texts([ids[3]])[ids[3]] == "y" * 30_000


def test_a_store_of_a_newer_format_is_refused_by_name(tmp_path: Path) -> None:
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(_ids(1), _docs(1), [{"n": 0}])
        store.engine.write_manifest({**store.engine.read_manifest(), "format": 4})
    with pytest.raises(StoreError, match="format 4 is not supported by this version"):
        MultiVectorStore(tmp_path / "s")


def test_pooling_keeps_unit_rows_and_anchors_to_members() -> None:
    x = _unit(np.random.default_rng(2).standard_normal((60, DIM)))
    pooled, anchors = pool_vectors(x, 3)
    assert anchors is not None and len(pooled) == len(anchors) <= 20
    np.testing.assert_allclose(np.linalg.norm(pooled, axis=1), 1.0, atol=1e-5)
    assert set(anchors.tolist()) <= set(range(60))
    same, none = pool_vectors(x, 1)
    assert none is None and np.array_equal(same, x)


def test_everything_a_search_needs_is_in_chroma(tmp_path: Path) -> None:
    """Delete the local cache (even mid-session): search, vectors and grids come back from Chroma."""
    docs, ids = _docs(12), _ids(12)
    grid = b"RIFF....WEBPfake-grid-bytes"
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids, docs, [{"title": f"t{i}"} for i in range(12)], texts=["x" * 40_000] + [""] * 11,
                  grids=[grid] * 12)
        q = docs[4][:5]
        before = [(h.id, h.score) for h in store.search(q, top_k=3)]
    shutil.rmtree(tmp_path / "s" / "cache")
    with MultiVectorStore(tmp_path / "s") as store:
        assert [(h.id, h.score) for h in store.search(q, top_k=3)] == before
        shutil.rmtree(tmp_path / "s" / "cache", ignore_errors=True)  # while open: still answers
        np.testing.assert_allclose(store.vectors(ids[4]), docs[4], atol=0.01)
        assert store.grid(ids[4]) == grid
        assert store.texts([ids[0]])[ids[0]] == "x" * 40_000  # longer than a record's 16 KB text field
        doc_record = store.engine.docs.get(ids=[ids[0]], include=["documents"])["documents"][0]
        assert len(doc_record.encode()) <= 16_000


def test_a_new_store_at_a_deleted_path_starts_empty_in_the_same_process(tmp_path: Path) -> None:
    """Build, close, delete the folder, build again at the same path: the new store holds only the new data."""
    path = tmp_path / "s"
    with MultiVectorStore(path, writable=True) as store:
        store.add(_ids(5), _docs(5), [{"n": i} for i in range(5)])
    shutil.rmtree(path)
    with MultiVectorStore(path, writable=True) as store:
        assert store.count() == 0
        store.add(_ids(2), _docs(2, seed=9), [{"n": i} for i in range(2)])
        assert store.count() == 2


def test_grid_ids_never_leave_the_store(tmp_path: Path) -> None:
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(_ids(1), _docs(1), [{}], grids=[b"grid"])
        for bad in ("../../x", "/etc/passwd", "0" * 31 + "/"):
            with pytest.raises(DocumentNotFoundError):
                store.grid(bad)
        with pytest.raises(DocumentNotFoundError):
            store.grid("f" * 32)


# --------------------------------------------------------------------------- format 1 (0.1) stores


def _write_format_1_store(path: Path, docs: list[np.ndarray], ids: list[str]) -> None:
    """A store as docpc-retrievers 0.1 wrote it: records in Chroma, fp16 vectors and PNG grids in local files."""
    import chromadb
    from chromadb.config import Settings

    (path / "vectors").mkdir(parents=True)
    (path / "grids").mkdir()
    rows = np.concatenate(docs).astype("<f2")
    (path / "vectors" / "seg-1.f16").write_bytes(rows.tobytes())
    client = chromadb.PersistentClient(path=str(path / "chroma"), settings=Settings(anonymized_telemetry=False))
    col = client.get_or_create_collection("docpc", embedding_function=None, configuration={"hnsw": {"space": "ip"}})
    offset, metas = 0, []
    for doc_id, d in zip(ids, docs):
        metas.append({"title": f"old {doc_id[-2:]}", "_seg": "seg-1.f16", "_off": offset, "_n": len(d), "_nc": 0})
        offset += len(d)
        Image.new("RGB", (40, 52), (200, 10, 10)).save(path / "grids" / f"{doc_id}.png")
    col.add(ids=ids, embeddings=np.stack([_unit(d.mean(0)) for d in docs]), metadatas=metas,
            documents=[f"text {i}" for i in range(len(ids))])
    index = {"mode": "grid", "strategy": "first", "pages": 4, "seed": 0, "grid": [2, 2], "cell_size": [512, 662],
             "page_size": [1024, 1324]}
    manifest = {"format": 1, "collection": "docpc", "dim": DIM, "generation": 3,
                "settings": {"encoder": {"model_id": "m"}, "index": index}}
    (path / "store.json").write_text(json.dumps(manifest))
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def test_old_store_is_refused_with_the_command_that_converts_it(tmp_path: Path) -> None:
    _write_format_1_store(tmp_path / "old", _docs(3), _ids(3))
    with pytest.raises(StoreError, match="docpc migrate"):
        MultiVectorStore(tmp_path / "old")


def test_migrate_converts_in_place_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from docpc_retrievers.store import migrate

    docs, ids = _docs(7, seed=4), _ids(7)
    path = tmp_path / "old"
    _write_format_1_store(path, docs, ids)
    calls = {"n": 0}
    original = migrate._write

    def interrupted(engine: object, records: list) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed after the first batch
        original(engine, records)  # type: ignore[arg-type]

    monkeypatch.setattr(migrate, "_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        migrate.migrate_store(path, batch_size=3)
    monkeypatch.undo()
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    report = migrate.migrate_store(path, batch_size=3)
    assert (report.converted, report.already) == (4, 3)
    assert not (path / "vectors").exists() and not (path / "grids").exists()
    with pytest.raises(StoreError, match="already"):
        migrate.migrate_store(path)
    SharedSystemClient.clear_system_cache()
    with MultiVectorStore(path) as store:
        assert store.count() == 7
        assert store.settings["index"]["pool_factor"] == 1
        for doc_id, d in zip(ids, docs):
            np.testing.assert_allclose(store.vectors(doc_id), d, atol=0.01)
            assert store.grid(doc_id)[8:12] == b"WEBP"
        assert store.get([ids[2]])[0].metadata == {"title": f"old {ids[2][-2:]}"}
        assert store.search(docs[5][:4], top_k=1)[0].id == ids[5]


def test_deleted_and_replaced_vectors_are_reclaimed_from_the_cache(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    docs, ids = [_unit(rng.standard_normal((400, 128))) for _ in range(40)], _ids(40)  # 2 MB of int8 rows
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids, docs, [{} for _ in ids])
        store.delete(ids[4:])
        store.add(ids[:2], [_unit(rng.standard_normal((400, 128))) for _ in range(2)], [{}, {}])  # replaced
        live = store.cache.live_bytes()
        written = sum(p.stat().st_size for p in (tmp_path / "s" / "cache").glob("vec-*.bin"))
    cache_files = sum(p.stat().st_size for p in (tmp_path / "s" / "cache").glob("vec-*.bin"))
    assert written > 40 * 400 * 130 and cache_files == live == 4 * 400 * 130
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.count() == 4
        assert store.engine.blobs.get(where={"doc": {"$in": ids[4:]}}, include=[])["ids"] == []  # Chroma's too


def test_a_reader_after_the_writer_opens_from_the_cache_without_reading_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's cache (summaries + feed position) lets the next open skip the full read from Chroma."""
    from docpc_retrievers.store.engine import ChromaEngine

    docs, ids = _docs(30, seed=5), _ids(30)
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids[:20], docs[:20], [{} for _ in range(20)])
        store.add(ids[20:], docs[20:], [{} for _ in range(10)])
        expected = [(h.id, h.score) for h in store.search(docs[7][:5], top_k=5)]
    full_reads = []
    original = ChromaEngine.records

    def counting(self: ChromaEngine, ids: object = None, **kw: object) -> object:
        if ids is None:
            full_reads.append(1)
        return original(self, ids, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ChromaEngine, "records", counting)
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.count() == 30
        assert [(h.id, h.score) for h in store.search(docs[7][:5], top_k=5)] == expected
    assert full_reads == []


def test_a_cache_from_before_the_snapshot_is_rebuilt_and_its_old_file_removed(tmp_path: Path) -> None:
    """A 0.2 cache kept its first stage in first_stage.npz: the store reads Chroma once and maps a snapshot after."""
    import shutil

    docs, ids = _docs(12, seed=9), _ids(12)
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids, docs, [{} for _ in ids])
        expected = [(h.id, h.score) for h in store.search(docs[3][:5], top_k=4)]
    cache = tmp_path / "s" / "cache"
    shutil.rmtree(cache / "first_stage")
    (cache / "first_stage.npz").write_bytes(b"an older format")
    with MultiVectorStore(tmp_path / "s") as store:
        assert [(h.id, h.score) for h in store.search(docs[3][:5], top_k=4)] == expected
    assert not (cache / "first_stage.npz").exists()
    assert (cache / "first_stage" / "current.json").is_file()
    with MultiVectorStore(tmp_path / "s") as store:  # and the next reader maps that snapshot
        assert [(h.id, h.score) for h in store.search(docs[3][:5], top_k=4)] == expected


def test_cache_reads_many_documents_at_once_and_leaves_misses_out(tmp_path: Path) -> None:
    from docpc_retrievers.store.cache import VectorCache

    cache = VectorCache(tmp_path / "cache", "identity")
    items = {f"d{i}": bytes([i]) * (1000 + i) for i in range(5)}
    cache.put(items)
    got = cache.get_many(["d3", "missing", "d0", "d4"])
    assert got == {"d3": items["d3"], "d0": items["d0"], "d4": items["d4"]}
    cache.close()
    reopened = VectorCache(tmp_path / "cache", "identity")  # after a save: read back from the file
    assert reopened.get_many(list(items)) == items
    reopened.close()


def test_cache_saves_its_index_as_it_grows_so_a_killed_reader_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docpc_retrievers.store import cache as cache_module

    monkeypatch.setattr(cache_module, "SAVE_EVERY_BYTES", 2500)
    cache = cache_module.VectorCache(tmp_path / "cache", "identity")
    cache.put({"a": b"x" * 1000, "b": b"y" * 1000})  # 2,000 bytes: not yet
    assert not (tmp_path / "cache" / "vectors.npz").exists()
    cache.put({"c": b"z" * 1000})  # past 2,500: saved without close()
    seen_by_another = cache_module.VectorCache(tmp_path / "cache", "identity")
    assert seen_by_another.get_many(["a", "b", "c"]) == {"a": b"x" * 1000, "b": b"y" * 1000, "c": b"z" * 1000}
    assert not cache.dirty


def test_a_reader_that_never_closes_keeps_what_it_fetched(tmp_path: Path) -> None:
    """A script that searches and exits without close(): its cache index is saved at exit, not left unreferenced."""
    import subprocess
    import sys

    docs, ids = _docs(12, seed=11), _ids(12)
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(ids, docs, [{} for _ in ids])
    shutil.rmtree(tmp_path / "s" / "cache")
    np.save(tmp_path / "q.npy", docs[2][:4])
    script = (
        "import sys, numpy as np\n"
        "from docpc_retrievers.store.multivector import MultiVectorStore\n"
        "store = MultiVectorStore(sys.argv[1])\n"
        "store.search(np.load(sys.argv[2]), top_k=3, exhaustive=True)\n"  # every document fetched from Chroma
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "s"), str(tmp_path / "q.npy")], check=True)
    from docpc_retrievers.store.cache import VectorCache

    with MultiVectorStore(tmp_path / "s") as store:
        identity = store.cache.identity
    saved = VectorCache(tmp_path / "s" / "cache", identity)
    assert all(doc_id in saved for doc_id in ids)


def test_long_ids_and_many_parts_survive_a_reopen(tmp_path: Path) -> None:
    """Ids past 64 characters and a part list past 4,096 characters of JSON come back whole from the cache's files
    (they were cut to fixed widths: three 78-character ids sharing 64 came back as one document)."""
    docs = _docs(3, seed=13)
    ids = ["s3://archive/reports/" + "x" * 57 + str(i) for i in range(3)]
    pages = _unit(np.random.default_rng(14).standard_normal((1500, DIM)))
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add([*ids, "pages"], [*docs, pages], [{} for _ in range(4)], parts=[None, None, None, [1] * 1500])
        expected = [(h.id, h.score) for h in store.search(docs[1][:4], top_k=4)]
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.count() == 4
        assert sorted(store.ids()) == sorted([*ids, "pages"])
        assert [(h.id, h.score) for h in store.search(docs[1][:4], top_k=4)] == expected
        assert store.get(["pages"])[0].parts == (1,) * 1500


@pytest.mark.parametrize("long_parts", [False, True])
def test_a_cache_written_before_whole_ids_is_not_trusted_with_cut_ids(tmp_path: Path, long_parts: bool) -> None:
    """A cache saved by 0.2 (ids cut at 64 characters, part lists at 4,096) is read again from Chroma, not misread."""
    docs = _docs(3, seed=15)
    ids = ["s3://archive/reports/" + "y" * 57 + str(i) for i in range(3)]
    pages = _unit(np.random.default_rng(16).standard_normal((1500 if long_parts else 3, DIM)))
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add([*ids, "pages"], [*docs, pages], [{} for _ in range(4)], parts=[None, None, None, [1] * len(pages)])
        expected = [(h.id, h.score) for h in store.search(docs[1][:4], top_k=4)]
    cache = tmp_path / "s" / "cache"
    snap = cache / "first_stage" / json.loads((cache / "first_stage" / "current.json").read_text())["snapshot"]
    meta = json.loads((snap / "meta.json").read_text())
    del meta["whole_ids"]
    (snap / "meta.json").write_text(json.dumps(meta))
    np.save(snap / "ids.npy", np.load(snap / "ids.npy").astype("U64"))  # what 0.2 wrote
    np.save(snap / "x-parts.npy", np.load(snap / "x-parts.npy").astype("U4096"))
    state = json.loads((cache / "state.json").read_text())
    del state["whole_ids"]
    (cache / "state.json").write_text(json.dumps(state))
    with np.load(cache / "vectors.npz") as z:
        old = {k: z[k] for k in z.files}
    np.savez(cache / "vectors.npz", **{**old, "ids": old["ids"].astype("U64")})
    with MultiVectorStore(tmp_path / "s") as store:
        assert sorted(store.ids()) == sorted([*ids, "pages"])
        assert [(h.id, h.score) for h in store.search(docs[1][:4], top_k=4)] == expected
        assert store.get(["pages"])[0].parts == (1,) * len(pages)
        assert not any(len(k) == 64 for k in store.cache._where)
