"""The centroid first stage: a few centroids per document, scored by late interaction from a memory map.

Exhaustive MaxSim over 10k documents of ~760 vectors takes seconds on two cores, so search runs in two stages. Each
document is summarised by ``n_centroids`` unit vectors (spherical k-means over its own vectors, computed once at
insert). The first stage scores a query against those summaries with the same late-interaction form, ``sum_i max_c
<q_i, centroid_c>``, which keeps the token-level structure that mean pooling throws away; the best ``n_candidates``
documents are then scored exactly from their full vectors.

Streaming 16 centroids of every document costs about 49 ms per 25-token query at 100,000 documents on two cores and
ten times that at 1M. Indexes larger than ``FULL_SCAN_MAX`` therefore score a coarser summary first (each document's
centroids merged to ``COARSE_WIDTH``, 4x fewer rows) and only a shortlist with the full 16.

The summaries are saved in the local cache as raw files and opened as a memory map: a reader opens in the time it
takes to read the id list, and its resident memory holds the pages the OS page cache holds, shared by every reader of
the same cache folder. Where this CPU multiplies int8 faster, they are saved as int8 codes (summary_codes.py): half
the bytes of bfloat16.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from docpc_retrievers.store.search.base import CandidateIndex, LazyIds
from docpc_retrievers.store.search.snapshot import (
    new_snapshot,
    publish_snapshot,
    read_snapshot,
)
from docpc_retrievers.store.search.summary_codes import (
    decode,
    dimension_scales,
    encode,
    late_interaction_int8,
)
from docpc_retrievers.store.search.summary_storage import (
    NP_STORAGE,
    compute_dtype,
    dtype_name,
    int8_is_faster,
    late_interaction,
    mapped,
    storage_array,
    take_rows,
)

logger = logging.getLogger(__name__)

__all__ = ["CentroidIndex", "coarsen", "document_centroids", "merged_query", "near_tie_margin"]

COARSE_WIDTH = 4
"""Centroids per document in the coarse pass over a large index."""
SHORTLIST_MIN = 4096
"""Documents the coarse pass keeps at least (and ``SHORTLIST_PER_CANDIDATE`` per candidate asked for)."""
COARSE_QUERY_ROWS = 8
"""Rows a longer query is merged into for the coarse pass (sums of similar tokens; 0 keeps every token). The coarse
pass's cost is query rows x every document's coarse centroids, which dominates at 1M documents; the shortlist is
then ranked with every token."""
FULL_SCAN_MAX = 131_072
"""Documents (after a filter) ranked on all 16 centroids with no coarse pass. At 100,000 documents the coarse pass
cost recall on queries copied from one document (usual 1.000 -> 0.96, hard 0.98 -> 0.95, long 1.000 -> 0.98 on the
benchmark's 100k store) and the full scan takes 49 ms (documents as the long side of the product), 20 ms more than
coarse pass plus shortlist; at 1M the full scan would take 0.5 s, so larger indexes keep the coarse pass."""
SHORTLIST_PER_CANDIDATE = 8
"""Coarse-pass documents kept per candidate asked for. On topic queries at 100k the coarse pass lost almost nothing
(0.87 of the exact top 10 against 0.88 for every document's 16 centroids), on queries copied from a document it did
(see ``FULL_SCAN_MAX``); 24 and 48 per candidate cost more than scanning every document."""

NEAR_TIE_MARGIN = 0.01
"""Summary-score units per unit of a query's token spread (:func:`near_tie_margin`). Chosen on the benchmark's 100k
topic queries (50), whose summary estimates are flat: thousands of documents within 1% of the 10th. Widened by
this margin up to 4,096, the candidates held 9.94 of their exact top 10 (9.14 without; 0.005 held 9.38, 0.015
9.96), and usual, hard and long queries kept their counts. On the held-back cone generator it lifted para from 9.90
to 9.95 and left pad at 9.20: its misses lie 1-4% below the 10th (docs/store.md)."""


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


def near_tie_margin(query: np.ndarray) -> float:
    """How far below the ``rank``-th summary estimate a document may still beat it exactly, for ``query [t, dim]``.

    ``NEAR_TIE_MARGIN`` x sqrt(sum_ij max(0, cos(q_i, q_j))): the estimate errs per query token, and the errors of
    similar tokens add up rather than cancel (t independent tokens give sqrt(t), t copies of one token t).
    """
    q = np.asarray(query, dtype=np.float32)
    unit = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    return NEAR_TIE_MARGIN * float(np.sqrt(np.maximum(unit @ unit.T, 0.0).sum()))


def merged_query(query: np.ndarray, rows: int) -> np.ndarray:
    """``[t, dim]`` query tokens as at most ``[rows, dim]`` sums of similar tokens (spherical k-means; as is if t <= rows).

    Why sums: ``sum_i max_c <q_i, c>`` over a group is at least ``max_c <sum_i q_i, c>``, with equality when the
    group's tokens share their best centroid, so the merged query scores a lower bound of the late interaction
    that stays tight for the near-duplicate tokens a query spends on one topic.
    """
    q = np.asarray(query, dtype=np.float32)
    if rows <= 0 or q.shape[0] <= rows:
        return q
    assign = np.argmax(q @ document_centroids(q, rows).T, axis=1)
    sums = np.zeros((rows, q.shape[1]), dtype=np.float32)
    np.add.at(sums, assign, q)
    return sums[np.bincount(assign, minlength=rows) > 0]


def coarsen(summaries: np.ndarray, width: int, *, iterations: int = 4) -> np.ndarray:
    """Merge ``[n_docs, c, dim]`` unit centroids into ``[n_docs, width, dim]`` (batched spherical k-means, deterministic)."""
    import torch

    f = torch.from_numpy(np.ascontiguousarray(summaries, dtype=np.float32))
    c = f.shape[1]
    if width >= c:
        return f.numpy()
    merged = f[:, torch.linspace(0, c - 1, width).round().long()].clone()
    for _ in range(iterations):
        assign = torch.einsum("nkd,ncd->nkc", f, merged).argmax(dim=2)
        onehot = torch.nn.functional.one_hot(assign, width).to(f.dtype)  # [n, c, width]
        sums = torch.einsum("nkc,nkd->ncd", onehot, f)
        empty = onehot.sum(dim=1) == 0
        sums[empty] = merged[empty]
        merged = sums / sums.norm(dim=2, keepdim=True).clamp_min(1e-12)
    return merged.numpy()


class _Segment(NamedTuple):
    """Centroid-major summaries of a run of slots: fine ``[n_centroids, n, dim]``, coarse ``[coarse_width, n, dim]``.

    Float tensors in compute_dtype(), or int8 codes with their per-dimension scales (``scales``: fine's, coarse's)."""

    fine: Any
    coarse: Any
    scales: tuple[np.ndarray, np.ndarray] | None = None

    def level(self, name: str) -> tuple[Any, np.ndarray | None]:
        at = 0 if name == "fine" else 1
        return self[at], None if self.scales is None else self.scales[at]


class CentroidIndex(CandidateIndex):
    """``[n_docs, n_centroids, dim]`` centroid summaries scored by late interaction, held as torch tensors.

    The summaries live in *segments*: the one opened from the cache is a memory map of its files (pages come from
    the OS page cache, shared by every reader of the folder, and nothing is loaded at open); documents added since
    sit in a small in-memory segment until the next :meth:`save`. Documents with fewer centroids than the index
    width repeat their last centroid, which leaves their max unchanged (no zero padding).
    """

    def __init__(self, n_centroids: int, dim: int) -> None:
        self.n_centroids = n_centroids
        self.dim = dim
        self.coarse_width = min(COARSE_WIDTH, n_centroids)
        self._ids: list[str] = []
        self._slot: dict[str, int] = {}
        self._live = np.zeros(0, dtype=bool)
        self._blocks: list[np.ndarray] = []
        # Centroid-major torch tensors in compute_dtype(): fine [n_centroids, n, dim] and coarse
        # [coarse_width, n, dim] per segment. Scoring one centroid slab at a time and taking an
        # elementwise maximum runs 1.8x faster than a max over a strided centroid axis.
        self._segments: list[_Segment] = []
        self._n_mapped = 0  # leading segments opened from a snapshot: never concatenated (that would copy them)
        self._skipped: tuple[Collection[str], np.ndarray] | None = None  # the last ``skip`` asked for, as a slot mask

    def __len__(self) -> int:
        return len(self._slot)

    def _widen(self, centroids: np.ndarray) -> np.ndarray:
        c = np.asarray(centroids, dtype=np.float32)
        if c.shape[0] < self.n_centroids:
            c = np.concatenate([c, np.repeat(c[-1:], self.n_centroids - c.shape[0], axis=0)])
        return c[: self.n_centroids]

    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray]) -> None:
        """Add or replace documents' summaries (``[c_i, dim]`` each)."""
        if len(ids):
            self.add_block(ids, np.stack([self._widen(c) for c in summaries]))

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

    def ids(self) -> list[str]:
        """Live document ids, in slot order."""
        return [self._ids[i] for i in np.flatnonzero(self._live)]

    # ------------------------------------------------------------- persistence
    def save(self, folder: Path, extras: Mapping[str, np.ndarray] | None = None) -> None:
        """Write the live summaries as a snapshot under ``folder`` (see snapshot.py) and map them back."""
        self._consolidate()
        snap = new_snapshot(folder)
        rows = np.flatnonzero(self._live)
        dtype = "int8" if int8_is_faster() else dtype_name(compute_dtype())
        meta: dict[str, Any] = {"version": _SNAPSHOT_VERSION, "dtype": dtype, "n_centroids": self.n_centroids,
                                "coarse_width": self.coarse_width, "dim": self.dim}
        for level, width in (("fine", self.n_centroids), ("coarse", self.coarse_width)):
            if dtype == "int8":  # one scale per dimension, from the level's largest magnitudes (a first pass)
                peaks = np.zeros(self.dim, dtype=np.float32)
                for c in range(width if rows.size else 0):
                    peaks = np.maximum(peaks, self._gather(level, c, rows).abs().amax(dim=0).numpy())
                scales = dimension_scales(peaks)
                meta[f"{level}_scales"] = scales.tolist()
            out = np.memmap(snap / f"{level}.bin", dtype=NP_STORAGE[dtype], mode="w+", shape=(width, rows.size, self.dim))
            for c in range(width):  # one centroid slab at a time: memory stays at one slab
                slab = self._gather(level, c, rows)
                out[c] = encode(slab, scales) if dtype == "int8" else storage_array(slab.to(compute_dtype()))
            out.flush()
            del out
        publish_snapshot(snap, [self._ids[i] for i in rows], meta, extras)
        self.load(folder)

    def load(self, folder: Path) -> dict[str, np.ndarray] | None:
        """Map the saved snapshot (nothing is read until a query touches it); its extras, or None."""
        try:
            snap, meta, ids, extras = read_snapshot(folder)
            if meta.get("version") not in _READABLE or (meta["n_centroids"], meta["coarse_width"], meta["dim"]) != (
                self.n_centroids, self.coarse_width, self.dim
            ):
                return None
            n = len(ids)
            levels = [mapped(snap / f"{lv}.bin", meta["dtype"], (w, n, self.dim))
                      for lv, w in (("fine", self.n_centroids), ("coarse", self.coarse_width))]
            scales = None
            if meta["dtype"] == "int8":
                scales = tuple(np.asarray(meta[f"{lv}_scales"], dtype=np.float32) for lv in ("fine", "coarse"))
                if any(s.shape != (self.dim,) for s in scales):
                    raise ValueError("dimension scales do not match the index width")
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            logger.info("saved first stage in %s not used (%s)", folder, exc)
            return None
        self._ids, self._slot = ids, {d: i for i, d in enumerate(ids)}
        self._live = np.ones(n, dtype=bool)
        self._blocks = []
        self._segments = [_Segment(levels[0], levels[1], scales)] if n else []
        self._n_mapped = len(self._segments)
        return extras

    # ----------------------------------------------------------------- search
    def _consolidate(self) -> None:
        """Turn added blocks into one in-memory segment (the mapped one is never copied)."""
        import torch

        if not self._blocks:
            return
        dtype = compute_dtype()
        fine, coarse = [], []
        for block in self._blocks:  # bounded chunks: coarsening works in float32
            for start in range(0, len(block), 8192):
                chunk = block[start : start + 8192]
                fine.append(torch.from_numpy(chunk).to(dtype).transpose(0, 1))
                coarse.append(torch.from_numpy(coarsen(chunk, self.coarse_width)).to(dtype).transpose(0, 1))
        mapped = self._segments[: self._n_mapped]
        fine = [s.fine for s in self._segments[self._n_mapped :]] + fine
        coarse = [s.coarse for s in self._segments[self._n_mapped :]] + coarse
        self._segments = [*mapped, _Segment(torch.cat(fine, dim=1), torch.cat(coarse, dim=1))]
        self._blocks = []

    def _gather(self, level: str, c: int, rows: np.ndarray) -> Any:
        """Slab ``c`` of a level for global ``rows`` (sorted), across segments, in float32: ``[len(rows), dim]``."""
        import torch

        parts, offset = [], 0
        for seg in self._segments:
            mat, scales = seg.level(level)
            n = mat.shape[1]
            local = rows[(rows >= offset) & (rows < offset + n)] - offset
            if local.size:
                slab = take_rows(mat[c], local, axis=0)
                parts.append(slab.float() if scales is None else decode(slab, scales))
            offset += n
        return torch.cat(parts) if parts else torch.zeros((0, self.dim), dtype=torch.float32)

    def _score(self, query: np.ndarray, level: str, rows: np.ndarray | None) -> np.ndarray:
        """Late-interaction scores of ``query [t, dim]`` (float32) for ``rows`` (global slots, sorted; None: every
        slot) -> ``[len(rows)]``."""
        import torch

        out, offset = [], 0
        for seg in self._segments:
            mat, scales = seg.level(level)
            n = mat.shape[1]
            local = None if rows is None else rows[(rows >= offset) & (rows < offset + n)] - offset
            offset += n
            if local is not None and local.size == 0:
                continue
            part = mat if local is None or local.size == n else take_rows(mat, local)
            if scales is None:
                out.append(late_interaction(torch.from_numpy(np.asarray(query, dtype=np.float32)).to(mat.dtype), part))
            else:
                out.append(late_interaction_int8(query, part, scales))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None) -> list[str]:
        """Ids of the ``n`` documents with the highest approximate MaxSim for ``query [t, dim]``."""
        return self.top_widened(query, n, allowed, rank=0, most=n)

    def top_widened(
        self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int,
        skip: Collection[str] | None = None,
    ) -> list[str]:
        """The best ``n``, or up to ``most`` when more lie within :func:`near_tie_margin` of the ``rank``-th best
        estimate (``rank`` 0: exactly ``n``); over ``FULL_SCAN_MAX`` documents, a coarse pass shortlists first.
        ``skip``: ids left out (scored with the rest, then dropped: cheaper than ``allowed``'s gather)."""
        found = self._best(query, n, allowed, rank, most, skip)
        return [] if found is None else [self._ids[found[0][i]] for i in found[2]]

    def top_ranked(
        self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int, reserve: int
    ) -> tuple[list[str], Sequence[str]]:
        """:meth:`top_widened`'s ids best first, and the next ``reserve`` best in no particular order, their ids
        made only when read (a search reads them for a few queries only); both from the same estimates (over
        ``FULL_SCAN_MAX`` documents, the coarse pass's shortlist for ``n``, which is 8x ``n``)."""
        found = self._best(query, n, allowed, rank, most)
        if found is None:
            return [], []
        rows, approx, best = found
        best = best[np.argsort(-approx[best], kind="stable")]
        n, k = best.size, min(rows.size, best.size + max(0, reserve))

        def rest() -> np.ndarray:  # the best k - n of the estimates left once the best n are taken
            if k == n:
                return rows[:0]
            left = approx.copy()
            left[best] = -np.inf
            return rows[np.argpartition(-left, k - n - 1)[: k - n]]

        return [self._ids[rows[i]] for i in best], LazyIds(self._ids, rest, k - n)

    def _best(
        self, query: np.ndarray, n: int, allowed: set[str] | None, rank: int, most: int,
        skip: Collection[str] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The slots estimated (:meth:`_estimates`), their estimates, and the positions of the best ``n`` among them
        (widened to the near-ties of the ``rank``-th best, up to ``most``), in no order; None when none are live."""
        found = self._estimates(query, n, allowed, skip)
        if found is None:
            return None
        rows, approx = found
        if 0 < rank <= approx.size and most > n:  # flat estimates: keep the rank-th best's near-ties
            kth = float(np.partition(approx, approx.size - rank)[approx.size - rank])
            n = max(n, min(most, int(np.count_nonzero(approx >= kth - near_tie_margin(query)))))
        best = np.argpartition(-approx, n - 1)[:n] if n < rows.size else np.arange(rows.size)
        return rows, approx, best

    def _estimates(self, query: np.ndarray, n: int, allowed: set[str] | None,
                   skip: Collection[str] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """The live slots within ``allowed`` and not in ``skip`` worth estimating for a best ``n`` (all, or the coarse
        pass's shortlist over ``FULL_SCAN_MAX``) and their 16-centroid estimates; None when there are none."""
        self._consolidate()
        if n <= 0 or not self._slot:
            return None
        live = self._live.copy()
        if allowed is not None:
            live &= self._mask(allowed)
        if skip and (self._skipped is None or self._skipped[0] is not skip or self._skipped[1].size != live.size):
            self._skipped = (skip, self._mask(skip))  # a view's set, asked again by every query
        skipped = self._skipped[1] if skip and self._skipped is not None else None
        rows = np.flatnonzero(live)
        if rows.size == 0:
            return None
        q = np.asarray(query, dtype=np.float32)
        every = rows.size == live.size
        shortlist = max(SHORTLIST_MIN, SHORTLIST_PER_CANDIDATE * n)
        if self.coarse_width < self.n_centroids and rows.size > max(2 * shortlist, FULL_SCAN_MAX):
            approx = self._score(merged_query(q, COARSE_QUERY_ROWS), "coarse", None if every else rows)
            approx[skipped[rows] if skipped is not None else []] = -np.inf
            rows = np.sort(rows[np.argpartition(-approx, shortlist - 1)[:shortlist]])
            every = False
        approx = self._score(q, "fine", None if every else rows)
        kept = slice(None) if skipped is None else ~skipped[rows]
        return rows[kept], approx[kept]

    def _mask(self, ids: Collection[str]) -> np.ndarray:
        """``ids`` as a mask over slots."""
        mask = np.zeros(self._live.size, dtype=bool)
        mask[np.array([s for s in (self._slot.get(d) for d in ids) if s is not None], dtype=np.int64)] = True
        return mask


_SNAPSHOT_VERSION = 2
"""2: int8 codes (``dtype`` "int8", with per-dimension scales) where this CPU scores them faster; 1: float only."""
_READABLE = (1, 2)
