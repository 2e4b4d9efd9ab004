"""Token pooling: the same clusters, pooled rows and anchors as colpali-engine's HierarchicalTokenPooler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from docpc_retrievers.encoders.pooling import pool_vectors, ward_labels


def _clustered(seed: int, n: int, topics: int, noise: float, dim: int = 128) -> np.ndarray:
    """Unit rows drawn around ``topics`` centres: tokens of one page region resemble each other."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, dim))
    x = centres[rng.integers(0, topics, n)] + noise * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _reference(x: np.ndarray, factor: int) -> tuple[np.ndarray, list[np.ndarray]]:
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    out = HierarchicalTokenPooler().pool_embeddings([torch.from_numpy(x)], pool_factor=factor, return_dict=True)
    clusters = out.cluster_id_to_indices[0]
    members = [clusters[c][0].numpy() for c in sorted(clusters) if clusters[c][0].numel()]
    return out.pooled_embeddings[0].numpy(), members


@pytest.mark.parametrize(("seed", "n", "topics", "noise", "factor"),
                         [(0, 300, 30, 0.6, 2), (1, 420, 12, 1.2, 3), (2, 250, 80, 0.4, 3), (3, 333, 5, 1.5, 4)])
def test_pooling_matches_colpali_engine(seed: int, n: int, topics: int, noise: float, factor: int) -> None:
    x = _clustered(seed, n, topics, noise)
    pooled, anchors = pool_vectors(x, factor)
    ref_pooled, ref_members = _reference(x, factor)
    assert pooled.shape == ref_pooled.shape
    np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5)
    assert anchors is not None and anchors.dtype == np.uint16 and len(anchors) == len(ref_members)
    for row, (anchor, members) in enumerate(zip(anchors.tolist(), ref_members)):
        assert anchor in members  # an anchor is a member of its own cluster ...
        fits = x[members] @ pooled[row]
        assert x[anchor] @ pooled[row] >= fits.max() - 1e-5  # ... the one closest to the pooled vector


def test_ward_labels_cut_into_the_asked_number_of_clusters() -> None:
    x = _clustered(5, 200, 40, 0.8)
    labels = ward_labels(x, 50)
    assert labels.shape == (200,) and labels.min() == 0 and len(np.unique(labels)) == 50


def test_identical_rows_pool_into_one() -> None:
    row = _clustered(6, 1, 1, 0.0)
    x = np.repeat(row, 8, axis=0)
    pooled, anchors = pool_vectors(x, 2)
    assert anchors is not None and np.isfinite(pooled).all()
    np.testing.assert_allclose(pooled @ row[0], 1.0, atol=1e-5)
    assert set(anchors.tolist()) <= set(range(8))
