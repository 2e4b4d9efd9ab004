"""What a reader and a shard searcher say to each other: a search's encoded queries and options, the shard's hits.

A shard searcher (``docpc serve-shard``) holds one shard warm and answers ``POST /search`` with its exact top k; the
reader merges every shard's answer (store/shards.py). Vectors travel only for the merged top k (``POST /vectors``),
as the store keeps them (int8 rows and their scales), so a reader that holds nothing pulls a few hundred KB a query.
Everything is JSON: arrays as base64 of their little-endian bytes with their shape.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from docpc_retrievers.store.records import ScoredDocument

__all__ = ["array_from", "array_to", "hits_from", "hits_to", "search_request"]

SEARCH_OPTIONS = ("where", "ids", "n_candidates", "exhaustive", "aggregate", "with_text", "with_grid")
"""The store search's keywords a request carries (vectors are fetched apart, for the merged hits only)."""


def array_to(a: np.ndarray) -> dict[str, Any]:
    """An array as JSON: dtype, shape and base64 of its bytes."""
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def array_from(d: Mapping[str, Any]) -> np.ndarray:
    """:func:`array_to`'s array back (writable: torch takes it as it is)."""
    return np.frombuffer(bytearray(base64.b64decode(d["data"])), dtype=np.dtype(d["dtype"])).reshape(d["shape"])


def search_request(queries: Sequence[np.ndarray], top_k: int, options: Mapping[str, Any]) -> dict[str, Any]:
    """A ``/search`` body: the encoded queries (float32) and the store search's options."""
    unknown = sorted(set(options) - set(SEARCH_OPTIONS) - {"with_vectors"})
    if unknown:
        raise TypeError(f"a shard search cannot carry {', '.join(unknown)}")
    body = {k: (list(v) if k == "ids" and v is not None else v) for k, v in options.items() if k != "with_vectors"}
    return {"queries": [array_to(np.asarray(q, dtype=np.float32)) for q in queries], "top_k": int(top_k), **body}


def hits_to(hits: Sequence[ScoredDocument]) -> list[dict[str, Any]]:
    """A shard's hits for one query, as JSON (no vectors: the reader fetches the merged hits' apart)."""
    return [{"id": h.id, "score": h.score, "metadata": h.metadata, "part_scores": list(h.part_scores),
             "text": h.text, "grid": None if h.grid is None else base64.b64encode(h.grid).decode("ascii")}
            for h in hits]


def hits_from(items: Sequence[Mapping[str, Any]]) -> list[ScoredDocument]:
    """:func:`hits_to`'s hits back."""
    return [ScoredDocument(d["id"], float(d["score"]), dict(d["metadata"]), tuple(d["part_scores"]), d.get("text"),
                           grid=None if d.get("grid") is None else base64.b64decode(d["grid"]))
            for d in items]
