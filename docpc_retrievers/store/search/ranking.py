"""Exact MaxSim for a set of candidates, cheaply: an approximate int8 pass keeps a shortlist, float32 ranks it.

Every backend ends here. The approximate pass multiplies the query (rounded to int8 per token) with the stored
int8 rows; it errs by about 1e-3 of a score, so its best ``shortlist`` hold the exact best ``k`` and the float32
pass over them returns exact scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from docpc_retrievers.blas_threads import single_blas_thread
from docpc_retrievers.store.search.backend import Scored, VectorSource
from docpc_retrievers.store.search.config import SearchConfig
from docpc_retrievers.store.search.exact import approximate_scores, exact_scores

__all__ = ["ranked"]

_CHUNK = 1024
"""Candidates per exact product (bounds memory when every document is scored exactly)."""


def ranked(query: np.ndarray, ids: Sequence[str], source: VectorSource, k: int, config: SearchConfig, *,
           aggregate: str = "max", exact: bool = False) -> list[Scored]:
    """The exact best ``k`` of ``ids`` for ``query [t, dim]``, best first (ties by id); documents deleted meanwhile
    are left out. ``exact``: no approximate pass, every candidate scored in float32 (the truth, slow)."""
    cand = list(ids)
    keep = max(config.shortlist, 4 * k)
    with single_blas_thread():
        if not exact and len(cand) > keep:
            kept, fast = approximate_scores(query, cand, source, aggregate, block=config.block, threads=config.threads)
            cand = _shortlist(kept, fast, keep)
        best: list[Scored] = []
        for start in range(0, len(cand), _CHUNK):
            kept, scores, per_part = exact_scores(query, cand[start : start + _CHUNK], source, aggregate)
            best.extend(Scored(d, float(s), tuple(float(v) for v in p))
                        for s, d, p in zip(scores.tolist(), kept, per_part))
            best = sorted(best, key=lambda h: (-h.score, h.id))[:k]
    return best


def _shortlist(ids: list[str], scores: np.ndarray, keep: int) -> list[str]:
    """The best ``keep`` of ``ids`` by approximate score, ties at the cut broken by id as the final ranking breaks
    them: documents with the same rows (overlapping windows, copies) score the same, and which of them survive must
    not depend on the order the first stage listed them in, or a store's answer would depend on how it was searched
    (summaries, a scan, shards merged)."""
    order = np.argsort(-scores, kind="stable")
    if len(order) <= keep:
        return [ids[i] for i in order]
    edge = scores[order[keep - 1]]
    above = [ids[i] for i in order[: int(np.count_nonzero(scores > edge))]]
    tied = sorted(ids[i] for i in np.flatnonzero(scores == edge))
    return above + tied[: keep - len(above)]
