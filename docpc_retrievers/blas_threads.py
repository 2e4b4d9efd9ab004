"""Thread budgets: numpy's BLAS held to one thread around short products that run beside other work,
torch's intra-op threads during indexing on a 2-core machine, and one OpenMP thread for each thread of the
search's approximate pass (store/search/exact.py).

OpenBLAS threads spin after each call and fight torch's OpenMP threads (and
each other, when several threads each run small products) for the cores:
on the 2-core machine that made search 1.25x slower, and pooling a 70-vector
image 13.6 ms instead of 3. The limit is process-wide, so it is counted: the
first thread in sets it, the last one out restores it.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["indexing_threads", "one_openmp_thread", "openmp_pinning_works", "single_blas_thread"]

#: Machines with at most this many cores encode with one torch thread while indexing (see :func:`indexing_threads`).
SMALL_MACHINE_CORES = 2

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"controller": None, "modules": 0, "limit": None, "inside": 0}


@contextmanager
def single_blas_thread() -> Iterator[None]:
    """Run the block with numpy's BLAS on one thread (nested and concurrent uses are counted)."""
    with _LOCK:
        if _STATE["inside"] == 0:
            if _STATE["controller"] is None or _STATE["modules"] != len(sys.modules):
                # Libraries loaded since (an import that brings its own BLAS) are limited too: the controller lists
                # what was loaded when it was made, and making one costs about 0.5 ms, so only after new imports.
                from threadpoolctl import ThreadpoolController

                _STATE["controller"] = ThreadpoolController()
                _STATE["modules"] = len(sys.modules)
            _STATE["limit"] = _STATE["controller"].select(user_api="blas").limit(limits=1)
        _STATE["inside"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["inside"] -= 1
            if _STATE["inside"] == 0:
                _STATE["limit"].restore_original_limits()
                _STATE["limit"] = None


@functools.lru_cache(maxsize=1)
def _openmp_setter() -> Any:
    """OpenMP's ``omp_set_num_threads`` as loaded by torch (its own copy first: other libraries may bring another),
    or None."""
    import ctypes

    import torch

    for lib in [*sorted((Path(torch.__file__).parent / "lib").glob("lib*omp*.so*")), None]:
        try:
            setter = getattr(ctypes.CDLL(None if lib is None else str(lib)), "omp_set_num_threads", None)
        except OSError:
            continue
        if setter is not None:
            return setter
    return None


def one_openmp_thread() -> None:
    """Pin the calling thread's torch products to one OpenMP thread, for this thread alone (a pool initializer).

    Not ``torch.set_num_threads(1)``: that also changes torch's process default, which a thread that has not
    multiplied yet (the searching thread, when its first search is filtered) then takes for good (tried:
    usual p50 at 100k went from 65 to 93 ms). torch's own per-thread setup runs first, or it would undo this.
    """
    import torch

    torch.get_num_threads()
    setter = _openmp_setter()
    if setter is not None:
        setter(1)


def openmp_pinning_works() -> bool:
    """Whether a thread pinned by :func:`one_openmp_thread` does run torch on one thread (checked on a probe)."""
    import torch

    seen: list[int] = []
    probe = threading.Thread(target=lambda: (one_openmp_thread(), seen.append(torch.get_num_threads())))
    probe.start()
    probe.join()
    return seen == [1]


@contextmanager
def indexing_threads() -> Iterator[None]:
    """Thread budget of an indexing run: BLAS on one thread; on a machine of 2 cores or fewer, torch on one too.

    Beside a render worker, the preview and commit threads, torch's second
    OpenMP thread spins for a core that is busy: 150 manuals on 2 cores took
    11.3 s of encoding with two torch threads and 3.4 s with one (13.1 s against 10.2 s in all).
    """
    import os

    with single_blas_thread():
        if (os.cpu_count() or 1) > SMALL_MACHINE_CORES:
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)
