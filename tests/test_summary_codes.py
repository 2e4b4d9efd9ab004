"""int8 centroid codes: per-dimension scales, scores close to float late interaction, an old float snapshot still read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from docpc_retrievers.store.search import centroids as candidates
from docpc_retrievers.store.search import summary_codes
from docpc_retrievers.store.search.snapshot import new_snapshot, publish_snapshot
from docpc_retrievers.store.search.centroids import CentroidIndex
from docpc_retrievers.store.search.summary_codes import (
    decode,
    dimension_scales,
    encode,
    late_interaction_int8,
)

DIM = 128


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _summaries(n: int, seed: int = 0) -> np.ndarray:
    """``[16, n, DIM]`` centroid-major unit summaries with a few dimensions much wider than the rest (as real ones)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, n, DIM)).astype(np.float32)
    x[..., :4] *= 6.0
    return _unit(x)


def test_codes_round_trip_within_half_a_step_per_dimension() -> None:
    x = _summaries(500)
    scales = dimension_scales(np.abs(x).max(axis=(0, 1)))
    codes = encode(x, scales)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 127
    back = decode(torch.from_numpy(codes), scales).numpy()
    assert np.all(np.abs(back - x) <= scales / 2 + 1e-6)
    assert dimension_scales(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]  # an all-zero dimension divides by 1, not 0


def test_int8_scores_follow_float_late_interaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_codes, "CHUNK_PRODUCTS", 1 << 16)
    x = _summaries(20_000)
    query = _unit(np.random.default_rng(1).standard_normal((20, DIM)))
    assert x.shape[1] > max(summary_codes.CHUNK_DOCS_MIN, summary_codes.CHUNK_PRODUCTS // len(query))  # several chunks
    scales = dimension_scales(np.abs(x).max(axis=(0, 1)))
    codes = torch.from_numpy(encode(x, scales))
    exact = np.einsum("td,cnd->ntc", query, x).max(axis=2).sum(axis=1)
    got = late_interaction_int8(query, codes, scales)
    assert got.shape == exact.shape
    assert np.abs(got - exact).max() < 0.02 * len(query)  # a few thousandths per token
    assert np.corrcoef(got, exact)[0, 1] > 0.999
    top = set(np.argsort(-exact)[:100].tolist())
    assert len(top & set(np.argsort(-got)[:100].tolist())) >= 95


def test_a_float_snapshot_of_an_older_version_is_still_read(tmp_path: Path) -> None:
    """A version-1 snapshot (bfloat16 or float32, no scales) opens as before; the next save writes the current format."""
    rng = np.random.default_rng(3)
    summaries = np.transpose(_summaries(300), (1, 0, 2))
    snap = new_snapshot(tmp_path / "fs")  # what a version-1 save wrote: bfloat16 centroid-major slabs, no scales
    slabs = torch.from_numpy(np.ascontiguousarray(np.transpose(summaries, (1, 0, 2)))).to(torch.bfloat16)
    slabs.view(torch.int16).numpy().tofile(snap / "fine.bin")
    publish_snapshot(snap, [f"d{i}" for i in range(300)], {"version": 1, "dtype": "bfloat16", "n_centroids": 16,
                                                          "dim": DIM}, None)
    old = CentroidIndex(16, DIM)
    assert old.load(tmp_path / "fs") is not None and len(old) == 300
    query = _unit(summaries[7, :5] + 0.05 * rng.standard_normal((5, DIM)))
    assert old.top(query, 1) == ["d7"]
    old.save(tmp_path / "fs")
    meta = json.loads(next((tmp_path / "fs").glob("snap-*/meta.json")).read_text())
    assert meta["version"] == candidates._SNAPSHOT_VERSION and meta["dtype"] == "int8" and len(meta["fine_scales"]) == DIM
    again = CentroidIndex(16, DIM)
    assert again.load(tmp_path / "fs") is not None
    assert again._segments[0].fine.dtype == np.int8
    assert again.top(query, 1) == ["d7"]


def test_int8_segment_beside_added_float_documents(tmp_path: Path) -> None:
    """Documents added after opening an int8 snapshot are scored in float beside it, on one scale."""
    rng = np.random.default_rng(5)
    summaries = np.transpose(_summaries(200), (1, 0, 2))
    index = CentroidIndex(16, DIM)
    index.add_block([f"d{i}" for i in range(200)], summaries)
    index.save(tmp_path / "fs")
    query = _unit(rng.standard_normal((6, DIM)))
    planted = _unit(query[rng.integers(0, 6, 16)] + 0.01 * rng.standard_normal((16, DIM)))
    index.add_block(["planted", "d3"], np.stack([planted, summaries[3]]))  # a new one, and a mapped one replaced
    order = index.top(query, 201)
    assert len(index._segments) == 2 and index._segments[1].scales is None and index._segments[0].scales is not None
    assert len(order) == 201 and order.count("d3") == 1
    fine = index._score(query, None)  # every slot: the 200 mapped (int8), then the 2 added (float)
    exact = np.einsum("td,ncd->ntc", query, np.concatenate([summaries, planted[None], summaries[3:4]])).max(2).sum(1)
    assert fine.shape == (202,) and np.abs(fine - exact).max() < 0.02 * len(query)
    assert index.top(query, 1) == ["planted"]


@pytest.mark.parametrize("dtype", [torch.int8, torch.float32])
def test_take_rows_copies_the_rows_advanced_indexing_would(dtype: torch.dtype) -> None:
    """numpy's row copies: the rows torch's advanced indexing gives."""
    mat = (torch.randn(3, 50, 8) * 40).to(dtype)
    rows = np.array([0, 4, 5, 31, 49], dtype=np.int64)
    got = summary_codes.take_rows(mat, rows)
    assert got.dtype == dtype and torch.equal(got, mat[:, torch.from_numpy(rows)])
    assert torch.equal(summary_codes.take_rows(mat[1], rows, axis=0), mat[1, torch.from_numpy(rows)])
    before = mat.clone()
    got.fill_(1)
    assert torch.equal(mat, before)  # a copy, not a view
