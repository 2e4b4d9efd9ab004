"""Centroid summaries as int8 codes: how they are encoded, saved, mapped and scored.

The first stage streams every document's centroids for each query (410 MB per
query at 100,000 documents in bfloat16). Stored as int8 with one scale per
dimension for the whole index (centroids are unit vectors, so every dimension
has a bounded range), a saved snapshot is half the size, and the products run
on the CPU's int8 units (oneDNN or ``torch._int_mm``: scoring/kernels.py):
16 centroids x 100,000 documents x 26 query tokens took 27 ms on two cores
against 41 ms in bfloat16 (benchmarks/results/). The query absorbs the dimension
scales (``<q, c> = sum_d (q_d s_d) code_d``) and is then rounded to int8 per
token, as the candidates' approximate pass does. Documents added since the last save are scored in float32 beside
the codes (:func:`late_interaction`), and snapshots written as float by older versions open in float32.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.scoring.kernels import int8_products_exact
from docpc_retrievers.scoring.maxsim import quantized_query

__all__ = ["CHUNK_PRODUCTS", "as_tensor", "decode", "dimension_scales", "encode", "late_interaction",
           "late_interaction_int8", "mapped", "take_rows"]

CHUNK_PRODUCTS = 1 << 20
"""Products (documents x query tokens) per chunk: each centroid slab's ``[docs, tokens]`` products stay in the CPU's
caches while the running maximum takes them (over all 100,000 documents at once, writing and re-reading the products
cost more than the products themselves: 31 of 58 ms on one core). On the 2-core machine: 26 tokens x 100k documents
27.6 ms in chunks of 32k documents, 29.9 in chunks of 8k; the 8-row coarse query at 1M 46.8 ms in chunks of 131k,
61.6 in chunks of 8k."""
CHUNK_DOCS_MIN = 8192


def dimension_scales(peaks: np.ndarray) -> np.ndarray:
    """Scales ``[dim]`` mapping each dimension's largest magnitude ``peaks [dim]`` to 127 (1 where a dimension is all 0)."""
    p = np.asarray(peaks, dtype=np.float32)
    return np.where(p > 0, p / 127.0, 1.0).astype(np.float32)


def encode(summaries: Any, scales: np.ndarray) -> np.ndarray:
    """int8 codes ``[..., dim]`` of float summaries (numpy or torch) under per-dimension ``scales [dim]``."""
    x = np.asarray(summaries.float().numpy() if hasattr(summaries, "numpy") else summaries, dtype=np.float32)
    return np.clip(np.rint(x / scales), -127, 127).astype(np.int8)


def decode(codes: Any, scales: np.ndarray) -> Any:
    """Float32 torch summaries from int8 torch ``codes [..., dim]``."""
    import torch

    return codes.float() * torch.from_numpy(scales)


def late_interaction_int8(query: np.ndarray, codes: Any, scales: np.ndarray) -> np.ndarray:
    """``sum_t max_c <q_t, summary_c>`` for float ``query [t, dim]`` and int8 torch ``codes [c, docs, dim]`` -> ``[docs]``.

    The token scales are positive, so they are applied after the max.
    """
    import torch

    q8, token_scales = quantized_query(np.asarray(query, dtype=np.float32) * scales[None, :])
    n = codes.shape[1]
    chunk = max(CHUNK_DOCS_MIN, CHUNK_PRODUCTS // q8.shape[0])
    out = np.empty(n, dtype=np.float32)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        best = int8_products_exact(codes[0, start:stop], q8).float()
        for slab in codes[1:]:
            torch.maximum(best, int8_products_exact(slab[start:stop], q8).float(), out=best)
        out[start:stop] = (best * token_scales[None, :]).sum(dim=1).numpy()
    return out


def late_interaction(query: np.ndarray, summaries: Any) -> np.ndarray:
    """The same score in float32 for centroid-major float ``summaries [c, docs, dim]`` (documents added since the last
    save, or a snapshot of an older version)."""
    import torch

    q = torch.from_numpy(np.asarray(query, dtype=np.float32))
    best = summaries[0] @ q.T  # [docs, t]: documents as the long side ran 1.5x faster than [t, docs]
    for slab in summaries[1:]:
        torch.maximum(best, slab @ q.T, out=best)
    return best.sum(dim=1).numpy()


_STORED = {"int8": np.int8, "float32": np.float32, "bfloat16": np.uint16}
"""Saved dtypes: int8 codes; float32 and bfloat16 (raw 16-bit patterns) from snapshots of older versions."""


def mapped(path: Path, dtype: str, shape: tuple[int, int, int]) -> Any:
    """A saved ``[c, docs, dim]`` file: int8 codes as a read-only numpy memory map (torch is not imported until a
    query scores it: ``docpc info`` opens stores without it), an older float snapshot read into memory."""
    mm = np.memmap(path, dtype=_STORED[dtype], mode="r", shape=shape) if shape[1] else np.zeros(shape, _STORED[dtype])
    if dtype == "int8":
        return mm
    if dtype == "bfloat16":  # the 16 high bits of a float32
        return (np.asarray(mm, dtype=np.uint32) << 16).view(np.float32)
    return np.array(mm)


def as_tensor(x: Any) -> Any:
    """A numpy array (a read-only memory map included) as a torch tensor sharing its memory; a tensor as it is."""
    import torch

    if isinstance(x, torch.Tensor):
        return x
    with warnings.catch_warnings():  # read-only memory: torch warns that writes would fail; nothing writes
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(x)


def take_rows(mat: Any, rows: np.ndarray, axis: int = 1) -> Any:
    """``rows`` of ``mat`` (numpy or torch) along ``axis`` as a new tensor: numpy copies each row whole, torch's
    advanced indexing element by element (16 slabs x 4,096 int8 rows: 7 ms against 20)."""
    import torch

    return torch.from_numpy(np.take(mat if isinstance(mat, np.ndarray) else mat.numpy(), rows, axis=axis))
