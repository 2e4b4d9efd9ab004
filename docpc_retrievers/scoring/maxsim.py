"""Late-interaction (MaxSim) scoring: ``s(q, d) = sum_i max_j <q_i, d_j>``.

- :func:`maxsim_reference` scores one query against one document with no
  batching at all; it is the definition the others are tested against.
- :func:`maxsim` scores many queries against many float documents of different
  lengths without any padding, by concatenating document vectors and taking
  segment maxima (reranking, evaluation).
- :func:`maxsim_int8` scores one query against documents stored as int8 rows
  with a scale each, exactly or (``approximate``) through int8 products: the
  store's search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from docpc_retrievers.scoring.kernels import int8_products_exact, query_peak

__all__ = ["maxsim", "maxsim_int8", "maxsim_matches", "maxsim_reference", "quantized_query"]


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a [n_vectors, dim] matrix, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no vectors")
    return arr


def maxsim_reference(query: np.ndarray, document: np.ndarray) -> float:
    """Score one query ``[n_q, dim]`` against one document ``[n_d, dim]``, the plain way."""
    q = _as_matrix(query, "query")
    d = _as_matrix(document, "document")
    return float(sum(float(np.max(d @ q_i)) for q_i in q))


def maxsim_matches(query: np.ndarray, document: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query token, the best document row and its similarity: ``(rows [n_q], sims [n_q])``.

    ``sims.sum()`` is the MaxSim score; evidence maps credit each token's match to where ``rows`` lie.
    """
    q = _as_matrix(query, "query")
    d = _as_matrix(document, "document")
    sims = q @ d.T  # [n_q, n_d]
    rows = sims.argmax(axis=1)
    return rows, sims[np.arange(q.shape[0]), rows]


def maxsim(
    queries: Sequence[np.ndarray],
    documents: Sequence[np.ndarray],
    *,
    max_vectors_per_chunk: int = 262_144,
) -> np.ndarray:
    """MaxSim of every query against every document, documents of any lengths.

    Document vectors are concatenated and reduced per document with
    ``np.maximum.reduceat``, so there is no padding to mask at all; documents
    are processed in chunks of about ``max_vectors_per_chunk`` vectors to bound
    memory. Returns ``[len(queries), len(documents)]`` float32 scores.
    """
    qs = [_as_matrix(q, f"query {i}") for i, q in enumerate(queries)]
    n_docs = len(documents)
    if not qs:
        return np.zeros((0, n_docs), dtype=np.float32)
    if n_docs == 0:
        return np.zeros((len(qs), 0), dtype=np.float32)
    q_all = np.concatenate(qs, axis=0)  # [T, dim]
    q_starts = np.cumsum([0] + [q.shape[0] for q in qs[:-1]])
    dim = q_all.shape[1]
    scores = np.empty((len(qs), n_docs), dtype=np.float32)

    start = 0
    while start < n_docs:
        end, total = start, 0
        while end < n_docs and (end == start or total + len(documents[end]) <= max_vectors_per_chunk):
            total += len(documents[end])
            end += 1
        chunk = [np.asarray(documents[i]) for i in range(start, end)]
        lengths = [c.shape[0] for c in chunk]
        for i, (c, n) in enumerate(zip(chunk, lengths)):
            if c.ndim != 2 or n == 0 or c.shape[1] != dim:
                raise ValueError(f"document {start + i} must be a non-empty [n, {dim}] matrix, got {c.shape}")
        flat = np.concatenate(chunk, axis=0)
        sims = _matmul_t(flat, q_all)  # [sum n_d, T]
        d_starts = np.cumsum([0] + lengths[:-1])
        best = np.maximum.reduceat(sims, d_starts, axis=0)  # [n_chunk_docs, T]
        scores[:, start:end] = np.add.reduceat(best, q_starts, axis=1).T
        start = end
    return scores


