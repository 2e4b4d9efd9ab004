"""The token-level first stage: short queries take its candidates, it persists, follows other writers and deletes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search import tokens as token_module
from docpc_retrievers.store.search.tokens import TokenIndex
from docpc_retrievers.store.search.two_stage import (
    MIXED_MAX_TOKENS,
    SHORT_MAX_PROBES,
    SHORT_PER_TOKEN,
    SHORT_PROBE_BUDGET,
    SHORT_QUERY_FACTOR,
    SHORT_SUMMARY_FACTOR,
)

pytestmark = pytest.mark.usefixtures("fresh_chroma")

DIM = 32


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _docs(n: int, seed: int = 0) -> list[np.ndarray]:
    """Documents sharing one popular topic: every summary looks alike, single vectors tell them apart."""
    rng = np.random.default_rng(seed)
    topic = _unit(rng.standard_normal(DIM))
    return [_unit(topic + 0.8 * _unit(rng.standard_normal((40, DIM)))) for _ in range(n)]


@pytest.fixture
def small_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Train the inverted lists on a few thousand vectors, as a large store would on millions."""
    monkeypatch.setattr(token_module, "N_LISTS", 16)
    monkeypatch.setattr(token_module, "TRAIN_MIN", 2000)
    monkeypatch.setattr(token_module, "N_PROBE", 16)  # every list: the index answers exactly


