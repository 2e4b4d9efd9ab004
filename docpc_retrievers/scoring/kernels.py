"""The int8 product kernels: oneDNN's quantized linear layer where it is exact here, else ``torch._int_mm``.

Both give the exact integer products of int8 rows with an int8-rounded query. oneDNN's layer
(``torch.ops.onednn.qlinear_pointwise``, AMX or VNNI tiles on x86) was the quicker on every CPU measured: on the
2-core benchmark machine (AVX-512 VNNI and AMX), 389,120 rows in chunks of 32k by 25 tokens took 3.5 ms against
5.7-9.1 ms through ``_int_mm``; on a 2-core AMD EPYC without VNNI, 65,536 rows x 24 tokens took 6.2 ms against 149.
So the rule is fixed, not timed at run time: oneDNN wherever it is exact, checked once per process.

On CPUs without VNNI (AVX2 only) oneDNN multiplies pairs of bytes into 16-bit sums that saturate unless the query
stays within +-64; there queries are rounded to 7 bits (:func:`query_peak`) and oneDNN stays exact.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["int8_kernel", "int8_products_exact", "onednn_exact_peak", "onednn_int8_available", "query_peak"]

logger = logging.getLogger(__name__)


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


def int8_kernel() -> Callable[[Any, np.ndarray], Any]:
    """The kernel in use: oneDNN where it is exact here (for queries within :func:`query_peak`), else ``_int_mm``."""
    return _onednn if onednn_exact_peak() else _int_mm


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
    return onednn_exact_peak() or 127


def int8_products_exact(rows: Any, q8: np.ndarray) -> Any:
    """Exact integer products ``[N, T]`` (int32 or float32 torch) of int8 rows ``[N, dim]`` with int8 tokens ``[T, dim]``.

    Tokens beyond the range oneDNN is exact for here go through ``torch._int_mm``.
    """
    if q8.shape[1] > _FLOAT_EXACT_DIM:  # float32 sums would round: integers only
        return _int_mm(rows, q8)
    peak = onednn_exact_peak()
    if not peak or (q8.size and int(np.abs(q8.astype(np.int16)).max()) > peak):
        return _int_mm(rows, q8)
    return _onednn(rows, q8)
