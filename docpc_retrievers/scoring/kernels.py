"""The int8 product kernels, and which one this machine uses: timed once here, never fixed by rule.

Three kernels give the exact integer products of int8 rows with an int8-rounded query: oneDNN's quantized linear
layer (``torch.ops.onednn.qlinear_pointwise``), ``torch._int_mm``, and a float32 product of the upcast codes
(exact: every sum is an integer below 2**24 for dim <= 1,040). Their speed differs by CPU kind by two orders of
magnitude in both directions (2 cores, 389,120 rows x 128 by 25 tokens): on an Intel Sapphire Rapids (AVX-512
VNNI, AMX) oneDNN took 3.5 ms and ``_int_mm`` 5.7-9.1; on an AMD EPYC with AVX2 only 6.2 against 149; on an AMD
EPYC with AVX-512 VNNI and bfloat16, 19,643 against 92. So each is timed once per machine on a small fixed problem
(:mod:`docpc_retrievers.machine.choices`): oneDNN is kept unless another is 1.5x faster, and the choice is cached
outside any store. ``DOCPC_INT8_KERNEL=onednn|int_mm|float32`` forces one.

On CPUs without VNNI (AVX2 only) oneDNN multiplies pairs of bytes into 16-bit sums that saturate unless the query
stays within +-64; there queries are rounded to 7 bits (:func:`query_peak`) whichever kernel runs, so the
products, and hence the hits, never depend on the choice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from docpc_retrievers.machine.choices import Choice, remembered, time_runs, timed_choice

__all__ = ["KERNEL_ENV", "KERNELS", "int8_kernel", "int8_kernel_choice", "available_kernels", "int8_products_exact", "onednn_exact_peak",
           "query_peak", "time_int8_kernels"]

logger = logging.getLogger(__name__)

KERNEL_ENV = "DOCPC_INT8_KERNEL"
"""Environment variable that forces the int8 kernel (one of :data:`KERNELS`)."""


def _int_mm(rows: Any, q8: np.ndarray) -> Any:
    """``rows [N, dim] int8 @ q8 [T, dim].T`` in int32 through ``torch._int_mm`` (it wants a multiple of 8 columns)."""
    import torch

    width = -(-q8.shape[0] // 8) * 8
    padded = np.zeros((width, q8.shape[1]), dtype=np.int8)
    padded[: q8.shape[0]] = q8
    return torch._int_mm(rows, torch.from_numpy(padded).T.contiguous())[:, : q8.shape[0]]


def _float32(rows: Any, q8: np.ndarray) -> Any:
    """The same products in float32 from the upcast codes (exact for dim <= 1,040: integer sums below 2**24)."""
    import torch

    return rows.float() @ torch.from_numpy(q8.astype(np.float32)).T


def _onednn(rows: Any, q8: np.ndarray) -> Any:
    """The same products in float32 (exact for dim <= 1,040) through oneDNN's int8 layer.

    The query is the layer's weight (packed once per query, about 0.2 ms) and the rows its int8 input.
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


KERNELS: dict[str, Callable[[Any, np.ndarray], Any]] = {"onednn": _onednn, "int_mm": _int_mm, "float32": _float32}
"""The exact int8 kernels by name, in the order of preference when timings are close."""
_PACKED: tuple[tuple[tuple[int, ...], bytes], Any] | None = None
"""The last query packed for oneDNN: its bytes and shape, and the packed weight."""
_FLOAT_EXACT_DIM = 1024
"""Widest vectors whose int8 products sum exactly in float32 (127 * 127 * 1,040 < 2**24)."""
PROBLEM_ROWS, PROBLEM_TOKENS, PROBLEM_DIM = 8192, 32, 128
"""The fixed problem each kernel is timed on: a quarter of a search's 32k-row chunk by a padded 32-token query."""
MARGIN = 1.5
"""oneDNN (the quickest where it is quick) is kept unless another kernel is this many times faster."""


def _problem() -> tuple[Any, np.ndarray]:
    import torch

    gen = torch.Generator().manual_seed(7)
    rows = torch.randint(-127, 128, (PROBLEM_ROWS, PROBLEM_DIM), dtype=torch.int8, generator=gen)
    peak = query_peak()
    query = torch.randint(-peak, peak + 1, (PROBLEM_TOKENS, PROBLEM_DIM), dtype=torch.int8, generator=gen).numpy()
    return rows, query