def _ids(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{i:030x}".rjust(32, "0") for i in range(n)]


def test_short_queries_take_the_token_stages_candidates_and_find_the_single_best_vector(
    tmp_path: Path, small_lists: None
) -> None:
    docs, ids = _docs(120), _ids(120)
    planted = 77
    query = _unit(docs[planted][[3, 9]] + 0.01)  # two tokens, each close to one vector of one document
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids, docs, [{} for _ in ids])
        view = store._view
        assert view is not None and view.tokens is not None and view.tokens.trained
        short = view.search.candidates(query, 4, None)
        assert ids[planted] in short  # the token stage found it
        probes = min(SHORT_MAX_PROBES, SHORT_PROBE_BUDGET // 2)  # two tokens: more lists each
        tokens = view.tokens.top(query, SHORT_QUERY_FACTOR * 4, probes=probes, per_token=SHORT_PER_TOKEN)
        summaries = view.index.top(query, SHORT_SUMMARY_FACTOR * 4)
        assert short == list(dict.fromkeys(tokens + summaries))  # SHORT_QUERY_FACTOR x n_candidates, then the summaries'
        assert set(summaries) - set(tokens) and len(short) > len(tokens)  # the summaries added some of their own
        long_query = np.concatenate([query] * (MIXED_MAX_TOKENS // 2 + 1))  # past the mixed queries
        assert view.search.candidates(long_query, 4, None) == view.index.top(long_query, 4)
        hits = store.search(query, top_k=3)
        exact = {h.id: h.score for h in store.search(query, top_k=len(ids), exhaustive=True)}
        assert hits[0].id == ids[planted] == max(exact, key=exact.__getitem__)
        assert all(h.score == pytest.approx(exact[h.id], abs=1e-6) for h in hits)  # returned scores are exact


def test_the_token_stage_is_saved_mapped_and_follows_deletes_and_other_writers(tmp_path: Path, small_lists: None) -> None:
    docs, ids = _docs(100, seed=1), _ids(100)
    query = _unit(docs[10][[1, 2, 5]] + 0.01)
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids[:90], docs[:90], [{} for _ in range(90)])
        before = [h.id for h in store.search(query, top_k=5)]
    assert (tmp_path / "s" / "cache" / "token_stage" / "current.json").is_file()
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        assert [h.id for h in reader.search(query, top_k=5)] == before
        tokens = reader._view.tokens  # type: ignore[union-attr]
        assert tokens is not None and tokens._base is not None  # the saved index, mapped
        with MultiVectorStore(tmp_path / "s", writable=True) as writer:  # another process in real life
            writer.delete([ids[10]])
            writer.add(ids[90:], docs[90:], [{} for _ in range(10)])
        hits = [h.id for h in reader.search(query, top_k=5)]
        assert ids[10] not in hits
        assert ids[10] not in tokens.top(query, 200)  # hidden in the mapped index too
        assert len(tokens) == 99 and set(tokens.ids()) == set(ids) - {ids[10]}
        exact = [h.id for h in reader.search(query, top_k=5, exhaustive=True)]
        assert hits[0] == exact[0] and len(hits) == 5


def test_a_store_without_a_saved_token_stage_builds_it_on_the_first_short_query(tmp_path: Path, small_lists: None) -> None:
    import shutil

    docs, ids = _docs(80, seed=2), _ids(80)
    query = _unit(docs[5][[0, 7]] + 0.01)
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids, docs, [{} for _ in ids])
        expected = [h.id for h in store.search(query, top_k=3)]
    shutil.rmtree(tmp_path / "s" / "cache")  # a reader on another machine: nothing local
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        assert reader._view is None or reader._view.tokens is None
        assert reader.search(query, top_k=3)[0].id == expected[0] == ids[5]  # built from the stored (int8) vectors
        assert reader._view is not None and reader._view.tokens is not None and len(reader._view.tokens) == 80


def test_warm_fills_a_fresh_readers_cache_so_its_first_short_query_builds_nothing(
    tmp_path: Path, small_lists: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`warm` on a machine with no cache: every document's vectors and the token stage, saved for the next reader."""
    import shutil

    from docpc_retrievers.store.view import StoreView

    docs, ids = _docs(80, seed=3), _ids(80)
    query = _unit(docs[9][[0, 5]] + 0.01)
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids, docs, [{} for _ in ids])
        expected = [(h.id, h.score) for h in store.search(query, top_k=3)]
    shutil.rmtree(tmp_path / "s" / "cache")
    progress: list[tuple[int, int]] = []
    with MultiVectorStore(tmp_path / "s") as reader:
        done = reader.warm(lambda n, total: progress.append((n, total)))
        assert all(doc_id in reader.cache for doc_id in ids)
    assert done["documents"] == done["fetched"] == 80 and done["token_stage_built"] and done["token_stage"]
    assert progress[-1] == (80, 80) and [n for n, _ in progress] == sorted(n for n, _ in progress)

    def no_build(self: StoreView) -> None:
        raise AssertionError("the token stage was built again")

    fetched: list[int] = []
    monkeypatch.setattr(StoreView, "_build_tokens", no_build)
    with MultiVectorStore(tmp_path / "s") as reader:
        original = reader.engine.payload
        monkeypatch.setattr(reader.engine, "payload", lambda ids, kind: fetched.append(len(ids)) or original(ids, kind))
        assert [(h.id, h.score) for h in reader.search(query, top_k=3)] == expected
        again = reader.warm()
    assert fetched == [] and again["fetched"] == 0 and not again["token_stage_built"]


def test_warm_on_an_empty_store_does_nothing(tmp_path: Path) -> None:
    with MultiVectorStore(tmp_path / "s", writable=True) as store:
        assert store.warm() == {"documents": 0, "fetched": 0, "token_stage_built": False, "token_stage": False,
                                "seconds": 0.0}


def test_an_untrained_token_index_scores_every_vector_and_filters() -> None:
    docs, ids = _docs(30, seed=3), _ids(30)
    index = TokenIndex(DIM)
    index.add(ids, docs)
    assert not index.trained
    query = _unit(docs[4][[2]] + 0.001)
    assert index.top(query, 1) == [ids[4]]
    assert index.top(query, 3, allowed={ids[1], ids[2]}) and set(index.top(query, 3, allowed={ids[1], ids[2]})) <= {ids[1], ids[2]}
    index.remove([ids[4]])
    assert ids[4] not in index.top(query, 30)
    assert index.top(query, 0) == [] and index.top(query, 5, allowed=set()) == []


def test_the_approximate_pass_keeps_the_exact_top_and_returns_float32_scores(tmp_path: Path) -> None:
    """200 candidates > the 64 the exact pass scores: the approximate (int8 or bfloat16) shortlist must still hold the exact top 10."""
    from docpc_retrievers.store.codec import dequantize, quantize

    rng = np.random.default_rng(4)
    docs = [_unit(rng.standard_normal((30, DIM))) for _ in range(200)]
    ids = _ids(200)
    stored = [dequantize(*quantize(d)) for d in docs]
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=256) as store:
        store.add(ids, docs, [{} for _ in ids])
        for seed in range(5):
            query = _unit(np.random.default_rng(100 + seed).standard_normal((12, DIM)))
            exact = np.array([(query @ d.T).max(axis=1).sum() for d in stored], dtype=np.float64)
            order = np.argsort(-exact)[:10]
            hits = store.search(query, top_k=10)
            assert [h.id for h in hits] == [ids[i] for i in order]
            np.testing.assert_allclose([h.score for h in hits], exact[order], rtol=1e-5)


