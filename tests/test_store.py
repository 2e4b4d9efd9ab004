"""MultiVectorStore: persistence, upsert/delete, filters, two-stage search, settings, locking, Chroma server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.errors import ModelMismatchError, StoreError, StoreLockedError
from docpc_retrievers.scoring.maxsim import maxsim
from docpc_retrievers.store.codec import dequantize, quantize
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search import SearchConfig

DIM = 32


@pytest.fixture(autouse=True)
def _fresh_chroma_systems() -> Iterator[None]:
    yield
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _topical_docs(n_docs: int, seed: int = 0, n_topics: int = 20) -> tuple[list[np.ndarray], np.random.Generator]:
    rng = np.random.default_rng(seed)
    centroids = _unit(rng.standard_normal((n_topics, DIM)))
    docs = []
    for _ in range(n_docs):
        topics = rng.choice(n_topics, size=3, replace=False)
        n = int(rng.integers(20, 60))
        picks = rng.choice(topics, size=n)
        docs.append(_unit(centroids[picks] + 0.6 * _unit(rng.standard_normal((n, DIM)))))
    return docs, rng


def _meta(i: int) -> dict:
    return {"source": f"/docs/{i}.pdf", "title": f"doc {i}", "total_pages": i % 7 + 1, "selected_pages": [1, 2], "group": "even" if i % 2 == 0 else "odd"}


def _fill(path: Path, n: int = 30, **kwargs) -> tuple[list[str], list[np.ndarray]]:
    docs, _ = _topical_docs(n)
    ids = [f"d{i:03d}" for i in range(n)]
    with MultiVectorStore(path, writable=True, **kwargs) as store:
        store.add(ids[: n // 2], docs[: n // 2], [_meta(i) for i in range(n // 2)])
        store.add(ids[n // 2 :], docs[n // 2 :], [_meta(i) for i in range(n // 2, n)])
    return ids, docs


def _query(doc: np.ndarray, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = doc[rng.choice(len(doc), size=min(8, len(doc)), replace=False)]
    return _unit(rows + 0.3 * _unit(rng.standard_normal(rows.shape)))


def test_add_get_roundtrip_keeps_vectors_and_metadata(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=10)
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.count() == 10
        assert store.dim == DIM
        assert set(store.ids()) == set(ids)
        got = store.get(["d003", "missing"], include_vectors=True)
        assert [g.id for g in got] == ["d003"]
        assert got[0].metadata == {k: v for k, v in _meta(3).items()}
        assert got[0].n_vectors == len(docs[3])
        np.testing.assert_allclose(got[0].vectors, docs[3], atol=4e-3)  # int8 with a per-vector scale
        assert store.total_vectors() == sum(len(d) for d in docs)


def test_exact_search_equals_brute_force_and_survives_reopen(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=30)
    q = _query(docs[7])
    stored = [dequantize(*quantize(d)) for d in docs]  # what the store keeps: int8 with a per-vector scale
    expected = maxsim([q], stored)[0]
    order = sorted(range(len(ids)), key=lambda i: (-expected[i], ids[i]))[:5]
    with MultiVectorStore(tmp_path / "s") as store:
        hits = store.search(q, top_k=5)
    assert [h.id for h in hits] == [ids[i] for i in order]
    np.testing.assert_allclose([h.score for h in hits], expected[order], rtol=1e-5)
    assert hits[0].id == "d007"
    with MultiVectorStore(tmp_path / "s") as again:
        assert [(h.id, h.score) for h in again.search(q, top_k=5)] == [(h.id, h.score) for h in hits]


def test_two_stage_search_finds_the_exhaustive_top_results(tmp_path: Path) -> None:
    docs, _ = _topical_docs(300, seed=5)
    ids = [f"d{i:03d}" for i in range(300)]
    config = SearchConfig(n_centroids=8, candidates=40, max_candidates=40, scan_below=1)
    with MultiVectorStore(tmp_path / "s", writable=True, search=config) as store:
        store.add(ids, docs, [_meta(i) for i in range(300)])
        overlaps = []
        for target in range(0, 300, 30):
            q = _query(docs[target], seed=target)
            fast = store.search(q, top_k=10)
            exact = store.search(q, top_k=10, exhaustive=True)
            assert fast[0].id == exact[0].id == ids[target]
            overlaps.append(len({h.id for h in fast} & {h.id for h in exact}) / 10)
            # Scores of returned documents are exact MaxSim, not first-stage approximations.
            by_id = {h.id: h.score for h in exact}
            for h in fast:
                if h.id in by_id:
                    assert h.score == pytest.approx(by_id[h.id], rel=1e-6)
        assert np.mean(overlaps) >= 0.9


def test_a_search_takes_the_candidate_count_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """n_candidates sets what the first stage keeps (never fewer than top_k); the whole pool is scored exactly."""
    docs, rng = _topical_docs(300, seed=5)
    ids = [f"d{i:03d}" for i in range(300)]
    config = SearchConfig(n_centroids=8, candidates=20, candidate_budget=400, max_candidates=100, scan_below=1,
                          candidate_share=0.0)
    with MultiVectorStore(tmp_path / "s", writable=True, search=config) as store:
        store.add(ids, docs, [_meta(i) for i in range(300)])
        q = _unit(docs[30][:20] + 0.3 * _unit(rng.standard_normal((20, DIM))))  # 20 tokens: 400 // 20 = 20
        summaries = store.reader.view.backend.summaries
        asked: list[int] = []
        top = summaries.top
        monkeypatch.setattr(summaries, "top", lambda query, n, allowed=None: asked.append(n) or top(query, n, allowed))
        default = store.search(q, top_k=10)
        wide = store.search(q, top_k=10, n_candidates=120)
        store.search(q, top_k=10, n_candidates=3)
        assert asked == [config.candidates_for(20, 300), 120, 10]
        assert asked[0] == 20 and default[0].id == wide[0].id == ids[30]
        every = store.search(q, top_k=10, n_candidates=300)  # the whole pool: no first stage
        exact = store.search(q, top_k=10, exhaustive=True)
        assert len(asked) == 3
        short = _unit(docs[30][:2])  # 2 tokens: 400 // 2 = 200, at most 100
        store.search(short, top_k=10)
        halved = store.search(short, top_k=10, where={"group": "even"})  # 100 of 150 is over half: every one scored
        assert asked[3:] == [100]
        assert [h.id for h in halved] == [h.id for h in store.search(short, top_k=10, where={"group": "even"},
                                                                       exhaustive=True)]
        assert [h.id for h in every] == [h.id for h in exact]
        assert [h.score for h in every] == pytest.approx([h.score for h in exact], rel=1e-6)
        for bad in (0, -1, True, 2.5):
            with pytest.raises(ValueError, match="n_candidates"):
                store.search(q, n_candidates=bad)


def test_upsert_replaces_vectors_and_metadata(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=10)
    new_vec = _unit(np.random.default_rng(9).standard_normal((5, DIM)))
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(["d002"], [new_vec], [{"title": "replaced"}])
        assert store.count() == 10
        np.testing.assert_allclose(store.vectors("d002"), new_vec, atol=4e-3)
        assert store.get(["d002"])[0].metadata == {"title": "replaced"}
        hit = store.search(new_vec, top_k=1)[0]
        assert hit.id == "d002" and hit.score == pytest.approx(5.0, abs=1e-2)
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.get(["d002"])[0].metadata == {"title": "replaced"}


def test_delete_removes_from_results_and_count(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=10)
    q = _query(docs[4])
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        assert store.search(q, top_k=1)[0].id == "d004"
        assert store.delete(["d004", "nope"]) == 1
        assert store.delete(["d004"]) == 0
        assert store.count() == 9
        assert "d004" not in {h.id for h in store.search(q, top_k=10)}
        with pytest.raises(KeyError):
            store.vectors("d004")
    with MultiVectorStore(tmp_path / "s") as store:
        assert "d004" not in store and store.count() == 9


def test_update_metadata_keeps_vectors(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=6)
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.update_metadata(["d001"], [{"title": "new title"}])
        assert store.get(["d001"])[0].metadata == {"title": "new title"}
        np.testing.assert_allclose(store.vectors("d001"), docs[1], atol=4e-3)
        with pytest.raises(KeyError):
            store.update_metadata(["zzz"], [{"title": "x"}])


def test_ids_by_source_answers_a_whole_batch_of_paths_at_once(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=6)
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(["d001-v2"], [docs[0]], [_meta(1)])  # a second version of /docs/1.pdf
        assert store.ids_by_source([]) == {}
        assert store.ids_by_source(["/docs/2.pdf"]) == {"/docs/2.pdf": ["d002"]}
        found = store.ids_by_source(["/docs/1.pdf", "/docs/4.pdf", "/docs/none.pdf", "/docs/4.pdf"])
        assert {k: sorted(v) for k, v in found.items()} == {"/docs/1.pdf": ["d001", "d001-v2"], "/docs/4.pdf": ["d004"]}
        store.delete(["d004"])
        assert store.ids_by_source(["/docs/4.pdf"]) == {}


def test_filters_restrict_candidates(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=20)
    q = _query(docs[3])
    with MultiVectorStore(tmp_path / "s") as store:
        even = store.search(q, top_k=20, where={"group": "even"})
        assert len(even) == 10 and all(int(h.id[1:]) % 2 == 0 for h in even)
        assert {h.id for h in store.search(q, top_k=20, where={"total_pages": {"$gte": 6}})} == {
            ids[i] for i in range(20) if i % 7 + 1 >= 6
        }
        assert [h.id for h in store.search(q, top_k=3, ids=["d003", "d010"])][0] == "d003"
        assert store.search(q, top_k=5, where={"group": "none"}) == []
        assert sorted(store.ids(where={"group": "odd"})) == [i for i in ids if int(i[1:]) % 2 == 1]
        # An empty filter matches everything; a filter and ids together keep what both allow.
        assert [h.id for h in store.search(q, top_k=20, where={})] == [h.id for h in store.search(q, top_k=20)]
        both = store.search(q, top_k=20, where={"group": "even"}, ids=["d002", "d003", "d004", "nope"])
        assert sorted(h.id for h in both) == ["d002", "d004"]


def test_top_k_edges(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=6)
    q = _query(docs[0])
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.search(q, top_k=0) == []
        assert len(store.search(q, top_k=100)) == 6
        with pytest.raises(ValueError):
            store.search(q, top_k=-1)
        with pytest.raises(ValueError):
            store.search(np.zeros((3, DIM + 1), dtype=np.float32))


def test_empty_store_searches_to_nothing(tmp_path: Path) -> None:
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        assert store.count() == 0
        assert store.search(np.ones((2, DIM), dtype=np.float32), top_k=3) == []


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    v = _unit(rng.standard_normal((3, DIM)))
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        with pytest.raises(ValueError, match="reserved"):
            store.add(["a"], [v], [{"_seg": "x"}])
        with pytest.raises(ValueError, match="type"):
            store.add(["a"], [v], [{"blob": b"bytes"}])
        with pytest.raises(ValueError, match="duplicate"):
            store.add(["a", "a"], [v, v], [{}, {}])
        with pytest.raises(ValueError, match="NaN"):
            store.add(["a"], [np.full((2, DIM), np.nan, dtype=np.float32)], [{}])
        store.add(["a"], [v], [{"empty_list": []}])
        with pytest.raises(ValueError):
            store.add(["b"], [_unit(rng.standard_normal((3, DIM + 2)))], [{}])
        assert store.count() == 1


def test_settings_are_recorded_and_mismatches_refused(tmp_path: Path) -> None:
    settings = {"encoder": {"model_id": "m1", "dim": DIM}, "index": {"strategy": "first", "pages": 4}}
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.set_settings(settings)
        store.set_settings(settings)  # same again is fine
        with pytest.raises(ModelMismatchError, match="encoder.model_id: store has 'm1', got 'm2'"):
            store.set_settings({**settings, "encoder": {"model_id": "m2", "dim": DIM}})
    with MultiVectorStore(tmp_path / "s") as store:
        assert store.settings == settings
        store.check_settings({"model_id": "m1", "dim": DIM}, section="encoder")
        with pytest.raises(ModelMismatchError, match="encoder settings"):
            store.check_settings({"model_id": "other", "dim": DIM}, section="encoder")


def test_read_only_and_missing_stores(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no docpc store"):
        MultiVectorStore(tmp_path / "nothing-here")
    _fill(tmp_path / "s", n=4)
    with MultiVectorStore(tmp_path / "s") as store:
        with pytest.raises(StoreError, match="read-only"):
            store.delete(["d000"])
        with pytest.raises(StoreError, match="read-only"):
            store.add(["x"], [np.ones((1, DIM), dtype=np.float32)], [{}])


def test_second_writer_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    first = MultiVectorStore(tmp_path / "s", writable=True)
    try:
        with pytest.raises(StoreLockedError, match="being written by pid"):
            MultiVectorStore(tmp_path / "s", writable=True)
    finally:
        first.close()
    MultiVectorStore(tmp_path / "s", writable=True).close()


def test_reader_sees_later_writes_after_refresh(tmp_path: Path) -> None:
    ids, docs = _fill(tmp_path / "s", n=6)
    reader = MultiVectorStore(tmp_path / "s")
    try:
        assert reader.count() == 6
        extra = _unit(np.random.default_rng(4).standard_normal((4, DIM)))
        with MultiVectorStore(tmp_path / "s", writable=True) as writer:
            writer.add(["new"], [extra], [{"title": "new"}])
        assert reader.count() == 7  # the generation in store.json changed: reloaded
        assert reader.search(extra, top_k=1)[0].id == "new"
    finally:
        reader.close()


def test_searches_read_the_feed_only_when_its_size_changed(tmp_path: Path) -> None:
    """A search checks the feed's size (one count) and reads the feed itself only after another writer committed."""
    _ids, docs = _fill(tmp_path / "s", n=6)
    with MultiVectorStore(tmp_path / "s") as reader:
        reader.search(_query(docs[0]), top_k=2)
        engine = reader.engine
        reads: list[int] = []
        original = engine.changes
        engine.changes = lambda since, **kw: reads.append(since) or original(since, **kw)  # type: ignore[method-assign]
        for _ in range(5):
            assert reader.search(_query(docs[0]), top_k=2)[0].id == "d000"
        assert reads == [], "no commit happened: the keyed feed query must not run"
        extra = _unit(np.random.default_rng(4).standard_normal((4, DIM)))
        with MultiVectorStore(tmp_path / "s", writable=True) as writer:
            writer.add(["new"], [extra], [{"title": "new"}])
        assert reader.search(extra, top_k=1)[0].id == "new"
        assert len(reads) == 1
        # A commit landing after the size was read and the feed queried (the race the size must not hide):
        # that search misses it, the next one applies it.
        def changes_then_commit(since: int, **kw: object) -> object:
            found = original(since, **kw)
            engine.changes = original  # type: ignore[method-assign]
            with MultiVectorStore(tmp_path / "s", writable=True) as writer:
                writer.delete(["new"])
            return found
        view = reader.reader.view
        assert view is not None
        view._feed_size = -1
        engine.changes = changes_then_commit  # type: ignore[method-assign]
        reader.search(extra, top_k=1)
        assert "new" not in [h.id for h in reader.search(extra, top_k=7)]


