"""The first stage: centroid summaries, the coarse pass of large indexes, filters and removals."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.store.search import centroids as candidates
from docpc_retrievers.store.search import summary_storage
from docpc_retrievers.store.search.centroids import (
    CentroidIndex,
    coarsen,
    document_centroids,
    merged_query,
)
from docpc_retrievers.store.search.two_stage import (
    CANDIDATE_TOKEN_BUDGET,
    MAX_CANDIDATE_FACTOR,
    TwoStageSearch,
)

DIM = 32


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _index(n_docs: int, seed: int = 0) -> tuple[CentroidIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    summaries = _unit(rng.standard_normal((n_docs, 16, DIM)))
    index = CentroidIndex(16, DIM)
    index.add_block([f"d{i}" for i in range(n_docs)], summaries)
    return index, summaries


def _with_planted(n_docs: int, seed: int) -> tuple[CentroidIndex, np.ndarray, np.ndarray, np.random.Generator]:
    """An index of ``n_docs`` random documents plus one named "planted"; its summaries, the planted document's
    centroids ``[16, DIM]`` and the generator that drew them (queries near the planted document draw on)."""
    index, summaries = _index(n_docs)
    rng = np.random.default_rng(seed)
    planted = _unit(rng.standard_normal((16, DIM)))
    index.add_block(["planted"], planted[None])
    return index, summaries, planted, rng


def _brute_top(query: np.ndarray, summaries: np.ndarray, n: int) -> list[str]:
    approx = np.einsum("td,ncd->ntc", query, summaries).max(axis=2).sum(axis=1)
    return [f"d{i}" for i in np.argsort(-approx)[:n]]


def test_coarsen_merges_centroids_into_unit_vectors_deterministically() -> None:
    summaries = _unit(np.random.default_rng(1).standard_normal((5, 16, DIM)))
    merged = coarsen(summaries, 4)
    assert merged.shape == (5, 4, DIM)
    np.testing.assert_allclose(np.linalg.norm(merged, axis=2), 1.0, atol=1e-5)
    np.testing.assert_array_equal(merged, coarsen(summaries, 4))
    # Wider than the input: nothing to merge.
    np.testing.assert_array_equal(coarsen(summaries[:, :3], 4), summaries[:, :3])


def test_small_index_scores_every_summary_exactly() -> None:
    index, summaries = _index(300)
    query = _unit(np.random.default_rng(2).standard_normal((6, DIM)))
    assert set(index.top(query, 20)) == set(_brute_top(query, summaries, 20))


def test_an_index_under_the_full_scan_size_ranks_every_document_on_all_its_centroids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below FULL_SCAN_MAX no coarse pass runs, however small the shortlist would be: the exact 16-centroid top n."""
    monkeypatch.setattr(candidates, "SHORTLIST_MIN", 16)
    monkeypatch.setattr(candidates, "merged_query", lambda *_: pytest.fail("the coarse pass ran"))
    index, summaries = _index(2000)
    query = _unit(np.random.default_rng(8).standard_normal((24, DIM)))
    assert set(index.top(query, 10)) == set(_brute_top(query, summaries, 10))


def test_coarse_pass_keeps_a_planted_document_and_respects_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(candidates, "SHORTLIST_MIN", 16)
    monkeypatch.setattr(candidates, "FULL_SCAN_MAX", 0)
    index, _, planted, rng = _with_planted(2000, seed=3)
    query = _unit(planted[:5] + 0.1 * rng.standard_normal((5, DIM)))
    top = index.top(query, 10)  # 2001 documents > 2 x shortlist of 160: the coarse pass runs
    assert len(top) == 10 and len(set(top)) == 10
    assert "planted" in top
    allowed = {f"d{i}" for i in range(0, 2000, 3)}
    filtered = index.top(query, 10, allowed)
    assert len(filtered) == 10 and set(filtered) <= allowed
    index.remove(["planted"])
    assert "planted" not in index.top(query, 10)