def _runs() -> dict[str, Callable[[], object]]:
    """One run of each available kernel on the fixed problem."""
    rows, query = _problem()
    return {name: (lambda k=k: k(rows, query)) for name, k in available_kernels().items()}


def available_kernels() -> dict[str, Callable[[Any, np.ndarray], Any]]:
    """The kernels that give exact products here (oneDNN only where its exactness check passed)."""
    return {name: k for name, k in KERNELS.items() if name != "onednn" or onednn_exact_peak()}


def time_int8_kernels(rounds: int = 5) -> dict[str, float | None]:
    """Each available kernel's best time in ms on the fixed problem, measured now (for the machine report and the
    guard test; searches use the cached :func:`int8_kernel_choice`)."""
    return time_runs(_runs(), rounds)


def int8_kernel_choice() -> Choice:
    """Which kernel multiplies int8 here, and the timings it was chosen on (timed once per machine)."""
    return timed_choice("int8 kernel", list(available_kernels()), _runs, preferred="onednn", margin=MARGIN,
                        env=KERNEL_ENV)


def int8_kernel() -> Callable[[Any, np.ndarray], Any]:
    """The kernel in use here (:func:`int8_kernel_choice`)."""
    return KERNELS[int8_kernel_choice().choice]


_PEAKS = (127, 64)
"""Query ranges tried for oneDNN's exactness: full int8 (VNNI, AMX), then 7 bits (AVX2's 16-bit pair sums hold
``2 x 255 x 64 = 32,640``: the rows enter as unsigned bytes, shifted by 128)."""


def _onednn_peak_now() -> int:
    import torch

    gen = torch.Generator().manual_seed(1)
    random_rows = torch.randint(-127, 128, (4096, 128), dtype=torch.int8, generator=gen)
    extreme = torch.full((4, 128), 127, dtype=torch.int8)
    extreme[1] = -127
    extreme[2, ::2] = -127
    extreme[3, 1::2] = -127
    rows = torch.cat([random_rows, extreme])
    signs = np.where(np.arange(128) % 2 == 0, 1, -1).astype(np.int8)
    for peak in _PEAKS:
        query = torch.randint(-peak, peak + 1, (24, 128), dtype=torch.int8, generator=gen).numpy()
        query[:4] = np.stack([np.full(128, peak), np.full(128, -peak), peak * signs, -peak * signs]).astype(np.int8)
        try:
            exact = torch.equal(_onednn(rows, query).to(torch.int64), _int_mm(rows, query).to(torch.int64))
        except (RuntimeError, AttributeError, TypeError) as exc:  # no oneDNN int8 in this build
            logger.debug("oneDNN int8 products unavailable: %s", exc)
            return 0
        if exact:
            return peak
    return 0


def onednn_exact_peak() -> int:
    """The widest query range (127 or 64) over which oneDNN's int8 layer agrees exactly with ``torch._int_mm`` on
    random and worst-case rows here, 0 where it has no such layer or is exact on neither (checked once per
    machine)."""
    return int(remembered("onednn exact peak", _onednn_peak_now))


def query_peak() -> int:
    """The largest magnitude a query's int8 codes take: 127, or 64 where oneDNN is exact only for 7-bit queries
    (CPUs without VNNI). The same whichever kernel runs, so the kernel choice never changes a product."""
    return onednn_exact_peak() or 127


def int8_products_exact(rows: Any, q8: np.ndarray) -> Any:
    """Exact integer products ``[N, T]`` (int32 or float32 torch) of int8 rows ``[N, dim]`` with int8 tokens
    ``[T, dim]``, through the kernel chosen here.

    Wider vectors than float32 sums hold exactly, and tokens beyond the range oneDNN is exact for, go through
    ``torch._int_mm``.
    """
    name = int8_kernel_choice().choice
    if name == "int_mm" or q8.shape[1] > _FLOAT_EXACT_DIM:
        return _int_mm(rows, q8)
    if name == "float32":
        return _float32(rows, q8)
    peak = onednn_exact_peak()
    if not peak or (q8.size and int(np.abs(q8.astype(np.int16)).max()) > peak):
        return _int_mm(rows, q8)
    return _onednn(rows, q8)