def test_a_repeated_filter_is_answered_from_memory_until_another_writer_commits(tmp_path: Path) -> None:
    """The ids matching a where filter are remembered while the feed is unchanged, and re-read once it moves."""
    _ids, docs = _fill(tmp_path / "s", n=8)
    with MultiVectorStore(tmp_path / "s") as reader:
        even = {"group": "even"}
        assert sorted(reader.ids(even)) == ["d000", "d002", "d004", "d006"]
        asked: list[object] = []
        original = reader.engine.ids
        reader.engine.ids = lambda where: asked.append(where) or original(where)  # type: ignore[method-assign]
        for _ in range(3):
            assert {h.id for h in reader.search(_query(docs[2]), top_k=8, where=even)} <= {"d000", "d002", "d004", "d006"}
        assert asked == [], "an unchanged feed: the filter's ids come from memory"
        with MultiVectorStore(tmp_path / "s", writable=True) as writer:
            writer.update_metadata(["d002"], [{**_meta(2), "group": "odd"}])
            writer.delete(["d004"])
        assert sorted(reader.ids(even)) == ["d000", "d006"]
        assert len(asked) == 1
        assert "d002" in reader.ids({"group": "odd"})


def test_compact_vectors_cost_dim_plus_two_bytes_each(tmp_path: Path) -> None:
    """int8 rows plus one float16 scale per vector; the first-stage summary is counted apart."""
    ids, docs = _fill(tmp_path / "s", n=10)
    n_vectors = sum(len(d) for d in docs)
    with MultiVectorStore(tmp_path / "s") as store:
        parts = store.bytes_by_part()
        assert parts["vectors"] == n_vectors * (DIM + 2)
        assert 0 < parts["first_stage"] <= 10 * 16 * (DIM + 2)
        assert parts["grids"] == 0
        assert store.bytes_on_disk() > parts["vectors"]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    from docpc_retrievers.testing.chroma_server import chroma_server as started

    with started(tmp_path_factory.mktemp("chroma-server")) as server:
        yield server.host, server.port


