"""Exact scoring of candidates: MaxSim straight from int8 rows, per part, aggregated per document.

The approximate pass that shortlists many candidates runs in blocks on a few threads (:func:`approximate_scores`):
it is bound by copying each candidate's rows out of the mapped cache (48 KB a grid), which one core does at about
6 GB/s, and the copies and int8 products release the GIL. Each of its threads multiplies on one OpenMP thread.
Whether the threads pay is timed once per machine (store/shortlist_threads.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from docpc_retrievers.scoring.maxsim import maxsim_int8
from docpc_retrievers.store.search.backend import VectorSource
from docpc_retrievers.store.shortlist_threads import shortlist_pool

__all__ = ["AGGREGATORS", "approximate_scores", "exact_scores"]

AGGREGATORS = {"max": np.max, "mean": np.mean, "sum": np.sum}
"""How a multi-part record's part scores make its score: MaxP, AvgP, SumP."""
def approximate_scores(query: np.ndarray, ids: Sequence[str], source: VectorSource, aggregate: str = "max", *,
                       block: int = 256, threads: int = 2) -> tuple[list[str], np.ndarray]:
    """The documents of ``ids`` still stored and their approximate scores (:func:`exact_scores` with ``fast``), in
    blocks of ``block`` candidates on a shared pool of threads when ``threads`` > 1 (each multiplying on one OpenMP
    thread: the blocks are the parallelism)."""
    blocks = [ids[s : s + block] for s in range(0, len(ids), block)]
    if not blocks:
        return [], np.zeros(0, dtype=np.float32)

    def scored(block: Sequence[str]) -> tuple[list[str], np.ndarray]:
        kept, scores, _ = exact_scores(query, block, source, aggregate, fast=True)
        return kept, scores

    pool = None if len(blocks) == 1 or threads == 1 else shortlist_pool()
    done = list(map(scored, blocks) if pool is None else pool.map(scored, blocks))
    return [d for kept, _ in done for d in kept], np.concatenate([scores for _, scores in done])


def exact_scores(
    query: np.ndarray, ids: Sequence[str], source: VectorSource, aggregate: str = "max", *, fast: bool = False
) -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    """The documents of ``ids`` still stored, their scores for ``query [t, dim]`` and each one's part scores.

    A document whose vectors are gone (deleted by another writer since the first stage) is left out, as
    ``source.rows`` leaves it out (the store's one convention for a vanished document, store/reader.py).
    ``fast``: approximate products (the query rounded to int8 per token, relative error about 1e-3), to shortlist
    before the exact pass.
    """
    kept, sizes, rows, scales = source.rows(ids)
    if not kept:
        return [], np.zeros(0, dtype=np.float32), []
    lengths: list[int] = sizes
    counts: list[int] = []
    splits = [source.parts(doc_id) for doc_id in kept]
    if any(splits):  # multi-part records (page mode): each part is scored on its own
        lengths = []
        for split, n in zip(splits, sizes):
            lengths.extend(split or (n,))
            counts.append(len(split or (n,)))
    flat = maxsim_int8(query, rows, scales, lengths, approximate=fast)
    if len(lengths) == len(kept):  # one part each: the part score is the document score
        scores, per_part = flat.astype(np.float32, copy=False), [flat[i : i + 1] for i in range(len(kept))]
    else:
        per_part = np.split(flat, np.cumsum(counts)[:-1])
        reduce = AGGREGATORS[aggregate]
        scores = np.array([reduce(p) for p in per_part], dtype=np.float32)
    return list(kept), scores, list(per_part)
