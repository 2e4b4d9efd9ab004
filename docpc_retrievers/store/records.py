"""What a document record holds: the result types, metadata rules and the first-stage summary's text form."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from docpc_retrievers.store.codec import (
    decode_int8,
    dequantize,
    encode_int8,
    pack_vectors,
)
from docpc_retrievers.store.chroma_quotas import HOSTED
from docpc_retrievers.store.engine import DocumentRecord
from docpc_retrievers.store.search.centroids import document_centroids

__all__ = ["INTERNAL_PREFIX", "MISSING_SHARDS", "MetadataCache", "ScoredDocument", "StoredDocument", "build_record", "check_batch", "check_metadata", "parts_of", "parts_value", "replaced_metadata", "public", "shards_named", "summary_codes", "summary_text",
           "summary_vectors"]

INTERNAL_PREFIX = "_"
"""Metadata keys the store keeps for itself (vector count, summary, parts, sizes)."""
INTERNAL_KEYS = ("_n", "_summary", "_vb", "_parts", "_gb", "_seq", "_v", "_g", "_t")
"""Every internal key a record may carry."""
PUBLIC_KEYS = HOSTED.metadata_keys - len(INTERNAL_KEYS)
"""Public metadata keys a record may carry: hosted Chroma's quota less the internal keys."""


@dataclass(frozen=True)
class StoredDocument:
    """A document record: its id, its public metadata and how many vectors it has."""

    id: str
    metadata: dict[str, Any]
    n_vectors: int
    vectors: np.ndarray | None = field(default=None, repr=False, compare=False)
    parts: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScoredDocument:
    """A search hit: id, score (higher is better) and public metadata, with what the search read of it.

    For records stored in several parts (one per page in page mode),
    ``part_scores`` holds each part's exact MaxSim and ``score`` is their
    aggregate; for single-part records it is ``(score,)``.
    """

    id: str
    score: float
    metadata: dict[str, Any]
    part_scores: tuple[float, ...] = ()
    text: str | None = field(default=None, repr=False, compare=False)
    """The stored text, when the search was asked for it (read with the metadata, in one Chroma read)."""
    vectors: np.ndarray | None = field(default=None, repr=False, compare=False)
    """The stored vectors (float32) and, for pooled ones, each one's encoder token, when asked for."""
    anchors: np.ndarray | None = field(default=None, repr=False, compare=False)
    grid: bytes | None = field(default=None, repr=False, compare=False)
    """The grid preview's bytes, when asked for (None also for a page-mode record or a store kept without them)."""


MISSING_SHARDS = "missing_shards"
"""The metadata key of a partial answer's hits (``partial=True`` with shard searchers): the shards whose searchers
did not answer."""


def shards_named(missing: Sequence[int]) -> str:
    """``shard 1`` or ``shards 1, 3``: the missing shards as an error or a partial answer's heading names them."""
    return f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"


