"""Product kernels for scoring: of several ways to compute the same products, the one this CPU runs fastest.

Which kernel wins depends on the CPU and the torch build, so it is measured
once per process (:func:`fastest`), never assumed. The int8 products of stored
rows with an int8-rounded query have two exact kernels: oneDNN's quantized
linear layer (``torch.ops.onednn.qlinear_pointwise``, AMX or VNNI tiles on
x86) and ``torch._int_mm``. On the 2-core benchmark machine (AVX-512 VNNI and
AMX), 389,120 rows in chunks of 32k by 25 tokens took 3.5 ms through oneDNN
against 5.7-9.1 ms through ``_int_mm`` (50 tokens: 5.3-5.6 against 11.4-12.7).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["fastest", "int8_kernel", "int8_products_exact", "onednn_int8_available"]

logger = logging.getLogger(__name__)


def fastest(runs: Mapping[Any, Callable[[], object]], repeats: int = 3) -> Any:
    """The key of the quickest of ``runs`` (each warmed up once, then timed ``repeats`` times).

    A run that raises RuntimeError (an operation this build lacks) is left out; at least one must work.
    """
    timings = {}
    for key, run in runs.items():
        try:
            run()
        except RuntimeError:
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
    """The quicker of the two exact int8 kernels on this CPU (measured once; oneDNN only where it agrees exactly)."""
    global _KERNEL
    if _KERNEL is None:
        import torch

        gen = torch.Generator().manual_seed(0)
        rows = torch.randint(-127, 128, (65_536, 128), dtype=torch.int8, generator=gen)
        query = torch.randint(-127, 128, (24, 128), dtype=torch.int8, generator=gen).numpy()
        kernels: dict[Any, Callable[[], object]] = {_int_mm: lambda: _int_mm(rows, query)}
        if onednn_int8_available():
            kernels[_onednn] = lambda: _onednn(rows, query)
        _KERNEL = fastest(kernels, repeats=5)
        logger.debug("int8 products through %s", _KERNEL.__name__)
    return _KERNEL


_ONEDNN_OK: bool | None = None


def onednn_int8_available() -> bool:
    """Whether this torch build has oneDNN's int8 linear layer and it agrees exactly with ``torch._int_mm`` (checked once)."""
    global _ONEDNN_OK
    if _ONEDNN_OK is None:
        import torch

        gen = torch.Generator().manual_seed(1)
        rows = torch.randint(-127, 128, (4096, 128), dtype=torch.int8, generator=gen)
        query = torch.randint(-127, 128, (24, 128), dtype=torch.int8, generator=gen).numpy()
        try:
            _ONEDNN_OK = torch.equal(_onednn(rows, query).to(torch.int64), _int_mm(rows, query).to(torch.int64))
        except (RuntimeError, AttributeError, TypeError) as exc:  # no oneDNN int8 in this build
            logger.debug("oneDNN int8 products unavailable: %s", exc)
            _ONEDNN_OK = False
    return _ONEDNN_OK


def int8_products_exact(rows: Any, q8: np.ndarray) -> Any:
    """Exact integer products ``[N, T]`` (int32 or float32 torch) of int8 rows ``[N, dim]`` with int8 tokens ``[T, dim]``."""
    if q8.shape[1] > _FLOAT_EXACT_DIM:  # float32 sums would round: integers only
        return _int_mm(rows, q8)
    return int8_kernel()(rows, q8)