def _matmul_t(docs: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``docs @ queries.T`` in float32, computed by torch.

    torch upcasts float16 about five times faster than numpy, and keeping every
    matrix product of a search in one thread pool avoids numpy's OpenBLAS
    threads spinning against torch's on small machines (measured here: mixing
    the two made each stage about 1.7x slower).
    """
    import torch

    d = torch.from_numpy(np.ascontiguousarray(docs))
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    return (d.float() @ q.T).numpy()


def maxsim_int8(
    query: np.ndarray, rows: np.ndarray, scales: np.ndarray, lengths: Sequence[int], *, approximate: bool = False
) -> np.ndarray:
    """Exact MaxSim of one query ``[T, dim]`` against int8 documents stored with one scale per row.

    ``rows`` is int8 ``[N, dim]`` (documents' rows one after another), ``scales``
    float ``[N]`` and ``lengths`` how many rows each document has. Each row's
    dot products are its int8 products times its scale, so nothing is
    dequantised in memory; the product runs in float32 with torch, or with
    ``approximate`` in integers, the query rounded to int8 per token (scoring/kernels.py).
    Returns ``[len(lengths)]`` float32.
    """
    import torch

    if not lengths:
        return np.zeros(0, dtype=np.float32)
    if min(lengths) < 1 or sum(lengths) != rows.shape[0]:
        raise ValueError("lengths must be >= 1 and add up to the number of rows")
    query = _as_matrix(query, "query")
    d = torch.from_numpy(np.ascontiguousarray(rows))
    row_scales = torch.from_numpy(np.asarray(scales, dtype=np.float32))[:, None]
    if approximate:
        return _maxsim_int8_products(query, d, row_scales, list(lengths))
    sims = (d.float() @ torch.from_numpy(query).T) * row_scales  # [N, T]
    return _segment_max(sims, list(lengths)).sum(dim=1).numpy()


INT8_COLUMNS = 32
"""The int8 pass pads the query to a multiple of this many tokens: torch's max over a document's rows of a
``[rows, 32]`` block ran 16x faster than over ``[rows, 25]`` (0.06 against 0.95 ms per 32k rows), more than the
padded products cost. Where every document has the same row count (grid stores) the max is a reshaped
``amax``, fastest at 32 columns; see ``INT8_VARIED_COLUMNS`` for the rest."""
INT8_VARIED_COLUMNS = 8
"""The padding where documents' row counts differ (page mode, pooled documents): their max is a segment reduction,
whose cost follows the columns, so narrower padding pays (benchmarks/int8_columns_bench.py, 256 documents of 300-440
rows, one thread: 3-7 tokens 10.6 -> 4.1-4.2 ms, 10-16 tokens 10.6-10.7 -> 6.0-6.1, 20 tokens 10.1 -> 8.2, 48 tokens
24.8 -> 16.7, 25-32 unchanged; with one row count, 8 columns ran 1.3-2.8x slower than 32)."""
INT8_CHUNK_ROWS = 32_768
"""Rows per int8 product in :func:`maxsim_int8`: the ``[rows, T]`` products stay in the CPU's cache while they are
scaled and reduced, and no product writes a fresh 39 MB output (one oneDNN call over 389,120 rows x 25 tokens took
14.7 ms, twelve calls of 32k rows 2.6 ms)."""


def _maxsim_int8_products(query: np.ndarray, d: Any, row_scales: Any, lengths: list[int]) -> np.ndarray:
    """MaxSim from int8 products, whole documents at a time in chunks of about :data:`INT8_CHUNK_ROWS` rows.

    The token scales are positive, so they are applied after the max; the row scales before it.
    """
    import torch

    q8, token_scales = quantized_query(query)
    t = q8.shape[0]
    uniform = len(set(lengths)) == 1
    columns = INT8_COLUMNS if uniform else INT8_VARIED_COLUMNS
    width = -(-t // columns) * columns
    if width != t:  # zero tokens: their columns are dropped after the max
        q8 = np.concatenate([q8, np.zeros((width - t, q8.shape[1]), dtype=np.int8)])
    starts = np.concatenate([[0], np.cumsum(lengths)])
    best = torch.empty((len(lengths), width), dtype=torch.float32)
    first = 0
    while first < len(lengths):
        last = int(np.searchsorted(starts, starts[first] + INT8_CHUNK_ROWS, side="right")) - 1
        last = min(max(last, first + 1), len(lengths))
        lo, hi = int(starts[first]), int(starts[last])
        sims = int8_products_exact(d[lo:hi], q8)
        sims = sims.mul_(row_scales[lo:hi]) if sims.dtype == torch.float32 else sims * row_scales[lo:hi]
        best[first:last] = _segment_max(sims, lengths[first:last])
        first = last
    return (best[:, :t] * token_scales[None, :]).sum(dim=1).numpy()


def _segment_max(sims: Any, lengths: list[int]) -> Any:
    """Per-document maxima ``[docs, T]`` of consecutive row blocks of ``sims [sum(lengths), T]``."""
    import torch

    if len(set(lengths)) == 1:
        return sims.view(len(lengths), lengths[0], sims.shape[1]).amax(dim=1)
    return torch.segment_reduce(sims, "max", lengths=torch.tensor(lengths), axis=0)


def quantized_query(query: np.ndarray, peak: int | None = None) -> tuple[np.ndarray, Any]:
    """The query rounded to int8 ``[T, dim]`` with one positive scale per token (torch ``[T]``), each token's largest
    magnitude at ``peak``, by default :func:`~docpc_retrievers.scoring.kernels.query_peak` (127, or 64 on CPUs
    without VNNI)."""
    import torch

    q = np.asarray(query, dtype=np.float32)
    limit = query_peak() if peak is None else peak
    largest = np.abs(q).max(axis=1)
    token_scales = np.where(largest > 0, largest / limit, 1.0).astype(np.float32)
    q8 = np.clip(np.rint(q / token_scales[:, None]), -limit, limit).astype(np.int8)
    return q8, torch.from_numpy(token_scales)