def test_saving_twice_keeps_every_document_findable_by_its_own_vector_after_removals_and_replacements(
    tmp_path: Path, small_lists: None
) -> None:
    """Slots are renumbered on save (removed documents dropped): every label must still point at its document."""
    docs, ids = _docs(120, seed=3), _ids(120)
    index = TokenIndex(DIM)
    index.add(ids[:100], docs[:100])
    assert index.trained
    index.remove(ids[:10])
    index.add([ids[20]], [docs[110]])  # replaced: its old vectors must not vote for it any more
    index.save(tmp_path / "t")
    assert index._base is not None and index._base.ntotal == 90 * 40  # removed and replaced entries dropped
    index.add(ids[100:110], docs[100:110])  # into the in-memory part beside the mapped one
    index.remove([ids[30], ids[105]])
    index.save(tmp_path / "t")
    reopened = TokenIndex(DIM)
    assert reopened.load(tmp_path / "t") is not None
    live = [i for i in range(110) if i >= 10 and i not in (30, 105)]
    assert set(reopened.ids()) == {ids[i] for i in live} and len(reopened) == len(live)
    for i in live:
        vectors = docs[110] if i == 20 else docs[i]
        assert reopened.top(vectors[:3], 1) == [ids[i]], i
    for gone in (0, 9, 30, 105):
        assert ids[gone] not in reopened.top(docs[gone][:3], 50)
    assert ids[20] not in reopened.top(docs[20][:3], 1)  # its replaced vectors are gone


def _trained(n_docs: int = 100, seed: int = 5) -> tuple[TokenIndex, list[str], list[np.ndarray]]:
    docs, ids = _docs(n_docs, seed=seed), _ids(n_docs)
    index = TokenIndex(DIM)
    index.add(ids, docs)
    assert index.trained
    return index, ids, docs


