"""First-stage candidate generation for MaxSim: a few centroids per document, scored in memory.

Exhaustive MaxSim over 10k documents of ~760 vectors takes seconds on two
cores, so search runs in two stages. Each document is summarised by
``n_centroids`` unit vectors (spherical k-means over its own vectors, computed
once at insert). The first stage scores a query against those summaries with
the same late-interaction form, ``sum_i max_c <q_i, centroid_c>``, which keeps
the token-level structure that mean pooling throws away; the best
``n_candidates`` documents are then scored exactly from their full vectors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["CentroidIndex", "document_centroids"]


def document_centroids(vectors: np.ndarray, n_centroids: int, *, iterations: int = 4) -> np.ndarray:
    """Summarise ``[n, dim]`` vectors by ``[min(n_centroids, n), dim]`` unit centroids (deterministic)."""
    x = np.asarray(vectors, dtype=np.float32)
    n = x.shape[0]
    c = min(n_centroids, n)
    centroids = x[np.linspace(0, n - 1, c).round().astype(int)].copy()
    for _ in range(iterations):
        assign = np.argmax(x @ centroids.T, axis=1)
        onehot = np.zeros((c, n), dtype=np.float32)
        onehot[assign, np.arange(n)] = 1.0
        sums = onehot @ x
        empty = ~onehot.any(axis=1)
        sums[empty] = centroids[empty]
        centroids = sums
        norms = np.linalg.norm(centroids, axis=1, keepdims=True)
        centroids = centroids / np.maximum(norms, 1e-12)
    return centroids


_COMPUTE_DTYPE: Any = None


def compute_dtype() -> Any:
    """bfloat16 where this CPU multiplies it fast (measured once), else float32.

    Why: the first stage streams every summary each query. On CPUs with
    bfloat16 units it runs 2.3x faster than float32 at half the memory; on
    others bfloat16 is emulated and slower, so the choice is measured, not assumed.
    """
    global _COMPUTE_DTYPE
    if _COMPUTE_DTYPE is None:
        import time

        import torch

        timings = {}
        for dtype in (torch.bfloat16, torch.float32):
            m = torch.randn(65_536, 128).to(dtype)
            q = torch.randn(24, 128).to(dtype)
            q @ m.T
            start = time.perf_counter()
            for _ in range(3):
                q @ m.T
            timings[dtype] = time.perf_counter() - start
        _COMPUTE_DTYPE = min(timings, key=timings.__getitem__)
    return _COMPUTE_DTYPE


class CentroidIndex:
    """In-memory ``[n_docs, n_centroids, dim]`` summaries with id bookkeeping, held as one torch tensor.

    Documents with fewer centroids than the index width repeat their last
    centroid, which leaves their max unchanged (no zero padding).
    """

    def __init__(self, n_centroids: int, dim: int) -> None:
        self.n_centroids = n_centroids
        self.dim = dim
        self._ids: list[str] = []
        self._slot: dict[str, int] = {}
        self._blocks: list[np.ndarray] = []
        self._matrix: Any = None  # torch [n_slots, n_centroids, dim] in compute_dtype()
        self._live = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self._slot)

    def _widen(self, centroids: np.ndarray) -> np.ndarray:
        c = np.asarray(centroids, dtype=np.float32)
        if c.shape[0] < self.n_centroids:
            c = np.concatenate([c, np.repeat(c[-1:], self.n_centroids - c.shape[0], axis=0)])
        return c[: self.n_centroids]

    def add(self, ids: Sequence[str], centroids: Sequence[np.ndarray]) -> None:
        """Add or replace documents' summaries."""
        self.remove(ids)
        block = np.stack([self._widen(c) for c in centroids]) if len(ids) else None
        for doc_id in ids:
            self._slot[doc_id] = len(self._ids)
            self._ids.append(doc_id)
        if block is not None:
            self._blocks.append(block)
            self._live = np.concatenate([self._live, np.ones(len(ids), dtype=bool)])

    def add_block(self, ids: Sequence[str], summaries: np.ndarray) -> None:
        """Add many documents at once from ``[n_docs, n_centroids, dim]`` summaries (already full width)."""
        if summaries.shape[1:] != (self.n_centroids, self.dim):
            raise ValueError(f"expected [n, {self.n_centroids}, {self.dim}] summaries, got {summaries.shape}")
        self.remove(ids)
        for doc_id in ids:
            self._slot[doc_id] = len(self._ids)
            self._ids.append(doc_id)
        if len(ids):
            self._blocks.append(np.asarray(summaries, dtype=np.float32))
            self._live = np.concatenate([self._live, np.ones(len(ids), dtype=bool)])

    def remove(self, ids: Iterable[str]) -> None:
        for doc_id in ids:
            slot = self._slot.pop(doc_id, None)
            if slot is not None:
                self._live[slot] = False

    def live(self) -> tuple[list[str], list[np.ndarray]]:
        """Every live document's id and ``[n_centroids, dim]`` summary (for saving the first stage)."""
        self._consolidate()
        rows = np.flatnonzero(self._live)
        if self._matrix is None:
            return [], []
        return [self._ids[i] for i in rows], [self._matrix[int(i)].float().numpy() for i in rows]

    def _consolidate(self) -> None:
        import torch

        if self._blocks:
            new = torch.from_numpy(np.concatenate(self._blocks, axis=0)).to(compute_dtype())
            self._matrix = new if self._matrix is None else torch.cat([self._matrix, new])
            self._blocks = []
        if self._matrix is not None and len(self._ids) > 2 * max(len(self._slot), 1024):  # compact dead slots
            keep = np.flatnonzero(self._live)
            self._matrix = self._matrix[torch.from_numpy(keep)]
            self._ids = [self._ids[i] for i in keep]
            self._live = np.ones(len(self._ids), dtype=bool)
            self._slot = {d: i for i, d in enumerate(self._ids)}

    def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None) -> list[str]:
        """Ids of the ``n`` documents with the highest approximate MaxSim for ``query [t, dim]``."""
        self._consolidate()
        if n <= 0 or not self._slot:
            return []
        live = self._live.copy()
        if allowed is not None:
            mask = np.zeros_like(live)
            for doc_id in allowed:
                slot = self._slot.get(doc_id)
                if slot is not None:
                    mask[slot] = True
            live &= mask
        rows = np.flatnonzero(live)
        if rows.size == 0:
            return []
        import torch

        mat = self._matrix if rows.size == live.size else self._matrix[torch.from_numpy(rows)]
        q = torch.from_numpy(np.asarray(query, dtype=np.float32)).to(mat.dtype)
        # [t, docs * c] viewed as [t, docs, c]: the max over centroids runs along contiguous memory.
        sims = q @ mat.reshape(-1, self.dim).T
        approx = sims.view(q.shape[0], rows.size, self.n_centroids).amax(dim=2).float().sum(dim=0).numpy()
        if n < rows.size:
            best = np.argpartition(-approx, n - 1)[:n]
        else:
            best = np.arange(rows.size)
        return [self._ids[rows[i]] for i in best]