def test_chroma_server_backend_round_trip(tmp_path: Path, chroma_server: tuple[str, int]) -> None:
    host, port = chroma_server
    docs, _ = _topical_docs(12, seed=2)
    ids = [f"s{i}" for i in range(12)]
    with MultiVectorStore(tmp_path / "local", host=host, port=port, collection="srv-test", writable=True) as store:
        store.add(ids, docs, [_meta(i) for i in range(12)])
        store.delete(["s5"])
        q = _query(docs[3])
        hits = store.search(q, top_k=3)
    assert hits[0].id == "s3"
    with MultiVectorStore(tmp_path / "local", host=host, port=port, collection="srv-test") as again:
        assert again.count() == 11
        assert [(h.id, h.score) for h in again.search(q, top_k=3)] == [(h.id, h.score) for h in hits]
        assert again.get(["s3"])[0].metadata["title"] == "doc 3"
    # The records really live on the server, not in the local directory.
    import chromadb

    col = chromadb.HttpClient(host=host, port=port).get_collection("srv-test")
    assert col.count() == 11
    assert not (tmp_path / "local" / "chroma").exists()


def test_multi_part_records_aggregate_max_mean_sum_like_a_hand_computed_reference(tmp_path: Path) -> None:
    # Two "pages" per document, hand-built so every page score is known exactly.
    e = np.eye(DIM, dtype=np.float32)
    query = np.stack([e[0], e[1]])  # two query tokens
    doc_a = np.stack([e[0], e[1], -e[0]])  # page 1: [e0, e1] -> 2.0 ; page 2: [-e0] -> -1 + 0 = -1.0
    doc_b = np.stack([e[0], e[0] * 0.5 + e[1] * 0.5, e[1]])  # page 1: [e0] -> 1.0 ; page 2: [mix, e1] -> 0.5 + 1.0
    doc_b[1] /= np.linalg.norm(doc_b[1])
    mix = float(doc_b[1] @ e[0])  # 0.7071
    pages_a = [2.0, -1.0 + 0.0]
    pages_b = [1.0 + 0.0, mix + 1.0]
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.add(["a", "b"], [doc_a, doc_b], [{}, {}], parts=[[2, 1], [1, 2]])
        assert store.get(["a"])[0].parts == (2, 1)
        for aggregate, fn in (("max", max), ("mean", lambda v: sum(v) / len(v)), ("sum", sum)):
            hits = {h.id: h for h in store.search(query, top_k=2, aggregate=aggregate)}
            assert hits["a"].score == pytest.approx(fn(pages_a), abs=1e-3), aggregate
            assert hits["b"].score == pytest.approx(fn(pages_b), abs=1e-3), aggregate
            assert hits["a"].part_scores == pytest.approx(pages_a, abs=1e-3)
        # MaxP prefers a (2.0 > 1.71), SumP prefers b (1.71 + 1 > 2 - 1).
        assert store.search(query, top_k=1, aggregate="max")[0].id == "a"
        assert store.search(query, top_k=1, aggregate="sum")[0].id == "b"
        with pytest.raises(ValueError, match="aggregate"):
            store.search(query, aggregate="median")
        with pytest.raises(ValueError, match="parts"):
            store.add(["c"], [doc_a], [{}], parts=[[1, 1]])