def public(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The keys a user sees: internal ``_`` keys and absent values left out."""
    return {k: v for k, v in metadata.items() if not k.startswith(INTERNAL_PREFIX) and v is not None}


def check_metadata(doc_id: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as Chroma stores it: reserved keys refused, None and empty lists dropped, types checked."""
    clean: dict[str, Any] = {}
    for key, value in metadata.items():
        if key.startswith(INTERNAL_PREFIX) or key.startswith("chroma:"):
            raise ValueError(f"document {doc_id}: metadata key {key!r} is reserved")
        if value is None:
            continue  # Chroma stores no None: an absent key means the same
        if isinstance(value, (list, tuple)):
            if not value:
                continue  # Chroma refuses empty lists; an absent key means the same
            value = list(value)
        elif not isinstance(value, (str, int, float, bool)):
            raise ValueError(
                f"document {doc_id}: metadata {key!r} has type {type(value).__name__}; "
                "use str, int, float, bool, None or a list of one scalar type"
            )
        clean[key] = value
        size = len((value if isinstance(value, str) else json.dumps(value)).encode("utf-8"))
        if size > HOSTED.metadata_value_bytes:
            raise ValueError(f"document {doc_id}: metadata {key!r} holds {size} bytes; Chroma's hosted quota is "
                             f"{HOSTED.metadata_value_bytes} bytes a value (keep long text in the document's text)")
    if len(clean) > PUBLIC_KEYS:
        raise ValueError(f"document {doc_id}: {len(clean)} metadata keys; at most {PUBLIC_KEYS} are kept, the rest of "
                         f"Chroma's hosted quota of {HOSTED.metadata_keys} keys a record being the store's own")
    return clean


def parts_value(doc_id: str, parts: Sequence[int]) -> list[int] | str:
    """A part split as record metadata: the list itself when its JSON fits one metadata value (hosted Chroma: 4 KB),
    else ``z:`` and the sizes as zlib-packed uint16 in base64 (a long PDF in page mode: its pages share sizes)."""
    sizes = [int(v) for v in parts]
    if len(json.dumps(sizes)) <= HOSTED.metadata_value_bytes:
        return sizes
    text = "z:" + base64.b64encode(zlib.compress(np.asarray(sizes, dtype="<u2").tobytes(), 9)).decode("ascii")
    if len(text) > HOSTED.metadata_value_bytes or max(sizes) > 0xFFFF:
        raise ValueError(f"document {doc_id}: {len(sizes)} parts of distinct sizes do not fit one metadata value "
                         f"({len(text)} characters; Chroma's hosted quota is {HOSTED.metadata_value_bytes}): index it "
                         "in grid mode, or with fewer pages")
    return text


def parts_of(value: Any) -> tuple[int, ...] | None:
    """A record's part split back from :func:`parts_value`'s form (None when it has none)."""
    if not value:
        return None
    if isinstance(value, str):
        raw = zlib.decompress(base64.b64decode(value.removeprefix("z:")))
        return tuple(int(v) for v in np.frombuffer(raw, dtype="<u2"))
    return tuple(int(v) for v in value)


def summary_text(centroids: np.ndarray) -> str:
    """A summary's centroids as int8 in base64, the form kept in the record's metadata."""
    return base64.b64encode(encode_int8(centroids)).decode("ascii")


def summary_codes(text: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The centroids of :func:`summary_text` in their stored form: int8 ``[c, dim]`` and float16 scales ``[c]``."""
    return decode_int8(base64.b64decode(text), dim)


def summary_vectors(text: str, dim: int) -> np.ndarray:
    """The centroids back from :func:`summary_text`, ``[c, dim]`` float32."""
    return dequantize(*summary_codes(text, dim))


def check_batch(
    ids: Sequence[str],
    vectors: Sequence[np.ndarray],
    metadatas: Sequence[Mapping[str, Any]],
    texts: Sequence[str | None] | None,
    parts: Sequence[Sequence[int] | None] | None,
    anchors: Sequence[np.ndarray | None] | None,
    grids: Sequence[bytes | None] | None,
    store_dim: int | None,
) -> list[np.ndarray]:
    """Check one ``add()`` batch before anything is written; the vectors as float32 matrices (empty: nothing to add)."""
    n_docs = len(ids)
    if not (n_docs == len(vectors) == len(metadatas)) or (texts is not None and len(texts) != n_docs):
        raise ValueError("ids, vectors, metadatas (and texts) must have the same length")
    if len(set(ids)) != n_docs:
        raise ValueError("duplicate ids in one add() call")
    if not ids:
        return []
    mats = [np.asarray(v, dtype=np.float32) for v in vectors]
    dim = store_dim or mats[0].shape[1]
    for name, seq in (("parts", parts), ("anchors", anchors), ("grids", grids)):
        if seq is not None and len(seq) != n_docs:
            raise ValueError(f"{name} must have one entry per document")
    for i, (doc_id, m) in enumerate(zip(ids, mats)):
        split = None if parts is None else parts[i]
        if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] != dim:
            raise ValueError(f"document {doc_id}: expected a non-empty [n, {dim}] matrix, got {m.shape}")
        if split is not None and (sum(split) != m.shape[0] or min(split, default=0) < 1):
            raise ValueError(f"document {doc_id}: parts {list(split)} do not split its {m.shape[0]} rows")
        if not np.isfinite(m).all():
            raise ValueError(f"document {doc_id}: embedding contains NaN or inf")
    return mats


def build_record(
    doc_id: str,
    vectors: np.ndarray,
    metadata: Mapping[str, Any],
    n_centroids: int,
    *,
    text: str | None,
    parts: Sequence[int] | None,
    anchors: np.ndarray | None,
    grid: bytes | None,
) -> tuple[DocumentRecord, np.ndarray]:
    """A checked document's Chroma record (int8 payload, summary, mean embedding) and its summary ``[c, dim]``."""
    data = pack_vectors(vectors, anchors)
    mean = vectors.mean(axis=0)
    rec = check_metadata(doc_id, metadata)
    rec.update({"_n": int(vectors.shape[0]), "_summary": summary_text(document_centroids(vectors, n_centroids)),
                "_vb": len(data)})
    if parts is not None and len(parts) > 1:
        rec["_parts"] = parts_value(doc_id, parts)
    if grid is not None:
        rec["_gb"] = len(grid)
    embedding = mean / max(float(np.linalg.norm(mean)), 1e-12)
    record = DocumentRecord(doc_id, rec, text or "", embedding, data, grid)
    return record, summary_vectors(rec["_summary"], vectors.shape[1])


class MetadataCache:
    """Public metadata of result documents, remembered (at most ``size``; the change feed forgets changed ones)."""

    def __init__(self, fetch: Callable[[list[str]], Mapping[str, Mapping[str, Any]]], size: int = 20_000) -> None:
        self._fetch, self._size = fetch, size
        self._known: dict[str, dict[str, Any]] = {}

    def get(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Metadata of ``ids``; a document missing from the answer is gone from the store."""
        missing = [i for i in ids if i not in self._known]
        if missing:
            for doc_id, meta in self._fetch(missing).items():
                self._known[doc_id] = public(meta)
            while len(self._known) > self._size:
                self._known.pop(next(iter(self._known)))
        return {i: self._known[i] for i in ids if i in self._known}

    def forget(self, doc_id: str) -> None:
        self._known.pop(doc_id, None)


def replaced_metadata(doc_id: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A record's metadata with its public keys replaced by ``new`` (checked) and its internal keys kept."""
    rec = check_metadata(doc_id, new)
    rec.update({k: v for k, v in old.items() if k.startswith(INTERNAL_PREFIX)})
    return {**{k: None for k in old}, **rec}  # None deletes a key Chroma had