def test_the_coarse_pass_shortlists_over_the_full_scan_size_also_under_a_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over FULL_SCAN_MAX documents (after a filter) the coarse centroids shortlist first and the planted document
    survives; a filter leaving fewer ranks every one on all 16 centroids, the exact top n."""
    monkeypatch.setattr(candidates, "SHORTLIST_MIN", 16)
    monkeypatch.setattr(candidates, "FULL_SCAN_MAX", 500)
    index, summaries, planted, rng = _with_planted(2000, seed=13)
    query = _unit(planted[:4] + 0.1 * rng.standard_normal((4, DIM)))
    levels: list[str] = []
    score = index._score
    monkeypatch.setattr(index, "_score", lambda q, level, rows: (levels.append(level), score(q, level, rows))[1])
    found = index.top(query, 10)
    assert levels == ["coarse", "fine"]  # 2,001 documents > 500 and 2 x the shortlist of 160
    assert len(found) == len(set(found)) == 10 and "planted" in found
    allowed = {f"d{i}" for i in range(0, 2000, 2)} | {"planted"}  # 1,001 documents: still the coarse pass
    levels.clear()
    filtered = index.top(query, 10, allowed)
    assert levels == ["coarse", "fine"] and len(filtered) == 10 and set(filtered) <= allowed and "planted" in filtered
    allowed = {f"d{i}" for i in range(0, 2000, 5)}  # 400: under FULL_SCAN_MAX, every one on all 16
    levels.clear()
    filtered = index.top(query, 10, allowed)
    assert levels == ["fine"]
    brute = [f"d{5 * int(d[1:])}" for d in _brute_top(query, summaries[::5], 20)]  # d0, d5, ... as rows 0, 1, ...
    assert set(brute[:5]) <= set(filtered) <= set(brute)  # the float ranking's best, int8 codes' ties at the 10th aside


def test_merged_query_keeps_the_token_mass_and_bounds_late_interaction_from_below() -> None:
    rng = np.random.default_rng(7)
    topics = _unit(rng.standard_normal((4, DIM)))
    query = _unit(topics[rng.integers(0, 4, 30)] + 0.05 * rng.standard_normal((30, DIM)))  # 4 topics, small noise
    merged = merged_query(query, 8)
    assert 1 <= merged.shape[0] <= 8 and merged.shape[1] == DIM
    np.testing.assert_allclose(merged.sum(axis=0), query.sum(axis=0), atol=1e-4)  # every token lands in one group
    np.testing.assert_array_equal(merged, merged_query(query, 8))  # deterministic
    summaries = _unit(rng.standard_normal((200, 16, DIM)))
    exact = np.einsum("td,ncd->ntc", query, summaries).max(axis=2).sum(axis=1)
    bound = np.einsum("td,ncd->ntc", merged, summaries).max(axis=2).sum(axis=1)
    assert np.all(bound <= exact + 1e-4)
    # Near-duplicate tokens (what merging is for) keep the bound tight: the same best documents.
    assert len(set(np.argsort(-bound)[:20]) & set(np.argsort(-exact)[:20])) >= 15
    short = query[:8]
    np.testing.assert_array_equal(merged_query(short, 8), short)
    np.testing.assert_array_equal(merged_query(query, 0), query)


def test_a_long_query_uses_the_merged_query_in_the_coarse_pass_and_keeps_a_planted_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(candidates, "SHORTLIST_MIN", 16)
    monkeypatch.setattr(candidates, "FULL_SCAN_MAX", 0)
    calls: list[tuple[int, int]] = []

    def spy(query: np.ndarray, rows: int) -> np.ndarray:
        out = merged_query(query, rows)
        calls.append((query.shape[0], out.shape[0]))
        return out

    monkeypatch.setattr(candidates, "merged_query", spy)
    index, _, planted, rng = _with_planted(2000, seed=4)
    query = _unit(planted[rng.integers(0, 16, 24)] + 0.1 * rng.standard_normal((24, DIM)))
    top = index.top(query, 10)
    assert calls and calls[0][0] == 24 and calls[0][1] <= candidates.COARSE_QUERY_ROWS
    assert "planted" in top and len(set(top)) == 10


def test_removed_documents_are_never_returned() -> None:
    index, _ = _index(3000)
    index.remove([f"d{i}" for i in range(2500)])
    query = _unit(np.random.default_rng(4).standard_normal((4, DIM)))
    assert len(index) == 500
    assert set(index.top(query, 1000)) == {f"d{i}" for i in range(2500, 3000)}


def test_a_saved_index_opens_memory_mapped_and_gives_the_same_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(candidates, "SHORTLIST_MIN", 16)
    monkeypatch.setattr(candidates, "FULL_SCAN_MAX", 0)
    index, _ = _index(1500)
    index.remove(["d7", "d9"])
    query = _unit(np.random.default_rng(6).standard_normal((5, DIM)))
    before = index.top(query, 30)
    index.save(tmp_path / "fs", {"counts": np.arange(1498)})
    fine = next((tmp_path / "fs").glob("snap-*/fine.bin"))
    stored = json.loads(next((tmp_path / "fs").glob("snap-*/meta.json")).read_text())["dtype"]
    assert stored == ("int8" if summary_storage.int8_is_faster() else str(summary_storage.compute_dtype()).split(".")[-1])
    assert fine.stat().st_size == 16 * 1498 * DIM * {"int8": 1, "bfloat16": 2, "float32": 4}[stored]
    saved = index.top(query, 30)  # the saver maps its own snapshot back (int8 codes may swap a near-tie)
    assert len(set(saved) & set(before)) >= 27
    opened = CentroidIndex(16, DIM)
    extras = opened.load(tmp_path / "fs")
    assert extras is not None and extras["counts"].tolist() == list(range(1498))
    assert len(opened) == 1498 and opened.ids() == index.ids()
    assert opened.top(query, 30) == saved  # coarse pass and all
    if Path("/proc/self/maps").exists():  # opened as a memory map of the snapshot's files, not read into memory
        assert str(fine.resolve()) in Path("/proc/self/maps").read_text()
    assert sorted(opened.top(query, 2000)) == sorted(index.ids())
    assert CentroidIndex(8, DIM).load(tmp_path / "fs") is None  # other shapes: not used
    assert CentroidIndex(16, DIM).load(tmp_path / "nothing") is None


def test_documents_added_and_removed_after_opening_a_snapshot(tmp_path: Path) -> None:
    """Additions go to an in-memory segment beside the mapped one; removals hide mapped rows; a save merges both."""
    index, summaries = _index(400)
    index.save(tmp_path / "fs")
    opened = CentroidIndex(16, DIM)
    assert opened.load(tmp_path / "fs") is not None
    rng = np.random.default_rng(8)
    planted = _unit(rng.standard_normal((16, DIM)))
    opened.add(["planted"], [planted])
    opened.remove(["d0", "d1"])
    query = _unit(planted[:4] + 0.05 * rng.standard_normal((4, DIM)))
    assert opened.top(query, 1) == ["planted"]
    everything = opened.top(query, 1000)
    assert len(everything) == 399 and "d0" not in everything and "planted" in everything
    opened.add(["d5"], [summaries[5]])  # replace a mapped document by a new version
    assert opened.ids().count("d5") == 1
    opened.save(tmp_path / "fs")
    again = CentroidIndex(16, DIM)
    assert again.load(tmp_path / "fs") is not None
    assert sorted(again.ids()) == sorted(opened.ids()) and len(again) == 399
    assert again.top(query, 1) == ["planted"]
    assert len(list((tmp_path / "fs").glob("snap-*"))) == 1  # older snapshots are removed


def test_document_centroids_are_unit_and_capped_by_the_vector_count() -> None:
    vectors = _unit(np.random.default_rng(5).standard_normal((10, DIM)))
    assert document_centroids(vectors, 16).shape == (10, DIM)
    cents = document_centroids(np.concatenate([vectors] * 5), 4)
    np.testing.assert_allclose(np.linalg.norm(cents, axis=1), 1.0, atol=1e-5)


class _Spy(CentroidIndex):
    """A first stage that tells ``record`` what it was asked (name, query, n, probes, per_token) and answers ``n``
    ids named by ``label``, then one id every such stage answers ("shared")."""

    def __init__(self, name: str, record: Callable[[str, np.ndarray, int, int | None, int | None], None],
                 label: Callable[[str, np.ndarray, int], str] = lambda name, _query, i: f"{name}{i}") -> None:
        super().__init__(16, DIM)
        self.name, self.record, self.label = name, record, label

    def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, probes: int | None = None,
            per_token: int | None = None, distinct_codes: int | None = None) -> list[str]:
        self.record(self.name, query, n, probes, per_token)
        self.distinct_codes = distinct_codes
        return [self.label(self.name, query, i) for i in range(n)] + ["shared"]


@pytest.mark.parametrize("small", [True, False])
def test_queries_with_fewer_tokens_keep_more_candidates(small: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer tokens keep more candidates, within [n_candidates, factor x n_candidates]; a small index has a larger
    budget and twice the cap; on a large one, 8-16-token queries have a cap of their own (MIXED_CANDIDATE_FACTOR)."""
    from docpc_retrievers.store.search import two_stage

    index, _ = _index(40)
    monkeypatch.setattr(two_stage, "SMALL_INDEX_DOCS", 40 if small else 39)
    search = TwoStageSearch(index, None, n_candidates=256)  # type: ignore[arg-type]
    scale = two_stage.SMALL_INDEX_SCALE if small else 1
    budget = two_stage.SMALL_INDEX_BUDGET if small else CANDIDATE_TOKEN_BUDGET
    tokens = (1, 4, 7, 8, 10, 16, 17, 24, 40, 64, 100, 400)
    counts = [search.candidates_for(np.zeros((t, DIM), dtype=np.float32)) for t in tokens]
    mixed = [two_stage.TOKEN_STAGE_MAX_TOKENS < t <= two_stage.MIXED_MAX_TOKENS for t in tokens]
    for t, n, m in zip(tokens, counts, mixed):
        factor = two_stage.MIXED_CANDIDATE_FACTOR if m and not small else MAX_CANDIDATE_FACTOR
        assert n == min(scale * factor * 256, max(256, budget // t))
    assert counts[0] == scale * MAX_CANDIDATE_FACTOR * 256 and counts[-1] == 256
    rest = [n for n, t in zip(counts, tokens) if t > two_stage.TOKEN_STAGE_MAX_TOKENS]
    assert rest == sorted(rest, reverse=True)  # beyond short queries: fewer tokens, more candidates
    assert len(set(counts)) > 2  # the budget, not only the bounds, decides some of them
    eight, sixteen, seventeen = (counts[tokens.index(t)] for t in (8, 16, 17))
    if small:  # unchanged by the mixed cap
        assert eight == 2 * MAX_CANDIDATE_FACTOR * 256
    else:  # the budget decides 8-16 tokens (3,072 and 1,536 at the defaults); 17 tokens are capped again
        mixed_cap = min(two_stage.MIXED_CANDIDATE_FACTOR * 256, CANDIDATE_TOKEN_BUDGET // 8)
        assert eight == mixed_cap > MAX_CANDIDATE_FACTOR * 256
        assert sixteen == CANDIDATE_TOKEN_BUDGET // 16 > seventeen == MAX_CANDIDATE_FACTOR * 256


def test_a_query_with_grouped_tokens_keeps_the_ordinary_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mixed query whose near-identical tokens were grouped is capped at MAX_CANDIDATE_FACTOR (it takes the groups'
    own candidates), and the search says whether the query was grouped."""
    from docpc_retrievers.store.search import two_stage

    index, _ = _index(30)
    monkeypatch.setattr(two_stage, "SMALL_INDEX_DOCS", 29)  # a large index
    search = TwoStageSearch(index, None, n_candidates=256)  # type: ignore[arg-type]
    eight = np.zeros((8, DIM), dtype=np.float32)
    assert search.candidates_for(eight, grouped=True) == MAX_CANDIDATE_FACTOR * 256
    assert search.candidates_for(eight) == min(two_stage.MIXED_CANDIDATE_FACTOR * 256, CANDIDATE_TOKEN_BUDGET // 8)
    seen: list[bool] = []

    def counted(query: np.ndarray, *, grouped: bool = False) -> int:
        seen.append(grouped)
        return 4

    monkeypatch.setattr(search, "candidates_for", counted)
    monkeypatch.setattr(search, "_ranked", lambda *a, **kw: [])
    rng = np.random.default_rng(5)
    distinct = rng.standard_normal((9, DIM)).astype(np.float32)
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    padded = np.concatenate([distinct, np.repeat(distinct[:1], 6, axis=0)])
    ids = [f"d{i}" for i in range(30)]
    for q in (distinct, padded):
        search.search(q, ids, None, 3, metadata=lambda found: {})
    assert seen == [False, True]


def test_short_mixed_and_long_queries_take_their_candidates_from_their_stages() -> None:
    """Short: SHORT_QUERY_FACTOR x n_candidates from the token stage (more lists per token the fewer the tokens) and
    the summaries' best SHORT_SUMMARY_FACTOR x n_candidates; mixed: some of each; long: summaries."""
    from docpc_retrievers.store.search import two_stage

    asked: dict[str, tuple[int, int | None]] = {}
    kept: dict[str, int | None] = {}

    def record(name: str, query: np.ndarray, n: int, probes: int | None, per_token: int | None) -> None:
        asked[name] = (n, probes)
        kept[name] = per_token

    tokens, centroids = _Spy("t", record), _Spy("c", record)
    search = TwoStageSearch(centroids, None, n_candidates=8, token_stage=lambda: tokens)  # type: ignore[arg-type]
    short = np.zeros((3, DIM), dtype=np.float32)
    found = search.candidates(short, 8, None)
    probes = min(two_stage.SHORT_MAX_PROBES, two_stage.SHORT_PROBE_BUDGET // 3)
    summaries = two_stage.SHORT_SUMMARY_FACTOR * 8  # the summaries' share of a short query
    assert asked == {"t": (two_stage.SHORT_QUERY_FACTOR * 8, probes), "c": (summaries, None)}
    assert kept == {"t": two_stage.SHORT_PER_TOKEN, "c": None}
    assert tokens.distinct_codes == two_stage.SHORT_DISTINCT_CODES  # a short query's scan is bounded
    assert found == [f"t{i}" for i in range(two_stage.SHORT_QUERY_FACTOR * 8)] + ["shared"] + [f"c{i}" for i in range(summaries)]
    search.candidates(short, search.candidates_for(short), None)  # the automatic count, when larger, is kept
    assert asked["t"] == (max(search.candidates_for(short), two_stage.SHORT_QUERY_FACTOR * 8), probes)
    seven = np.zeros((two_stage.TOKEN_STAGE_MAX_TOKENS, DIM), dtype=np.float32)
    search.candidates(seven, 8, None)  # more tokens: fewer lists each, within the budget
    assert asked["t"][1] == two_stage.SHORT_PROBE_BUDGET // two_stage.TOKEN_STAGE_MAX_TOKENS < probes
    asked.clear()
    kept.clear()
    mixed = np.zeros((two_stage.MIXED_MAX_TOKENS, DIM), dtype=np.float32)
    found = search.candidates(mixed, 600, None)  # the token stage's best 256, the summaries' best 600 - 257
    t = two_stage.MIXED_TOKEN_CANDIDATES
    assert asked == {"t": (t, two_stage.MIXED_PROBES), "c": (600 - t - 1, None)}
    assert tokens.distinct_codes is None  # a mixed query's few lists are not
    assert found == [f"t{i}" for i in range(t)] + ["shared"] + [f"c{i}" for i in range(600 - t - 1)]  # "shared" once
    asked.clear()
    search.candidates(mixed, 40, None)  # few candidates asked: at most half from the token stage
    assert asked == {"t": (20, two_stage.MIXED_PROBES), "c": (19, None)}
    asked.clear()
    search.candidates(np.zeros((two_stage.MIXED_MAX_TOKENS + 1, DIM), dtype=np.float32), 50, None)  # summaries alone
    assert asked == {"c": (50, None)}
    asked.clear()
    search.candidates(short, 5000, None, explicit=True)  # a count the caller asked for is not capped
    assert asked == {"t": (5000, probes), "c": (summaries, None)}
    asked.clear()
    search.candidates(short, 300, None)  # an automatic count above the factor's (a large top_k) is kept
    assert asked == {"t": (300, probes), "c": (summaries, None)}


def test_groups_of_near_identical_tokens_add_the_token_stages_candidates_for_their_means() -> None:
    """A mixed or long query with groups of near-identical tokens adds the token stage's best HEAVY_GROUP_CANDIDATES
    for the groups' means alone (HEAVY_GROUP_PROBES lists each); a short one, or a count the caller asked for, not."""
    from docpc_retrievers.store.search import two_stage

    calls: list[tuple[str, int, int, int | None, int | None]] = []

    def record(name: str, query: np.ndarray, n: int, probes: int | None, per_token: int | None) -> None:
        calls.append((name, len(query), n, probes, per_token))

    def label(name: str, query: np.ndarray, i: int) -> str:
        return f"{name}{len(query)}-{i}"

    tokens, centroids = _Spy("t", record, label), _Spy("c", record, label)
    search = TwoStageSearch(centroids, None, n_candidates=8, token_stage=lambda: tokens)  # type: ignore[arg-type]
    heavy = np.ones((2, DIM), dtype=np.float32)
    g, probes, per = two_stage.HEAVY_GROUP_CANDIDATES, two_stage.HEAVY_GROUP_PROBES, two_stage.SHORT_PER_TOKEN
    long_query = np.zeros((two_stage.MIXED_MAX_TOKENS + 4, DIM), dtype=np.float32)
    found = search.candidates(long_query, 50, None, heavy=heavy)
    assert calls == [("t", 2, g, probes, per), ("c", len(long_query), 50, None, None)]
    assert found == [f"c{len(long_query)}-{i}" for i in range(50)] + ["shared"] + [f"t2-{i}" for i in range(g)]
    calls.clear()
    mixed = np.zeros((two_stage.MIXED_MAX_TOKENS, DIM), dtype=np.float32)
    search.candidates(mixed, 600, None, heavy=heavy)  # the mixed path's two stages, then the groups'
    t = two_stage.MIXED_TOKEN_CANDIDATES
    assert calls == [("t", len(mixed), t, two_stage.MIXED_PROBES, None), ("t", 2, g, probes, per),
                     ("c", len(mixed), 600 - t - 1, None, None)]
    calls.clear()
    search.candidates(long_query, 50, None, heavy=np.zeros((0, DIM), dtype=np.float32))  # no group: summaries alone
    search.candidates(long_query, 50, None, heavy=heavy, explicit=True)  # the caller's count is kept
    assert calls == [("c", len(long_query), 50, None, None)] * 2
    calls.clear()
    short = np.zeros((3, DIM), dtype=np.float32)
    search.candidates(short, 8, None, heavy=heavy)  # a short query's token search covers its groups already
    assert [c[0] for c in calls] == ["t", "c"] and calls[0][1] == 3


def test_a_search_passes_its_queries_groups_of_near_identical_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search hands the candidates step the means of the query's groups of several tokens, and None for a
    query of distinct tokens."""
    from docpc_retrievers.store.search import two_stage

    index, _ = _index(30)
    ids = [f"d{i}" for i in range(30)]
    search = TwoStageSearch(index, None, n_candidates=4)  # type: ignore[arg-type]
    seen: list[np.ndarray | None] = []
    monkeypatch.setattr(search, "planned", lambda q, n, allowed, **kw: seen.append(kw["heavy"]) or
                        two_stage._Candidates([]))
    rng = np.random.default_rng(3)
    distinct = rng.standard_normal((5, DIM)).astype(np.float32)
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    padded = np.concatenate([distinct, np.repeat(distinct[:1], 4, axis=0)])  # the first token 5 times in all
    for q in (distinct, padded):
        search._ranked(q, ids, None, 3, 10, False, "max", distinct=two_stage.distinct_tokens(q))
    assert seen[0] is None
    assert seen[1] is not None and seen[1].shape == (1, DIM)
    np.testing.assert_allclose(seen[1][0], distinct[0], atol=1e-5)


def _one_token_index(scores: dict[str, float]) -> CentroidIndex:
    """Documents whose best centroid has cosine ``scores[id]`` with the query ``e0`` (the other 15 are orthogonal)."""
    index = CentroidIndex(16, DIM)
    eye = np.eye(DIM, dtype=np.float32)
    blocks = []
    for s in scores.values():
        c = np.repeat(eye[2:3], 16, axis=0)
        c[0] = s * eye[0] + np.sqrt(1 - s * s) * eye[1]
        blocks.append(c)
    index.add_block(list(scores), np.stack(blocks))
    return index


def test_near_tie_margin_grows_with_the_query_tokens_and_with_their_similarity() -> None:
    eye = np.eye(DIM, dtype=np.float32)
    assert candidates.near_tie_margin(eye[:1]) == pytest.approx(candidates.NEAR_TIE_MARGIN)
    assert candidates.near_tie_margin(eye[:9]) == pytest.approx(3 * candidates.NEAR_TIE_MARGIN)  # independent: sqrt(t)
    assert candidates.near_tie_margin(np.repeat(eye[:1], 9, 0)) == pytest.approx(9 * candidates.NEAR_TIE_MARGIN)  # copies: t
    assert candidates.near_tie_margin(np.concatenate([eye[:1], -eye[:1]])) == pytest.approx(np.sqrt(2) * candidates.NEAR_TIE_MARGIN)


def test_documents_within_the_margin_of_the_kth_estimate_widen_the_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flat estimates keep every near-tie of the k-th best (up to ``most``); clear ones keep ``n``; rank 0 never widens."""
    monkeypatch.setattr(candidates, "NEAR_TIE_MARGIN", 0.05)
    best = {f"b{i}": 0.99 - 0.01 * i for i in range(10)}  # the 10th best estimate: 0.90
    near = {f"n{i}": 0.87 for i in range(30)}  # within 0.05 of it
    far = {f"f{i}": 0.80 - 0.01 * i for i in range(40)}  # beyond
    index = _one_token_index(best | near | far)
    query = np.eye(DIM, dtype=np.float32)[:1]
    assert index.top(query, 12) == index.top_widened(query, 12, rank=0, most=500)
    assert len(index.top(query, 12)) == 12
    assert set(index.top_widened(query, 12, rank=10, most=500)) == set(best) | set(near)
    capped = index.top_widened(query, 12, rank=10, most=25)
    assert len(capped) == 25 and set(best) <= set(capped) <= set(best) | set(near)
    assert len(index.top_widened(query, 45, rank=10, most=500)) == 45  # never fewer than asked
    # A filter: the k-th best among the allowed documents sets the bar.
    allowed = {"b0", *near, *far}
    alone = index.top_widened(query, 5, allowed, rank=1, most=500)  # only b0 is near the best: n stands
    assert len(alone) == 5 and "b0" in alone and set(alone) - {"b0"} <= set(near)
    assert set(index.top_widened(query, 5, allowed, rank=2, most=500)) == {"b0"} | set(near)
    # Clear estimates: the 10th best stands 0.1 above the rest, so nothing is added.
    clear = _one_token_index(best | {f"f{i}": 0.80 - 0.01 * i for i in range(40)})
    assert len(clear.top_widened(query, 12, rank=10, most=500)) == 12


def test_automatic_counts_widen_the_summaries_candidates_and_explicit_ones_do_not() -> None:
    from docpc_retrievers.store.search import two_stage

    asked: list[tuple[str, int, int | None, int | None]] = []
    reserves: list[int] = []

    class Spy(CentroidIndex):
        def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, probes: int | None = None) -> list[str]:
            asked.append(("top", n, None, None))
            return [f"x{i}" for i in range(n)]

        def top_widened(self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int) -> list[str]:
            asked.append(("widened", n, rank, most))
            return [f"x{i}" for i in range(n)]

        def top_ranked(self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int,
                       reserve: int) -> tuple[list[str], list[str]]:
            asked.append(("ranked", n, rank, most))
            reserves.append(reserve)
            return [f"x{i}" for i in range(n)], []

    search = TwoStageSearch(Spy(16, DIM), None, n_candidates=8)  # type: ignore[arg-type]
    long_query = np.zeros((two_stage.MIXED_MAX_TOKENS + 1, DIM), dtype=np.float32)
    search.candidates(long_query, 50, None, top_k=10)
    search.candidates(long_query, 50, None, top_k=10, explicit=True)
    search.candidates(long_query, 50, None)
    assert asked == [("widened", 50, 10, two_stage.NEAR_TIE_FACTOR * 8), ("top", 50, None, None), ("top", 50, None, None)]
    asked.clear()
    tokens = Spy(16, DIM)
    mixed = TwoStageSearch(Spy(16, DIM), None, n_candidates=8, token_stage=lambda: tokens)  # type: ignore[arg-type]
    mixed.candidates(np.zeros((two_stage.MIXED_MAX_TOKENS, DIM), dtype=np.float32), 40, None, top_k=3)
    # The token stage's 20 (never widened), the summaries' other 20 widened within the rest of the cap, ranked with
    # a reserve for a follow-up round.
    assert asked == [("top", 20, None, None), ("ranked", 20, 3, two_stage.NEAR_TIE_FACTOR * 8 - 20)]
    assert reserves == [min(int(two_stage.FOLLOW_UP_FACTOR * 20), two_stage.FOLLOW_UP_MOST * 8)]


def test_ranked_summaries_come_best_first_with_the_next_best_as_a_reserve() -> None:
    """top_ranked: top_widened's documents best first by their 16-centroid estimate, then the next ``reserve``
    best (in any order), also under a filter (only allowed documents)."""
    index, _ = _index(400)
    query = _unit(np.random.default_rng(11).standard_normal((9, DIM)))
    best, reserve = index.top_ranked(query, 20, rank=0, most=20, reserve=30)
    estimate = dict(zip(index._ids, index._score(query, "fine", None).tolist()))  # the index's own (int8 or bf16)
    order = sorted(estimate, key=lambda d: -estimate[d])

    def check(best: list[str], reserve: Sequence[str], kept: list[str], n: int, more: int) -> None:
        tol = 1e-4  # a filtered search scores its rows apart: bfloat16 sums may round differently there
        scores = [estimate[d] for d in best]
        assert all(a >= b - tol for a, b in zip(scores, scores[1:])) and len(best) == n  # best first
        assert len(reserve) == len(list(reserve)) == min(more, len(kept) - n)
        assert not set(best) & set(reserve)
        assert min(scores) >= max(estimate[d] for d in reserve) - tol  # the reserve comes after the best
        cut = estimate[kept[n + len(reserve) - 1]]
        assert set(best) | set(reserve) >= {d for d in kept if estimate[d] > cut + tol}  # nothing better skipped
        assert list(reserve[:3]) == list(reserve)[:3] and reserve[-1] == list(reserve)[-1]

    check(best, reserve, order, 20, 30)
    assert set(best) == set(index.top_widened(query, 20, rank=0, most=20))
    allowed = {f"d{i}" for i in range(0, 400, 3)}
    best, reserve = index.top_ranked(query, 10, allowed, rank=0, most=10, reserve=500)
    check(best, reserve, [d for d in order if d in allowed], 10, 500)  # a reserve past the allowed stops at them
    assert set(best) | set(reserve) == allowed
    best, reserve = index.top_ranked(query, 400, rank=0, most=400, reserve=10)  # every document: no reserve left
    assert len(best) == 400 and len(reserve) == 0
    assert index.top_ranked(query, 0, rank=0, most=0, reserve=5) == ([], [])


class _Rows:
    """Exact scoring's source over planted int8 rows: document ``d`` scores ``8 x strength[d]`` for a query of the
    unit vectors e0..e7 (its row i is ``s e_i + sqrt(1 - s^2) e_(8+i)``)."""

    def __init__(self, strength: dict[str, float]) -> None:
        eye = np.eye(DIM, dtype=np.float32)
        self.docs = {d: np.rint(127 * np.stack([s * eye[i] + np.sqrt(1 - s * s) * eye[8 + i] for i in range(8)]))
                     .astype(np.int8) for d, s in strength.items()}
        self.read: list[str] = []

    def rows(self, ids: list[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        self.read.extend(ids)
        kept = [d for d in ids if d in self.docs]
        rows = np.concatenate([self.docs[d] for d in kept]) if kept else np.zeros((0, DIM), np.int8)
        return kept, [8] * len(kept), rows, np.full(len(rows), 1 / 127, dtype="<f2")

    def parts(self, doc_id: str) -> None:
        return None


@pytest.mark.parametrize("deep", [True, False])
def test_a_mixed_query_whose_best_reach_deep_into_the_summaries_scores_their_reserve(
    deep: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When one of the exact best came from the summaries' ranks past FOLLOW_UP_DEPTH of their count, the reserve
    is scored too and its best document wins; when the best stayed near the summaries' top, the reserve is never
    read (and its better document stays unfound: the rule trades that for time)."""
    from docpc_retrievers.store.search import two_stage

    monkeypatch.setattr(two_stage, "SHORTLIST_EXACT", 4)  # the approximate pass runs on these few candidates
    tokens = [f"t{i}" for i in range(10)]
    summaries = [f"a{i}" for i in range(10)]
    reserve = [f"r{i}" for i in range(15)]
    strength = {d: 0.3 for d in tokens} | {d: 0.5 - 0.01 * i for i, d in enumerate(summaries)}
    strength |= {d: 0.2 for d in reserve} | {f"z{i}": 0.1 for i in range(20)}
    strength["a7"] = 0.9 if deep else 0.45  # rank 7 of 10 among the summaries: past half of them
    strength["r3"] = 0.95  # the best document of all, in the reserve

    class Ranked(CentroidIndex):
        def top_ranked(self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int,
                       reserve: int) -> tuple[list[str], list[str]]:
            asked.append((n, reserve))
            return summaries[:n], reserves[:reserve]

    class Tokens:
        coverage = 1.0

        def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None, **_: object) -> list[str]:
            return tokens[:n]

    asked: list[tuple[int, int]] = []
    reserves = reserve
    source = _Rows(strength)
    search = TwoStageSearch(Ranked(16, DIM), source, n_candidates=8, token_stage=Tokens)  # type: ignore[arg-type]
    query = np.eye(DIM, dtype=np.float32)[:8]
    hits = search._ranked(query, list(strength), None, 3, 20, False, "max", distinct=two_stage.distinct_tokens(query))
    assert asked == [(10, min(int(two_stage.FOLLOW_UP_FACTOR * 10), two_stage.FOLLOW_UP_MOST * 8))]
    found = [d for d, _, _ in hits]
    if deep:
        assert found == ["r3", "a7", "a0"]
        assert set(reserve) <= set(source.read)
        assert hits[0][1] == pytest.approx(8 * 0.95, abs=0.05)
    else:
        assert found == ["a0", "a1", "a2"]
        assert not set(reserve) & set(source.read)


@pytest.mark.parametrize("coarse", [False, True])
def test_skipped_documents_are_left_out_as_a_filter_of_the_rest_would_leave_them(
    monkeypatch: pytest.MonkeyPatch, coarse: bool
) -> None:
    """``skip`` (a partial token stage's documents, found there) gives the best of the others, as ``allowed`` would,
    with or without the coarse pass; the mask is remembered for the same collection and rebuilt for another."""
    if coarse:
        monkeypatch.setattr(candidates, "SHORTLIST_MIN", 16)
        monkeypatch.setattr(candidates, "FULL_SCAN_MAX", 0)
    index, summaries = _index(600)
    query = _unit(np.random.default_rng(9).standard_normal((6, DIM)))
    best = _brute_top(query, summaries, 600)
    skip = frozenset(best[:40:2])  # half of the 40 best
    rest = set(best) - skip
    got = index.top_widened(query, 10, None, rank=0, most=10, skip=skip)
    assert len(got) == 10 and not skip & set(got)
    assert set(got) == set(index.top(query, 10, rest))
    if not coarse:
        assert set(got) == set([d for d in best if d not in skip][:10])  # exact: every summary scored
    assert index._skipped is not None and index._skipped[0] is skip
    assert index.top_widened(query, 10, None, rank=0, most=10, skip=frozenset()) == index.top(query, 10)
    other = frozenset(best[:5])
    assert not other & set(index.top_widened(query, 10, None, rank=0, most=10, skip=other))
