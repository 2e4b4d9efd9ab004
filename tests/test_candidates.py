"""The centroid summaries: ranking, filters, removals, snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from docpc_retrievers.store.search.centroids import CentroidIndex, document_centroids

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


def test_small_index_scores_every_summary_exactly() -> None:
    index, summaries = _index(300)
    query = _unit(np.random.default_rng(2).standard_normal((6, DIM)))
    assert set(index.top(query, 20)) == set(_brute_top(query, summaries, 20))


def test_removed_documents_are_never_returned() -> None:
    index, _ = _index(3000)
    index.remove([f"d{i}" for i in range(2500)])
    query = _unit(np.random.default_rng(4).standard_normal((4, DIM)))
    assert len(index) == 500
    assert set(index.top(query, 1000)) == {f"d{i}" for i in range(2500, 3000)}


def test_a_saved_index_opens_memory_mapped_and_gives_the_same_candidates(tmp_path: Path) -> None:
    index, _ = _index(1500)
    index.remove(["d7", "d9"])
    query = _unit(np.random.default_rng(6).standard_normal((5, DIM)))
    before = index.top(query, 30)
    index.save(tmp_path / "fs", {"counts": np.arange(1498)})
    fine = next((tmp_path / "fs").glob("snap-*/fine.bin"))
    stored = json.loads(next((tmp_path / "fs").glob("snap-*/meta.json")).read_text())["dtype"]
    assert stored == "int8"
    assert fine.stat().st_size == 16 * 1498 * DIM
    saved = index.top(query, 30)  # the saver maps its own snapshot back (int8 codes may swap a near-tie)
    assert len(set(saved) & set(before)) >= 27
    opened = CentroidIndex(16, DIM)
    extras = opened.load(tmp_path / "fs")
    assert extras is not None and extras["counts"].tolist() == list(range(1498))
    assert len(opened) == 1498 and opened.ids() == index.ids()
    assert opened.top(query, 30) == saved
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


def test_candidates_come_best_first_and_respect_a_filter() -> None:
    index, summaries, planted, rng = _with_planted(2000, seed=3)
    query = _unit(planted[:5] + 0.1 * rng.standard_normal((5, DIM)))
    top = index.top(query, 10)
    assert top[0] == "planted" and len(top) == len(set(top)) == 10
    approx = {f"d{i}": float(np.einsum("td,cd->tc", query, summaries[i]).max(axis=1).sum()) for i in range(2000)}
    rest = [approx[d] for d in top[1:]]
    assert all(a >= b - 0.01 for a, b in zip(rest, rest[1:]))  # best first (bfloat16 or int8 may swap near-ties)
    allowed = {f"d{i}" for i in range(0, 2000, 3)}
    filtered = index.top(query, 10, allowed)
    assert len(filtered) == 10 and set(filtered) <= allowed
    index.remove(["planted"])
    assert "planted" not in index.top(query, 10)


def test_a_version_2_snapshot_with_a_coarse_level_is_read_for_its_summaries(tmp_path: Path) -> None:
    """Snapshots written before the coarse pass was removed carry a coarse level beside the fine one: the fine level
    is read and searched as before, nothing rebuilt."""
    index, summaries = _index(300)
    index.save(tmp_path / "fs", {"counts": np.arange(300)})
    snap = next((tmp_path / "fs").glob("snap-*"))
    meta = json.loads((snap / "meta.json").read_text())
    meta.update(version=2, coarse_width=4)
    if meta["dtype"] == "int8":
        meta["coarse_scales"] = meta["fine_scales"]
    (snap / "meta.json").write_text(json.dumps(meta))
    (snap / "coarse.bin").write_bytes(b"\0" * 16)
    opened = CentroidIndex(16, DIM)
    extras = opened.load(tmp_path / "fs")
    assert extras is not None and extras["counts"].tolist() == list(range(300))
    query = _unit(np.random.default_rng(2).standard_normal((6, DIM)))
    assert opened.top(query, 20) == index.top(query, 20)
