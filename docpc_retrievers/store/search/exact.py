"""Exact scoring of candidates: MaxSim straight from int8 rows, per part, aggregated per document.

The approximate pass that shortlists many candidates runs in blocks on a few threads (:func:`approximate_scores`):
it is bound by copying each candidate's rows out of the mapped cache (48 KB a grid), which one core does at about
6 GB/s, and the copies and int8 products release the GIL. Each of its threads multiplies on one OpenMP thread.
Whether the threads pay is timed once per machine (:func:`threads_pay`): they are kept unless one thread is
clearly faster, as it can be where the cores are few or shared.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from docpc_retrievers.blas_threads import one_openmp_thread, openmp_pinning_works
from docpc_retrievers.machine.choices import Choice, timed_choice
from docpc_retrievers.scoring.maxsim import maxsim_int8
from docpc_retrievers.store.search.backend import VectorSource

__all__ = ["AGGREGATORS", "THREADS_ENV", "approximate_scores", "exact_scores", "threads_choice"]

AGGREGATORS = {"max": np.max, "mean": np.mean, "sum": np.sum}
"""How a multi-part record's part scores make its score: MaxP, AvgP, SumP."""
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = max(1, min(4, os.cpu_count() or 1))
_POOL_LOCK = threading.Lock()
_PINNABLE: bool | None = None
THREADS_ENV = "DOCPC_SHORTLIST_THREADS"
"""Forces the approximate pass's threading: ``threads`` or ``one``."""
THREADS_MARGIN = 1.25
"""The threads are kept unless one thread is this many times faster on the timed problem."""


def _started_pool() -> ThreadPoolExecutor | None:
    """The approximate pass's threads, started on first use and shared by every store of the process; None where
    their products cannot be pinned to one OpenMP thread each (two threads of several would only compete)."""
    global _POOL, _PINNABLE
    with _POOL_LOCK:
        if _PINNABLE is None:
            _PINNABLE = openmp_pinning_works()
        if _POOL is None and _PINNABLE:
            _POOL = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="docpc-shortlist",
                                       initializer=one_openmp_thread)
        return _POOL


def _thread_runs() -> dict[str, object]:
    """The approximate pass's work on a fixed problem (16 blocks of 64 documents x 48 int8 rows, a 32-token query),
    on the pool's threads and on the calling thread alone."""
    from docpc_retrievers.scoring.kernels import int8_kernel_choice

    int8_kernel_choice()  # decided first: its own timing is not this one's
    rng = np.random.default_rng(3)
    lengths = [48] * 64
    blocks = [(rng.integers(-127, 128, (sum(lengths), 128)).astype(np.int8), np.full(sum(lengths), 0.01, np.float32))
              for _ in range(16)]
    query = rng.standard_normal((32, 128)).astype(np.float32)
    def one(block: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return maxsim_int8(query, block[0], block[1], lengths, approximate=True)
    pool = _started_pool()
    runs = {"one": lambda: list(map(one, blocks))}
    if pool is not None:
        runs["threads"] = lambda: list(pool.map(one, blocks))
    return runs


def threads_choice() -> Choice:
    """Whether the approximate pass runs on threads here (timed once per machine; ``one`` where the threads cannot
    be pinned to one OpenMP thread each, or one thread alone was faster)."""
    names = ["threads", "one"] if _started_pool() is not None else ["one"]
    return timed_choice("approximate pass threads", names, _thread_runs, preferred="threads",
                        margin=THREADS_MARGIN, env=THREADS_ENV)


def _pool() -> ThreadPoolExecutor | None:
    """The pool where threads pay here, else None."""
    return _started_pool() if threads_choice().choice == "threads" else None


def _forget_pool() -> None:
    """A forked child has none of its parent's threads: it starts its own pool when it searches."""
    global _POOL
    _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def approximate_scores(query: np.ndarray, ids: Sequence[str], source: VectorSource, aggregate: str = "max", *,
                       block: int = 256, threads: int = 2) -> np.ndarray:
    """Approximate scores ``[len(ids)]`` (:func:`exact_scores` with ``fast``; ``-inf``: deleted meanwhile), in
    blocks of ``block`` candidates on a shared pool of threads when ``threads`` > 1 (each multiplying on one OpenMP
    thread: the blocks are the parallelism)."""
    blocks = [ids[s : s + block] for s in range(0, len(ids), block)]
    if not blocks:
        return np.zeros(0, dtype=np.float32)
    def scored(block: Sequence[str]) -> np.ndarray:
        return exact_scores(query, block, source, aggregate, fast=True)[0]

    pool = None if len(blocks) == 1 or threads == 1 else _pool()
    return np.concatenate(list(map(scored, blocks) if pool is None else pool.map(scored, blocks)))


def exact_scores(
    query: np.ndarray, ids: Sequence[str], source: VectorSource, aggregate: str = "max", *, fast: bool = False
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Scores ``[len(ids)]`` of ``query [t, dim]`` and each document's part scores.

    A document whose vectors are gone (deleted by another writer since the first
    stage) scores ``-inf`` with no parts, so a search leaves it out and fills its slot.
    ``fast``: approximate products (the query rounded to int8 per token, relative error about 1e-3), to shortlist
    before the exact pass.
    """
    kept, sizes, rows, scales = source.rows(ids)
    if not kept:
        return np.full(len(ids), -np.inf, dtype=np.float32), [np.zeros(0, np.float32) for _ in ids]
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
    if len(kept) == len(ids):
        return scores, per_part
    by_id = dict(zip(kept, zip(scores.tolist(), per_part)))
    empty = (float("-inf"), np.zeros(0, np.float32))
    return (np.array([by_id.get(i, empty)[0] for i in ids], dtype=np.float32), [by_id.get(i, empty)[1] for i in ids])
