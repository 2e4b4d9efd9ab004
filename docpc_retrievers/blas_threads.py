"""Thread budgets: numpy's BLAS held to one thread around short products that run beside other work, and
torch's intra-op threads during indexing on a 2-core machine.

OpenBLAS threads spin after each call and fight torch's OpenMP threads (and
each other, when several threads each run small products) for the cores:
on the 2-core machine that made search 1.25x slower, and pooling a 70-vector
image 13.6 ms instead of 3. The limit is process-wide, so it is counted: the
first thread in sets it, the last one out restores it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["indexing_threads", "single_blas_thread"]

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
            _STATE["limit"] = _numpy_blas(_STATE["controller"]).limit(limits=1)
        _STATE["inside"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["inside"] -= 1
            if _STATE["inside"] == 0:
                _STATE["limit"].restore_original_limits()
                _STATE["limit"] = None


def _numpy_blas(controller: Any) -> Any:
    """The BLAS libraries to limit: every one loaded but faiss's own.

    faiss's wheel bundles an OpenMP OpenBLAS, and limiting it limits faiss's OpenMP
    threads with it: the token stage's scans then ran on one core (a 26-token query's
    token search at 100,000 documents, 8 probes: 35 ms on one thread, 18.5 ms on two).
    """
    blas = controller.select(user_api="blas")
    return blas.select(filepath=[lib.filepath for lib in blas.lib_controllers if "faiss" not in lib.filepath])


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
