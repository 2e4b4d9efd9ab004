"""How the centroid summaries are held: the dtype this CPU scores them in (float, or int8 codes where it multiplies
those faster), their memory-mapped files, and copies of some of their rows.

Measured once per process, not assumed: bfloat16 is fast on CPUs with bfloat16 units and emulated elsewhere, and int8
products are exact and fast only where torch has oneDNN's kernels (scoring/kernels.py).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.scoring.kernels import fastest, onednn_int8_available
from docpc_retrievers.store.search.summary_codes import (
    dimension_scales,
    encode,
    late_interaction_int8,
)

logger = logging.getLogger(__name__)

__all__ = [
    "NP_STORAGE", "compute_dtype", "dtype_name", "int8_is_faster", "late_interaction", "mapped", "storage_array",
    "take_rows",
]

_COMPUTE_DTYPE: Any = None


def compute_dtype() -> Any:
    """bfloat16 where this CPU multiplies it fast (measured once), else float32.

    Why: the first stage streams every summary each query. On CPUs with bfloat16 units it runs 2.3x faster than
    float32 at half the memory; on others bfloat16 is emulated and slower, so the choice is measured, not assumed."""
    global _COMPUTE_DTYPE
    if _COMPUTE_DTYPE is None:
        import torch

        operands = {dtype: (torch.randn(65_536, 128).to(dtype), torch.randn(24, 128).to(dtype))
                    for dtype in (torch.bfloat16, torch.float32)}
        _COMPUTE_DTYPE = fastest({dtype: (lambda m=m, q=q: q @ m.T) for dtype, (m, q) in operands.items()})
    return _COMPUTE_DTYPE


_INT8_FASTER: bool | None = None


def int8_is_faster() -> bool:
    """Whether summaries are saved as int8 codes here rather than in compute_dtype().

    Yes wherever torch has oneDNN's int8 products exact for the queries it is given (x86 builds; 7-bit queries on
    CPUs without VNNI, where torch._int_mm alone is 15-31x slower): a snapshot's format should not hang on one noisy
    timing (on the 2-core benchmark machine int8 won 27-31 ms to 37-41 ms, but a loaded moment can flip a measurement).
    Elsewhere, measured once against the float scoring: where torch has no int8 product, or emulates it slowly,
    summaries stay in float.
    """
    global _INT8_FASTER
    if _INT8_FASTER is None:
        if onednn_int8_available():
            _INT8_FASTER = True
            return True
        import torch

        gen = torch.Generator().manual_seed(0)
        floats = torch.nn.functional.normalize(torch.randn(4, 16_384, 128, generator=gen), dim=2)
        scales = dimension_scales(floats.abs().amax(dim=(0, 1)).numpy())
        codes = torch.from_numpy(encode(floats, scales))
        query = np.random.default_rng(0).standard_normal((24, 128)).astype(np.float32)
        mat, q = floats.to(compute_dtype()), torch.from_numpy(query).to(compute_dtype())
        _INT8_FASTER = fastest({True: lambda: late_interaction_int8(query, codes, scales),
                                False: lambda: late_interaction(q, mat)}) is True
    return _INT8_FASTER


NP_STORAGE = {"bfloat16": np.uint16, "float32": np.float32, "int8": np.int8}


def dtype_name(dtype: Any) -> str:
    return "bfloat16" if "bfloat16" in str(dtype) else "float32"


def storage_array(t: Any) -> np.ndarray:
    """A torch tensor as numpy storage: raw 16-bit patterns for bfloat16 (numpy has none), else float32."""
    import torch

    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return t.float().numpy()


def mapped(path: Path, dtype: str, shape: tuple[int, int, int]) -> Any:
    """A read-only memory map of a saved level as a torch tensor in the compute dtype (copied only if it differs)."""
    import torch

    mm = np.memmap(path, dtype=NP_STORAGE[dtype], mode="r", shape=shape) if shape[1] else np.zeros(shape, NP_STORAGE[dtype])
    with warnings.catch_warnings():  # read-only memory: torch warns that writes would fail; nothing writes
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(mm.view(np.int16) if dtype == "bfloat16" else mm)
    if dtype == "int8":  # scored as codes wherever it is read (summary_codes.py)
        return t
    if dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    if t.dtype != compute_dtype():
        logger.info("first stage saved as %s, this CPU computes in %s: loading it into memory", dtype, compute_dtype())
        t = t.to(compute_dtype())
    return t


def late_interaction(q: Any, summaries: Any) -> np.ndarray:
    """``sum_t max_c <q_t, summary_c>`` for torch ``q [t, dim]`` against centroid-major ``[c, docs, dim]`` -> ``[docs]``."""
    import torch

    best = summaries[0] @ q.T  # [docs, t]: documents as the long side ran 1.5x faster than [t, docs] (bfloat16)
    for slab in summaries[1:]:
        torch.maximum(best, slab @ q.T, out=best)
    return best.float().sum(dim=1).numpy()


def take_rows(mat: Any, rows: np.ndarray, axis: int = 1) -> Any:
    """``rows`` of ``mat`` along ``axis`` as a new tensor: numpy copies each row whole, torch's advanced indexing
    element by element (16 slabs x 4,096 int8 rows: 7 ms against 20)."""
    import torch

    if mat.dtype in (torch.int8, torch.float32):
        return torch.from_numpy(np.take(mat.numpy(), rows, axis=axis))
    return mat.index_select(axis, torch.from_numpy(rows))