def test_rows_for_scoring_come_from_the_cache_or_chroma_and_skip_deleted_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader's row gather: cached and uncached documents alike give the stored int8 rows, in the order asked."""
    import shutil

    ids, docs = _fill(tmp_path / "s", n=12)
    shutil.rmtree(tmp_path / "s" / "cache")  # nothing local: every first read comes from Chroma
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        store.count()
        reader = store.reader.view.reader
        reader.rows(ids[:5])  # now cached; the rest still in Chroma alone
        assert all(i in reader.cache for i in ids[:5]) and not any(i in reader.cache for i in ids[5:])
        store.delete(["d007"])
        asked = [ids[9], ids[0], "d007", ids[4], ids[11]]
        kept, sizes, rows, scales = reader.rows(asked)
        assert kept == [ids[9], ids[0], ids[4], ids[11]]
        assert sizes == [len(docs[int(i[1:])]) for i in kept]
        assert rows.dtype == np.int8 and rows.shape == (sum(sizes), DIM) and scales.shape == (sum(sizes),)
        at = 0
        for doc_id, n in zip(kept, sizes):
            expected_rows, expected_scales = quantize(docs[int(doc_id[1:])])
            np.testing.assert_array_equal(rows[at : at + n], expected_rows)
            np.testing.assert_array_equal(scales[at : at + n], expected_scales)
            at += n
        # A cache entry shorter than its record's rows is a miss: read from Chroma again, not an error.
        name, offset, length = reader.cache._where[ids[0]]
        reader.cache._where[ids[0]] = (name, offset, length - DIM)
        kept, sizes, rows, _ = reader.rows([ids[0]])
        assert kept == [ids[0]]
        np.testing.assert_array_equal(rows, quantize(docs[0])[0])
        assert reader.cache._where[ids[0]][2] == length  # cached again, whole
        # A short entry whose record another writer deleted meanwhile (Chroma returns nothing) is left out.
        name, offset, length = reader.cache._where[ids[1]]
        reader.cache._where[ids[1]] = (name, offset, length - DIM)
        monkeypatch.setattr(reader, "packed", lambda wanted: {})
        kept, sizes, rows, _ = reader.rows([ids[2], ids[1], ids[3]])
        assert kept == [ids[2], ids[3]]
        np.testing.assert_array_equal(rows, np.concatenate([quantize(docs[2])[0], quantize(docs[3])[0]]))


