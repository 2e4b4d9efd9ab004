"""The approximate pass's threads: a pool shared by every store of the process, used where it pays.

Each of its threads multiplies on one OpenMP thread (the blocks are the parallelism). Whether the threads pay is
timed once per machine (:mod:`docpc_retrievers.machine.choices`): they are kept unless one thread is clearly faster,
as it can be where the cores are few or shared. ``DOCPC_SHORTLIST_THREADS=threads|one`` forces it.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from docpc_retrievers.blas_threads import one_openmp_thread, openmp_pinning_works
from docpc_retrievers.machine.choices import Choice, timed_choice
from docpc_retrievers.machine.cpu import this_cpu
from docpc_retrievers.scoring.maxsim import maxsim_int8

__all__ = ["THREADS_ENV", "limit_search_threads", "search_thread_limit", "shortlist_pool", "threads_choice"]


_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = max(1, min(4, this_cpu().cores))  # the cores this process may run on: taskset narrows them
_POOL_LOCK = threading.Lock()
_LIMIT: int | None = None
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


def shortlist_pool() -> ThreadPoolExecutor | None:
    """The pool where threads pay here, else None (and always None with one thread: :func:`limit_search_threads`)."""
    if _POOL_SIZE == 1:
        return None
    return _started_pool() if threads_choice().choice == "threads" else None


def search_thread_limit() -> int | None:
    """The limit :func:`limit_search_threads` set in this process (None: every core it may run on)."""
    return _LIMIT


def limit_search_threads(threads: int) -> None:
    """Search with at most ``threads`` threads in this process: torch's intra-op threads (the exact scoring), numpy's
    BLAS and the approximate pass's pool. For several processes on one machine's cores (shard searchers): OpenMP
    threads spin while they wait, so four searchers of two threads each on two cores answered four parallel requests
    in 3.7x the time they took with one thread each."""
    global _POOL, _POOL_SIZE, _LIMIT
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    from threadpoolctl import threadpool_limits

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    else:  # torch reads it when a search first imports it: a searcher that has not searched does not load it
        os.environ["OMP_NUM_THREADS"] = str(threads)
    threadpool_limits(threads)  # numpy's BLAS too, for the products outside torch
    _LIMIT = threads
    with _POOL_LOCK:
        _POOL_SIZE = max(1, min(4, threads))
        if _POOL is not None:
            _POOL.shutdown(wait=False)
            _POOL = None


def _forget_pool() -> None:
    """A forked child has none of its parent's threads: it starts its own pool when it searches."""
    global _POOL
    _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