def test_the_packed_block_layout_is_faiss_own(small_lists: None) -> None:
    """Unpacked codes are the product quantizer's own codes for the list's vectors, and repacking gives faiss's bytes."""
    import faiss

    from docpc_retrievers.store.search.packed_lists import layout_of

    index, _, docs = _trained()
    delta = index._delta
    layout = layout_of(delta)
    vectors = np.ascontiguousarray(np.concatenate(docs))
    _, assigned = delta.quantizer.search(vectors, 1)
    checked = 0
    for lst in range(delta.nlist):
        n = delta.invlists.list_size(lst)
        if not n:
            continue
        blocks = -(-n // 32)
        raw = np.array(faiss.rev_swig_ptr(delta.invlists.get_codes(lst), blocks * layout.block_size), dtype=np.uint8)
        codes = layout.unpack(raw.reshape(blocks, layout.block_size))
        assert np.array_equal(layout.pack(codes).reshape(-1), raw)
        flat = np.zeros((n, delta.pq.code_size), dtype=np.uint8)
        for j in range(layout.m):  # faiss's flat codes: sub-quantizer j in byte j // 2, low nibble first
            flat[:, j // 2] |= (codes[:n, j] << (4 * (j % 2))).astype(np.uint8)
        rows = np.flatnonzero(assigned[:, 0] == lst)  # a list keeps its vectors in the order they were added
        assert delta.by_residual  # the codes are of each vector's offset from its list's centroid
        offsets = vectors[rows] - delta.quantizer.reconstruct(lst)[None, :]
        assert np.array_equal(flat, delta.pq.compute_codes(np.ascontiguousarray(offsets)))
        checked += 1
    assert checked >= 4


def test_pad_codes_score_below_every_entry_of_their_list(small_lists: None) -> None:
    """A pad entry takes, per dimension, the value most opposed to its list's centroid: no real code scores lower."""
    import faiss

    from docpc_retrievers.store.search.packed_lists import (
        layout_of,
        list_entries,
        pad_codes,
    )

    index, _, _ = _trained()
    delta = index._delta
    pads = pad_codes(delta)
    values = faiss.vector_to_array(delta.pq.centroids).reshape(delta.pq.M, delta.pq.ksub)
    centroids = np.array(faiss.rev_swig_ptr(faiss.downcast_index(delta.quantizer).get_xb(), delta.nlist * DIM),
                         dtype=np.float32).reshape(delta.nlist, DIM)
    layout = layout_of(delta)
    for lst in range(delta.nlist):
        _, codes = list_entries(delta, lst, layout)
        if not len(codes):
            continue
        decoded = values[np.arange(DIM)[None, :], codes]  # [n, dim]
        pad = values[np.arange(DIM), pads[lst]]
        assert centroids[lst] @ pad <= (decoded @ centroids[lst]).min() + 1e-6


def test_an_odd_number_of_tokens_searched_in_two_halves_finds_what_one_search_finds(
    tmp_path: Path, small_lists: None
) -> None:
    """Each token's lists dealt into two half-searches (so both threads scan) give the entries and scores of one
    search over the same lists, in memory and mapped, filtered or not; an odd list count scans one list more.

    To faiss's rounding: its fast scan rounds each search's lookup tables (list offsets included) to 8 bits over the
    lists that search probes, so the halves' scores differ from the whole's by about 1e-4, and which entries tie at
    the k-th may differ.
    """
    from collections import Counter

    import faiss

    index, ids, docs = _trained(seed=8)
    query = np.ascontiguousarray(_unit(docs[3][[1, 5, 8]] + 0.02))
    k = 300

    def same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> None:
        """Each token's k scores alike, and every entry clearly above one search's k-th is in the other's k."""
        for (vals, labels), (other_vals, other_labels) in ((a, b), (b, a)):
            np.testing.assert_allclose(-np.sort(-vals, axis=1), -np.sort(-other_vals, axis=1), atol=2e-3)
            for t in range(len(vals)):
                clear = Counter(int(lb) for v, lb in zip(vals[t], labels[t]) if lb >= 0 and v > vals[t].min() + 5e-3)
                assert not clear - Counter(int(lb) for lb in other_labels[t])

    def whole(index_: object, probes: int, slots: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        params = faiss.SearchParametersIVF(nprobe=probes)
        if slots is not None:
            params.sel = faiss.IDSelectorBatch(slots)
        return index_.search(query, k, params=params)  # type: ignore[attr-defined]

    in_memory = index._delta
    index.save(tmp_path / "t")
    for faiss_index in (in_memory, index._base):
        for slots in (None, np.arange(0, 100, 3, dtype=np.int64)):
            split = token_module._split_search(faiss_index, query, slots, 8, k)
            same(split, whole(faiss_index, 8, slots))
            if slots is not None:
                assert set(split[1][split[1] >= 0].tolist()) <= set(slots.tolist())
            # 7 lists: split rounds up to 8, so each token's t-th best is at least one search's over 7
            more, fewer = token_module._split_search(faiss_index, query, slots, 7, k)[0], whole(faiss_index, 7, slots)[0]
            assert np.all(-np.sort(-more, axis=1) >= -np.sort(-fewer, axis=1) - 2e-3)
    assert index.top(query, 1, probes=8) == [ids[3]]
    # More lists asked for than there are (16): every list, and the same entries as one search over all of them
    for faiss_index in (in_memory, index._base):
        same(index._search(faiss_index, query, None, 41, k), whole(faiss_index, 16, None))


def test_the_saved_index_is_mapped_and_answers_as_the_in_memory_one(tmp_path: Path, small_lists: None) -> None:
    """Saved lists are faiss's on-disk (mapped) lists, padded to whole blocks, and searching them finds what memory found."""
    import faiss

    index, ids, docs = _trained(seed=6)
    query = np.ascontiguousarray(_unit(docs[7][[0, 4, 9]] + 0.01))
    before_vals, before_labels = index._search(index._delta, query, None, token_module.N_PROBE)
    index.save(tmp_path / "t")
    assert isinstance(faiss.downcast_InvertedLists(index._base.invlists), faiss.OnDiskInvertedLists)
    vals, labels = index._search(index._base, query, None, token_module.N_PROBE)
    for t in range(len(query)):  # the same live entries at the same scores (pads carry label -1)
        got = {(int(label), round(float(v), 4)) for v, label in zip(vals[t], labels[t]) if label >= 0}
        want = {(int(label), round(float(v), 4)) for v, label in zip(before_vals[t], before_labels[t]) if label >= 0}
        assert got == want
    assert index.top(query, 1) == [ids[7]]


@pytest.mark.parametrize("old_version", [1, 2])
def test_an_older_token_stage_snapshot_is_rebuilt_not_read(tmp_path: Path, small_lists: None, old_version: int) -> None:
    """A version-1 (4-bit scalar codes) or version-2 (codes of the vectors, not their residuals) snapshot is not
    mapped as if it were this format; the store rebuilds it."""
    import json

    docs, ids = _docs(80, seed=7), _ids(80)
    query = _unit(docs[3][[1, 6]] + 0.01)
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids, docs, [{} for _ in ids])
    folder = tmp_path / "s" / "cache" / "token_stage"
    snap = folder / json.loads((folder / "current.json").read_text())["snapshot"]
    meta = json.loads((snap / "meta.json").read_text())
    (snap / "meta.json").write_text(json.dumps({**meta, "version": old_version}))
    assert TokenIndex(DIM).load(folder) is None
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        assert reader.count() == 80  # opens the view: the old snapshot is not taken
        assert reader._view is not None and reader._view.tokens is None
        assert reader.search(query, top_k=1)[0].id == ids[3]
        assert reader._view.tokens is not None and len(reader._view.tokens) == 80
    assert json.loads((folder / json.loads((folder / "current.json").read_text())["snapshot"] / "meta.json").read_text())[
        "version"] == token_module._VERSION == 3


def test_a_moved_cache_still_maps_its_lists_and_prints_nothing(
    tmp_path: Path, small_lists: None, capfd: pytest.CaptureFixture[str]
) -> None:
    import shutil

    docs, ids = _docs(80, seed=8), _ids(80)
    query = _unit(docs[11][[2, 5]] + 0.01)
    index = TokenIndex(DIM)
    index.add(ids, docs)
    index.save(tmp_path / "a")
    expected = index.top(query, 5)
    del index
    shutil.move(tmp_path / "a", tmp_path / "b")  # the lists file's recorded path is gone
    capfd.readouterr()
    moved = TokenIndex(DIM)
    assert moved.load(tmp_path / "b") is not None
    assert moved.top(query, 5) == expected
    moved.add([ids[0]], [docs[0]])
    moved.save(tmp_path / "b")  # resizing the new lists file prints nothing either
    assert capfd.readouterr().out == ""


def test_a_token_stage_trained_on_a_stores_first_documents_is_retrained_as_the_store_grows(
    tmp_path: Path, small_lists: None
) -> None:
    """Lists trained on the first batch are rebuilt, on a sample of the whole store, once it holds 8x that batch."""
    docs, ids = _docs(500, seed=9), _ids(500)
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids[:60], docs[:60], [{} for _ in range(60)])
        view = store._view
        assert view is not None and view.tokens is not None and view.tokens.trained
        assert view.tokens.trained_on == 60 and not view.tokens.outgrown
        store.add(ids[60:], docs[60:], [{} for _ in range(440)])
        assert view.tokens.outgrown  # 500 >= 8 x 60
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:  # the writer's save rebuilt it
        assert reader.count() == 500
        tokens = reader._view.tokens  # type: ignore[union-attr]
        assert tokens is not None and tokens.trained_on == 500 and not tokens.outgrown and len(tokens) == 500
        query = _unit(docs[450][[1, 3]] + 0.01)
        assert reader.search(query, top_k=1)[0].id == ids[450]


def test_a_periodic_save_during_a_commit_keeps_that_commits_documents_in_both_snapshots(
    tmp_path: Path, small_lists: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save a long indexing run makes every ``_SAVE_EVERY`` documents ran before the commit's documents were
    counted: their counts were saved as 0, and a token stage rebuilt then (outgrown) lacked them for good, so every
    reader rebuilt it from every stored vector on its first short query (minutes at 100k documents)."""
    from docpc_retrievers.store import view as view_module

    monkeypatch.setattr(view_module, "_SAVE_EVERY", 100)
    docs, ids = _docs(560, seed=4), _ids(560)
    with MultiVectorStore(tmp_path / "s", writable=True, n_candidates=4) as store:
        store.add(ids[:60], docs[:60], [{} for _ in range(60)])  # the token stage trains on these 60
        for start in range(60, 560, 100):  # a save after each; the last (560 >= 8 x 60) rebuilds the token stage
            store.add(ids[start : start + 100], docs[start : start + 100], [{} for _ in range(100)])
        view = store._view
        assert view is not None and view.tokens is not None and view.tokens.trained_on == 560
        assert len(view.tokens) == 560 and set(view.tokens.ids()) == set(ids)
    with MultiVectorStore(tmp_path / "s", n_candidates=4) as reader:
        assert reader.count() == 560
        v = reader._view
        assert v is not None and v.tokens is not None  # the writer's token stage, opened rather than rebuilt
        assert len(v.tokens) == 560 and v.tokens._base is not None
        assert all(v.n[i] == 40 for i in ids)  # every count saved, none as 0
        query = _unit(docs[530][[1, 3]] + 0.01)
        assert reader.search(query, top_k=1)[0].id == ids[530]


def test_a_short_query_reads_at_most_its_budget_of_distinct_codes(small_lists: None) -> None:
    """probes_within: the most lists per token whose union holds at most the budget of vectors (at least one list),
    counting vectors added since training; top with the budget answers as top with that many lists."""
    docs = _docs(120, seed=5)
    index = TokenIndex(DIM)
    index.add(_ids(120), docs)
    assert index.trained
    rng = np.random.default_rng(6)
    query = _unit(docs[3][[0, 7, 11]] + 0.3 * rng.standard_normal((3, DIM)))
    _, lists = index._delta.quantizer.search(query, 16)
    sizes = np.array([index._delta.invlists.list_size(lst) for lst in range(16)])
    assert sizes.sum() == 120 * 40

    def union(p: int) -> int:
        return int(sizes[np.unique(lists[:, :p])].sum())

    assert index.probes_within(query, 16, 10**9) == 16
    assert index.probes_within(query, 16, 0) == 1  # never fewer than one list
    for budget in (union(2), union(2) + 1, union(4) - 1, union(9)):
        p = index.probes_within(query, 16, budget)
        assert union(p) <= budget and (p == 16 or union(p + 1) > budget)
        assert index.top(query, 30, distinct_codes=budget, probes=16) == index.top(query, 30, probes=p)
    more = _docs(40, seed=7)
    index.add(_ids(40, "b"), more)  # the added vectors count too
    assert index._list_sizes().sum() == 160 * 40