def test_row_gathers_reuse_a_bounded_scratch_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread's gathers share one buffer (fresh pages cost more than the copy), but never one above SCRATCH_ROWS."""
    from docpc_retrievers.store import payload

    ids, docs = _fill(tmp_path / "s", n=6)
    with MultiVectorStore(tmp_path / "s") as store:
        store.count()
        reader = store.reader.view.reader
        first = reader.rows(ids[:3])[2]
        second = reader.rows(ids[3:5])[2]
        assert np.shares_memory(first, second)  # the same scratch rows
        np.testing.assert_array_equal(second[: len(docs[3])], quantize(docs[3])[0])
        monkeypatch.setattr(payload, "SCRATCH_ROWS", len(docs[0]))
        big = reader.rows(ids)[2]
        assert not np.shares_memory(big, second)  # larger than the cap: its own arrays
        np.testing.assert_array_equal(big[: len(docs[0])], quantize(docs[0])[0])
        third = reader.rows(ids[:1])[2]
        assert np.shares_memory(third, second) and not np.shares_memory(third, big)  # and they were not kept


def test_a_cache_from_before_the_search_rewrite_loses_its_token_stage_and_searches_as_before(tmp_path: Path) -> None:
    """Caches written by 0.2 may hold a faiss token stage (2.6 GB at 100k documents): it is deleted on open, and the
    store answers as it did."""
    ids, docs = _fill(tmp_path / "s", n=30)
    q = docs[4][:5]
    with MultiVectorStore(tmp_path / "s") as store:
        before = [(h.id, h.score) for h in store.search(q, top_k=5)]
    old = tmp_path / "s" / "cache" / "token_stage" / "snap-1"
    old.mkdir(parents=True)
    (old / "ivf.index").write_bytes(b"\0" * 4096)
    with MultiVectorStore(tmp_path / "s") as store:
        assert not (tmp_path / "s" / "cache" / "token_stage").exists()
        assert [(h.id, h.score) for h in store.search(q, top_k=5)] == before
