"""Token pooling before storage: fewer vectors per document, the clusters of colpali-engine's hierarchical pooler.

Pool factor f keeps about ``n / f`` vectors (cluster means of similar tokens,
re-normalised). colpali-engine reports that factor 3 keeps 97.8% of NDCG@5
on ViDoRe; the quality cost on your documents can only be measured on them.
Each pooled vector also gets an *anchor*: the index of its member token most
similar to it, so evidence maps can still place it on the grid.

The clusters are those of colpali-engine's ``HierarchicalTokenPooler``: Ward
linkage (scipy) over the rows of ``1 - X Xᵀ`` taken as points, cut into
``n // f`` clusters. That pooler hands scipy the ``n x n`` matrix, so scipy
measures distances between rows of ``n`` values (60-90 ms for 760 tokens on
one core). Those rows span only ``dim`` dimensions: ``|s_i - s_j|² =
q_i + q_j - 2 (X G Xᵀ)_ij`` with ``G = XᵀX`` and ``q`` the diagonal, one
``n x n x dim`` product in float64 (a few ms). Ward linkage and the cut are
scipy's, unchanged; tests check the clusters against the pooler itself.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from docpc_retrievers.blas_threads import single_blas_thread

__all__ = ["pool_vectors", "ward_labels"]


@lru_cache(maxsize=8)
def _upper(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Strict upper triangle in scipy's condensed order: rows, columns, and flat positions in an ``[n, n]`` array."""
    rows, cols = np.triu_indices(n, 1)
    return rows, cols, rows * n + cols


def _gram_root(x: np.ndarray) -> np.ndarray:
    """``Y [n, dim]`` with ``Y Yᵀ = X (XᵀX) Xᵀ``: the similarity rows' dot products in ``dim`` columns."""
    gram = x.T @ x
    try:
        return x @ np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:  # fewer independent rows than dimensions
        values, vectors = np.linalg.eigh(gram)
        return x @ (vectors * np.sqrt(np.maximum(values, 0.0)))


def ward_labels(x: np.ndarray, n_clusters: int) -> np.ndarray:
    """Cluster of each row of ``x [n, dim]`` (0-based, ``[n]`` int): Ward linkage over the rows of ``1 - X Xᵀ``.

    The same clusters as colpali-engine's ``HierarchicalTokenPooler`` with
    ``max_clusters = n_clusters`` (fewer when rows coincide).
    """
    from scipy.cluster.hierarchy import fcluster, linkage

    y = _gram_root(np.asarray(x, dtype=np.float64))
    rows, cols, flat = _upper(y.shape[0])
    # numpy's product, not scipy's BLAS: scipy's own OpenBLAS copy is outside the one-thread limit, and its
    # spinning threads slowed the encoder beside it 3x while indexing.
    dots = (y @ y.T).ravel()  # [n * n]
    norms = np.einsum("ij,ij->i", y, y)
    d2 = np.take(dots, flat)
    d2 *= -2.0
    d2 += np.take(norms, rows)
    d2 += np.take(norms, cols)
    np.sqrt(np.maximum(d2, 0.0, out=d2), out=d2)
    tree = linkage(d2, method="ward")
    return fcluster(tree, t=n_clusters, criterion="maxclust").astype(np.int64) - 1


def pool_vectors(vectors: np.ndarray, pool_factor: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``[n, dim]`` -> (pooled ``[m, dim]`` unit rows, anchors ``[m]`` uint16); factor 1 (or n < 2) returns the input and None.

    Pooled rows come in cluster order; each is its members' mean, re-normalised.
    """
    x = np.asarray(vectors, dtype=np.float32)
    if pool_factor < 1:
        raise ValueError(f"pool_factor must be >= 1, got {pool_factor}")
    if pool_factor == 1 or x.shape[0] < 2:
        return x, None
    with single_blas_thread():  # images are pooled on several threads at once: small products, one thread each
        labels = ward_labels(x, max(x.shape[0] // pool_factor, 1))
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels)
    present = np.flatnonzero(counts)  # fcluster may leave an id unused
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[present]
    sums = np.add.reduceat(x[order], starts, axis=0)
    centres = sums / counts[present][:, None]
    centres /= np.maximum(np.linalg.norm(centres, axis=1, keepdims=True), 1e-12)
    slot = np.zeros(counts.shape[0], dtype=np.int64)
    slot[present] = np.arange(present.shape[0])
    fit = np.round(np.einsum("ij,ij->i", x, centres[slot[labels]]), 6)  # a 2-token cluster fits both members equally
    best = np.lexsort((np.arange(x.shape[0]), -fit, labels))  # by cluster, best fit first, first index on ties
    first = np.concatenate(([True], labels[best][1:] != labels[best][:-1]))
    anchors = best[first]
    return centres.astype(np.float32), anchors.astype(np.uint16)
