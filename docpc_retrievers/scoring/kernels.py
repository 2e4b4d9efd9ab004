"""Product kernels for scoring: of several ways to compute the same products, the one this CPU runs fastest.

Which kernel wins depends on the CPU and the torch build, so it is measured
once per process (:func:`fastest`), never assumed. The int8 products of stored
rows with an int8-rounded query have two exact kernels: oneDNN's quantized
linear layer (``torch.ops.onednn.qlinear_pointwise``, AMX or VNNI tiles on
x86) and ``torch._int_mm``. On the 2-core benchmark machine (AVX-512 VNNI and
AMX), 389,120 rows in chunks of 32k by 25 tokens took 3.5 ms through oneDNN
against 5.7-9.1 ms through ``_int_mm`` (50 tokens: 5.3-5.6 against 11.4-12.7).

On CPUs without VNNI (AVX2 only, such as AMD Zen 2/3), oneDNN multiplies pairs of bytes into 16-bit sums that
saturate unless the weight (the query) stays within +-64, and ``_int_mm`` has no fast kernel at all (149 ms for
65,536 rows x 24 tokens against 6.2 ms through oneDNN on a 2-core AMD EPYC). There queries are rounded to 7 bits
(:func:`query_peak`) and oneDNN stays exact.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["fastest", "int8_kernel", "int8_products_exact", "onednn_exact_peak", "onednn_int8_available", "query_peak"]

logger = logging.getLogger(__name__)


CLEARLY_SLOWER = 4.0
"""How many times slower than the best timed run a warm-up must be for :func:`fastest` to skip timing it."""


def fastest(runs: Mapping[Any, Callable[[], object]], repeats: int = 3) -> Any:
    """The key of the quickest of ``runs`` (each warmed up once, then timed ``repeats`` times).

    A run that raises RuntimeError (an operation this build lacks) is left out; at least one must work. A run
    whose warm-up alone took :data:`CLEARLY_SLOWER` times the best timed so far is not timed again (``torch._int_mm``
    without VNNI: 0.2 s a run, which five more runs would add to a reader's first query).
    """
    timings: dict[Any, float] = {}
    for key, run in runs.items():
        start = time.perf_counter()
        try:
            run()
        except RuntimeError:
            continue
        warm_up = time.perf_counter() - start
        if timings and warm_up > CLEARLY_SLOWER * min(timings.values()):
            timings[key] = warm_up
            continue
        best = float("inf")
        for _ in range(repeats):  # the best run: a moment of another process's load does not decide
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        timings[key] = best
    return min(timings, key=timings.__getitem__)


def _int_mm(rows: Any, q8: np.ndarray) -> Any:
    """``rows [N, dim] int8 @ q8 [T, dim].T`` in int32 through ``torch._int_mm`` (it wants a multiple of 8 columns)."""
    import torch

    width = -(-q8.shape[0] // 8) * 8
    padded = np.zeros((width, q8.shape[1]), dtype=np.int8)
    padded[: q8.shape[0]] = q8
    return torch._int_mm(rows, torch.from_numpy(padded).T.contiguous())[:, : q8.shape[0]]


def _onednn(rows: Any, q8: np.ndarray) -> Any:
    """The same products in float32 (exact: every sum is an integer below 2**24 for dim <= 1,040) through oneDNN.

    The query is the layer's weight (packed once per call, about 0.2 ms) and the rows its int8 input.
    """
    import torch

    t = q8.shape[0]
    global _PACKED
    key = (q8.shape, q8.tobytes())
    packed = _PACKED  # read once: another thread may replace it meanwhile
    if packed is None or packed[0] != key:  # a search multiplies one query by many chunks of rows: pack it once
        packed = _PACKED = (key, torch.ops.onednn.qlinear_prepack(torch.from_numpy(np.ascontiguousarray(q8)), None))
    weight = packed[1]
    return torch.ops.onednn.qlinear_pointwise(
        rows, 1.0, 0, weight, torch.ones(t), torch.zeros(t, dtype=torch.int64), None, 1.0, 0, torch.float32,
        "none", [], "",
    )


_PACKED: tuple[tuple[tuple[int, ...], bytes], Any] | None = None
"""The last query packed for oneDNN: its bytes and shape, and the packed weight."""
_FLOAT_EXACT_DIM = 1024
"""Widest vectors whose int8 products sum exactly in float32 (127 * 127 * 1,040 < 2**24)."""
_KERNEL: Callable[[Any, np.ndarray], Any] | None = None


def int8_kernel() -> Callable[[Any, np.ndarray], Any]:
    """The quicker of the two exact int8 kernels on this CPU (measured once, with queries within :func:`query_peak`'s
    range for oneDNN; oneDNN only where it is exact there)."""
    global _KERNEL
    if _KERNEL is None:
        import torch

        gen = torch.Generator().manual_seed(0)
        rows = torch.randint(-127, 128, (65_536, 128), dtype=torch.int8, generator=gen)
        query = torch.randint(-127, 128, (24, 128), dtype=torch.int8, generator=gen).numpy()
        kernels: dict[Any, Callable[[], object]] = {}
        peak = onednn_exact_peak()
        if peak:  # first: where _int_mm is far slower, its warm-up is its only run (see fastest)
            narrow = np.clip(query, -peak, peak)
            kernels[_onednn] = lambda: _onednn(rows, narrow)
        kernels[_int_mm] = lambda: _int_mm(rows, query)
        _KERNEL = fastest(kernels, repeats=5)
        logger.debug("int8 products through %s", _KERNEL.__name__)
    return _KERNEL


_ONEDNN_PEAK: int | None = None
_PEAKS = (127, 64)
"""Query ranges tried for oneDNN's exactness: full int8 (VNNI, AMX), then 7 bits (AVX2's 16-bit pair sums hold
``2 x 255 x 64 = 32,640``: the rows enter as unsigned bytes, shifted by 128)."""


def onednn_exact_peak() -> int:
    """The widest query range (127 or 64) over which oneDNN's int8 layer agrees exactly with ``torch._int_mm`` on
    random and worst-case rows here, 0 where it has no such layer or is exact on neither (checked once)."""
    global _ONEDNN_PEAK
    if _ONEDNN_PEAK is None:
        import torch

        gen = torch.Generator().manual_seed(1)
        random_rows = torch.randint(-127, 128, (4096, 128), dtype=torch.int8, generator=gen)
        extreme = torch.full((4, 128), 127, dtype=torch.int8)
        extreme[1] = -127
        extreme[2, ::2] = -127
        extreme[3, 1::2] = -127
        rows = torch.cat([random_rows, extreme])
        signs = np.where(np.arange(128) % 2 == 0, 1, -1).astype(np.int8)
        _ONEDNN_PEAK = 0
        for peak in _PEAKS:
            query = torch.randint(-peak, peak + 1, (24, 128), dtype=torch.int8, generator=gen).numpy()
            query[:4] = np.stack([np.full(128, peak), np.full(128, -peak), peak * signs, -peak * signs]).astype(np.int8)
            try:
                exact = torch.equal(_onednn(rows, query).to(torch.int64), _int_mm(rows, query).to(torch.int64))
            except (RuntimeError, AttributeError, TypeError) as exc:  # no oneDNN int8 in this build
                logger.debug("oneDNN int8 products unavailable: %s", exc)
                break
            if exact:
                _ONEDNN_PEAK = peak
                break
    return _ONEDNN_PEAK


def onednn_int8_available() -> bool:
    """Whether this torch build has oneDNN's int8 linear layer and it is exact for queries within
    :func:`query_peak` here (checked once)."""
    return onednn_exact_peak() > 0


def query_peak() -> int:
    """The largest magnitude a query's int8 codes take: 127, or 64 where the int8 kernel in use is oneDNN's and it
    is exact only for 7-bit queries (CPUs without VNNI). Twice the rounding step of a query there, for a kernel 24x
    faster than ``torch._int_mm`` on such a CPU."""
    return onednn_exact_peak() if int8_kernel() is _onednn else 127


def int8_products_exact(rows: Any, q8: np.ndarray) -> Any:
    """Exact integer products ``[N, T]`` (int32 or float32 torch) of int8 rows ``[N, dim]`` with int8 tokens ``[T, dim]``.

    Tokens beyond the range oneDNN is exact for here go through ``torch._int_mm``.
    """
    if q8.shape[1] > _FLOAT_EXACT_DIM:  # float32 sums would round: integers only
        return _int_mm(rows, q8)
    kernel = int8_kernel()
    if kernel is _onednn and q8.size and int(np.abs(q8.astype(np.int16)).max()) > onednn_exact_peak():
        return _int_mm(rows, q8)
    return kernel(rows, q8)
