"""Near-identical query tokens: grouped for the first stages and the approximate pass, never for the exact scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from docpc_retrievers.scoring.kernels import query_peak
from docpc_retrievers.scoring.maxsim import maxsim
from docpc_retrievers.store.codec import dequantize, quantize
from docpc_retrievers.store.search import two_stage
from docpc_retrievers.store.search.centroids import CentroidIndex, document_centroids
from docpc_retrievers.store.search.exact import approximate_scores
from docpc_retrievers.store.search.query_tokens import DUPLICATE_COSINE, distinct_tokens
from docpc_retrievers.store.search.two_stage import TwoStageSearch

DIM = 24


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _padded(rng: np.random.Generator, content: int, pads: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """``content`` random tokens, then ``pads`` copies of one vector with unit noise of size ``noise``."""
    pad = _unit(rng.standard_normal(DIM))
    copies = _unit(pad + noise * _unit(rng.standard_normal((pads, DIM))))
    return np.concatenate([_unit(rng.standard_normal((content, DIM))), copies]), pad


def test_near_identical_tokens_form_one_group_with_their_count_and_mean() -> None:
    rng = np.random.default_rng(0)
    query, pad = _padded(rng, content=5, pads=7, noise=0.02)
    found = distinct_tokens(query)
    assert found.merged
    assert found.counts.tolist() == [1, 1, 1, 1, 1, 7]
    np.testing.assert_array_equal(found.means[:5], query[:5])  # singletons are the tokens themselves
    np.testing.assert_allclose(found.means[5], query[5:].mean(axis=0), atol=1e-6)
    assert float(_unit(found.means[5]) @ pad) > 0.99
    np.testing.assert_allclose(found.weighted()[5], 7 * found.means[5], rtol=1e-6)


def test_distinct_tokens_leave_a_query_without_near_duplicates_as_it_is() -> None:
    query = _unit(np.random.default_rng(1).standard_normal((30, DIM)))
    found = distinct_tokens(query)
    assert not found.merged
    assert found.counts.tolist() == [1] * 30
    np.testing.assert_array_equal(found.means, query)
    # Copies far apart (noise 0.5: cosine about 0.8) stay apart; the threshold decides, not the count.
    spread, _ = _padded(np.random.default_rng(2), content=3, pads=6, noise=0.5)
    assert not distinct_tokens(spread).merged
    assert distinct_tokens(spread, cosine=0.5).merged


def test_groups_join_their_first_tokens_neighbourhood_in_query_order() -> None:
    eye = np.eye(DIM, dtype=np.float32)
    near = _unit(eye[0] + 0.1 * eye[1])  # cosine 0.995 with e0
    query = np.stack([eye[0], eye[2], near, eye[2], eye[0]])
    found = distinct_tokens(query)
    assert found.counts.tolist() == [3, 2]
    np.testing.assert_allclose(found.means[0], (2 * eye[0] + near) / 3, atol=1e-6)
    np.testing.assert_array_equal(found.means[1], eye[2])
    assert float(_unit(near) @ eye[0]) >= DUPLICATE_COSINE


class _Rows:
    """An in-memory VectorSource over int8 rows."""

    def __init__(self, docs: dict[str, np.ndarray]) -> None:
        self.docs = {d: quantize(v) for d, v in docs.items()}

    def rows(self, ids: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        kept = list(ids)
        return (kept, [len(self.docs[d][0]) for d in kept], np.concatenate([self.docs[d][0] for d in kept]),
                np.concatenate([self.docs[d][1] for d in kept]))

    def parts(self, doc_id: str) -> tuple[int, ...] | None:
        return None


def _corpus(n: int, seed: int, least: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"d{i}": _unit(rng.standard_normal((int(rng.integers(least, least + 16)), DIM))) for i in range(n)}


def test_the_weighted_groups_of_exact_copies_score_what_every_copy_does() -> None:
    rng = np.random.default_rng(3)
    docs = _corpus(60, seed=4)
    source = _Rows(docs)
    content = _unit(rng.standard_normal((4, DIM)))
    query = np.concatenate([content, np.repeat(content[1:2], 5, axis=0)])  # token 1 said six times
    found = distinct_tokens(query)
    assert found.counts.tolist() == [1, 6, 1, 1]
    ids = list(docs)
    full = approximate_scores(query, ids, source)
    grouped = approximate_scores(found.weighted(), ids, source)
    np.testing.assert_allclose(grouped, full, rtol=2e-3, atol=2e-3)
    reference = maxsim([query], [dequantize(*source.docs[d]) for d in ids])[0]
    tolerance = 1e-2 * 127 / query_peak()  # the query's rounding step: twice as coarse on CPUs without VNNI
    np.testing.assert_allclose(grouped, reference, rtol=tolerance, atol=tolerance)


def test_a_padded_query_reaches_the_first_stage_grouped_and_is_scored_on_every_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The summaries see one row per group and a budget for the groups; the returned scores are exact over all tokens."""
    docs = _corpus(300, seed=5, least=16)
    index = CentroidIndex(16, DIM)
    index.add_block(list(docs), np.stack([document_centroids(v, 16) for v in docs.values()]))
    seen: list[int] = []
    top = index.top_widened

    def spy(query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int) -> list[str]:
        seen.append(query.shape[0])
        return top(query, n, allowed, rank=rank, most=most)

    monkeypatch.setattr(index, "top_widened", spy)
    monkeypatch.setattr(two_stage, "SMALL_INDEX_DOCS", 0)
    search = TwoStageSearch(index, _Rows(docs), n_candidates=8)
    query, _ = _padded(np.random.default_rng(6), content=20, pads=10, noise=0.01)
    wide = TwoStageSearch(index, _Rows(docs), n_candidates=256)  # fewer rows, a larger share of the budget
    assert wide.candidates_for(distinct_tokens(query).means) > wide.candidates_for(query)
    hits = search.search(query, list(docs), None, 5, metadata=lambda ids: {d: {} for d in ids})
    assert seen == [21]  # 20 content tokens and one group of ten pads
    exact = maxsim([query], [dequantize(*search.source.docs[d]) for d in docs])[0]
    by_id = dict(zip(docs, exact))
    for doc_id, score, _, _ in hits:
        assert score == pytest.approx(by_id[doc_id], rel=1e-2, abs=1e-2)
    assert [h[1] for h in hits] == sorted((h[1] for h in hits), reverse=True)
