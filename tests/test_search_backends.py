"""The search backends behind one interface, and their one configuration."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.store.codec import quantize
from docpc_retrievers.store.search import (
    BACKENDS,
    SearchConfig,
    backend_for,
    document_centroids,
)

DIM = 32


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


class _Rows:
    """A VectorSource over documents' int8 rows held in memory; ``read`` records every id scored."""

    def __init__(self, docs: dict[str, np.ndarray]) -> None:
        self.docs = {d: quantize(v) for d, v in docs.items()}
        self.read: list[str] = []

    def rows(self, ids: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        self.read.extend(ids)
        kept = [d for d in ids if d in self.docs]
        if not kept:
            return [], [], np.zeros((0, DIM), np.int8), np.zeros(0, "<f2")
        return (kept, [len(self.docs[d][0]) for d in kept], np.concatenate([self.docs[d][0] for d in kept]),
                np.concatenate([self.docs[d][1] for d in kept]).astype("<f2"))

    def parts(self, doc_id: str) -> None:
        return None


def _corpus(n: int = 300, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    topics = _unit(rng.standard_normal((12, DIM)))
    docs = {}
    for i in range(n):
        picks = topics[rng.choice(12, size=20)]
        docs[f"d{i:03d}"] = _unit(picks + 0.6 * _unit(rng.standard_normal((20, DIM))))
    return docs


def _exact(query: np.ndarray, docs: dict[str, np.ndarray], k: int, allowed: set[str] | None = None) -> list[str]:
    scores = {d: float((query @ v.T).max(axis=1).sum()) for d, v in docs.items() if allowed is None or d in allowed}
    return sorted(scores, key=lambda d: (-scores[d], d))[:k]


def _backend(kind: str, docs: dict[str, np.ndarray], **settings: int):  # type: ignore[no-untyped-def]
    source = _Rows(docs)
    backend = backend_for(kind, source, dim=DIM, config=SearchConfig(**settings))
    ids = list(docs)
    backend.add(ids, [document_centroids(docs[d], 8) for d in ids])
    return backend, source


def test_the_configuration_is_checked_and_counts_candidates_by_query_length() -> None:
    config = SearchConfig(candidates=100, candidate_budget=1000, max_candidates=400, candidate_share=0.1)
    assert [config.candidates_for(t, 1000) for t in (1, 3, 5, 20)] == [400, 333, 200, 100]
    assert [config.candidates_for(t, 3000) for t in (1, 3, 5, 20)] == [400, 333, 300, 300]  # a share of the store
    assert config.candidates_for(20, 100_000) == 400
    assert config.with_options(candidates=50).candidates == 50
    for bad in ({"candidates": 0}, {"shortlist": -1}, {"candidates": 500, "max_candidates": 100}, {"backend": "x"},
                {"candidate_share": 1.5}):
        with pytest.raises(ValueError):
            SearchConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        config.with_options(no_such_setting=1)
    assert set(BACKENDS) == {"centroids", "scan"}


@pytest.mark.parametrize("kind", BACKENDS)
def test_each_backend_returns_the_exact_top_k_with_exact_scores_and_honours_filters(kind: str) -> None:
    docs = _corpus()
    backend, _ = _backend(kind, docs, n_centroids=8, candidates=120, scan_below=1, shortlist=40)
    rng = np.random.default_rng(1)
    for i in range(5):
        target = docs[f"d{17 * i:03d}"]
        query = _unit(target[:6] + 0.3 * _unit(rng.standard_normal((6, DIM))))
        hits = backend.search(query, 10)
        assert [h.id for h in hits] == _exact(query, {d: _rows_as_stored(v) for d, v in docs.items()}, 10)
        stored = _rows_as_stored(docs[hits[0].id])
        assert hits[0].score == pytest.approx(float((query @ stored.T).max(axis=1).sum()), rel=1e-5)
        allowed = {f"d{j:03d}" for j in range(0, 300, 7)}
        assert {h.id for h in backend.search(query, 10, allowed)} <= allowed


@pytest.mark.parametrize("kind", BACKENDS)
def test_documents_that_tie_are_answered_by_id_whatever_order_they_were_listed_in(kind: str) -> None:
    """Overlapping windows and copies score exactly alike; more of them than the shortlist holds must still give
    the lowest ids (the exhaustive ranking's order), not the ones the first stage happened to list first."""
    rng = np.random.default_rng(3)
    original = _unit(rng.standard_normal((20, DIM)))
    docs = {f"c{i:03d}": original for i in range(60)} | _corpus(60)
    query = _unit(original[:3] + 0.2 * _unit(rng.standard_normal((3, DIM))))
    for order in (sorted(docs), sorted(docs, reverse=True), list(rng.permutation(sorted(docs)))):
        listed = {d: docs[d] for d in order}
        backend, _ = _backend(kind, listed, n_centroids=8, candidates=80, scan_below=1, shortlist=12)
        hits = backend.search(query, 10)
        assert [h.id for h in hits] == [f"c{i:03d}" for i in range(10)]
        assert len({h.score for h in hits}) == 1


def _rows_as_stored(v: np.ndarray) -> np.ndarray:
    q, s = quantize(v)
    return q.astype(np.float32) * s.astype(np.float32)[:, None]


def test_the_centroid_backend_scores_only_its_candidates_and_a_small_pool_whole() -> None:
    docs = _corpus()
    query = _unit(docs["d042"][:8])
    backend, source = _backend("centroids", docs, n_centroids=8, candidates=30, max_candidates=30, scan_below=1)
    hits = backend.search(query, 5)
    assert hits[0].id == "d042"
    assert len(set(source.read)) == 30  # the summaries' 30 candidates, no more
    source.read.clear()
    backend.search(query, 5, candidates=60)
    assert len(set(source.read)) == 60
    whole, source = _backend("centroids", docs, n_centroids=8, candidates=30, max_candidates=30, scan_below=300)
    whole.search(query, 5)
    assert len(set(source.read)) == 300  # the store is under scan_below: every document scored
    source.read.clear()
    whole.search(query, 5, {"d001", "d002", "d042"})
    assert set(source.read) == {"d001", "d002", "d042"}


@pytest.mark.parametrize("kind", BACKENDS)
def test_removed_documents_are_never_returned_and_a_saved_backend_opens_with_its_extras(
    kind: str, tmp_path: Path
) -> None:
    docs = _corpus(120)
    backend, source = _backend(kind, docs, n_centroids=8, scan_below=1, candidates=40)
    query = _unit(docs["d010"][:5])
    assert backend.search(query, 1)[0].id == "d010"
    backend.remove(["d010", "unknown"])
    assert "d010" not in {h.id for h in backend.search(query, 119)}
    assert len(backend) == 119 and "d010" not in backend.ids()
    backend.save(tmp_path / "snap", {"counts": np.arange(119)})
    opened = backend_for(kind, source, dim=DIM, config=backend.config)
    extras = opened.load(tmp_path / "snap")
    assert extras is not None and extras["counts"].tolist() == list(range(119))
    assert sorted(opened.ids()) == sorted(backend.ids())
    assert [h.id for h in opened.search(query, 10)] == [h.id for h in backend.search(query, 10)]
    assert backend_for(kind, source, dim=DIM).load(tmp_path / "nothing") is None
