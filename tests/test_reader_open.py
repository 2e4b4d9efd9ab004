"""A reader with no snapshot builds it from the records' int8 summaries as they stream in: the same snapshot, code
for code, as the one the writer saved from its float summaries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search.snapshot import read_snapshot

DIM = 24


pytestmark = pytest.mark.usefixtures("fresh_chroma")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _codes_by_id(folder: Path) -> tuple[dict[str, np.ndarray], list[float], dict[str, int]]:
    snap, meta, ids, extras = read_snapshot(folder)
    fine = np.fromfile(snap / "fine.bin", dtype=np.int8).reshape(meta["n_centroids"], len(ids), meta["dim"])
    counts = dict(zip(ids, extras["counts"].tolist()))
    return {doc_id: fine[:, i, :] for i, doc_id in enumerate(ids)}, meta["fine_scales"], counts


def test_the_streamed_snapshot_equals_the_saved_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    docs = [_unit(rng.standard_normal((int(rng.integers(3, 40)), DIM))) for _ in range(350)]  # some under 16 rows
    ids = [f"d{i:03d}" for i in range(350)]
    path = tmp_path / "s"
    with MultiVectorStore(path, writable=True) as store:
        store.add(ids, docs, [{} for _ in ids], parts=[[2, len(d) - 2] if i % 50 == 0 else None
                                                     for i, d in enumerate(docs)])
        store.delete(["d007"])
        store.reader.view.save()  # type: ignore[union-attr]
        expected = [(h.id, h.score) for h in store.search(docs[9][:5], top_k=5)]
    saved, saved_scales, saved_counts = _codes_by_id(path / "cache" / "first_stage")
    shutil.rmtree(path / "cache")
    with MultiVectorStore(path) as reader:
        assert reader.count() == 349
        streamed, scales, counts = _codes_by_id(path / "cache" / "first_stage")
        assert [(h.id, h.score) for h in reader.search(docs[9][:5], top_k=5)] == expected
        assert reader.get(["d050"])[0].parts == (2, len(docs[50]) - 2)
    assert scales == saved_scales and counts == saved_counts and set(streamed) == set(saved) == set(ids) - {"d007"}
    assert all(np.array_equal(streamed[i], saved[i]) for i in saved)
    snap_meta = json.loads((path / "cache" / "first_stage" / "current.json").read_text())
    assert snap_meta["snapshot"].startswith("snap-")
