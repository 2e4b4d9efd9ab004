"""The multi-vector store: every document's compact multi-vector, summary, metadata, text and grid, in Chroma.

Chroma is the source of truth (see engine.py for the records); a local cache
(cache.py) keeps the compact vectors and first-stage summaries a search reads
so that queries do not travel to the database for them. Any process with a
Chroma connection can search: a cache that is missing, stale or deleted is
filled again from Chroma, and the change feed tells readers what other
writers did since they last looked.

Search has two stages: centroid MaxSim, ``sum_i max_c <q_i, c>``, over
every document's summary in memory keeps the candidates; those are scored
exactly from their stored int8 rows (each row's products times its scale, in
float32), and those scores are returned. A query with fewer tokens ranks
the summaries less reliably and costs less per candidate, so it keeps more:
``CANDIDATE_TOKEN_BUDGET / n_tokens`` candidates, at least ``n_candidates``
and at most 4x that (at 100,000 documents, 256 candidates found 0.969 of the
top 10 for 8-12-token queries; a budget of 4096 gives 0.994 in 99 ms p50,
6144 the same recall in 138 ms).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from docpc_retrievers.config import AGGREGATES
from docpc_retrievers.encoders.identity import IDENTITY_KEYS, ModelIdentity
from docpc_retrievers.errors import (
    DocumentNotFoundError,
    ModelMismatchError,
    SettingsMismatchError,
    StoreError,
)
from docpc_retrievers.filters import check_where
from docpc_retrievers.scoring.maxsim import maxsim_int8
from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.candidates import CentroidIndex, document_centroids
from docpc_retrievers.store.codec import decode_int8, dequantize, encode_int8, pack_vectors, unpack_vectors
from docpc_retrievers.store.engine import STORE_FORMAT, ChromaEngine, DocumentRecord, chroma_client
from docpc_retrievers.store.layout import StoreLayout, write_json_atomic
from docpc_retrievers.store.locking import WriterLock

__all__ = ["AGGREGATES", "MultiVectorStore", "ScoredDocument", "StoredDocument", "STORE_FORMAT"]

logger = logging.getLogger(__name__)

_INTERNAL_PREFIX = "_"
#: Candidates scored per matrix product (bounds memory on exhaustive scans).
_SCORE_CHUNK = 1024
#: Result documents whose public metadata is kept in memory.
_META_CACHE = 20_000


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
    """A search hit: id, score (higher is better) and public metadata.

    For records stored in several parts (one per page in page mode),
    ``part_scores`` holds each part's exact MaxSim and ``score`` is their
    aggregate; for single-part records it is ``(score,)``.
    """

    id: str
    score: float
    metadata: dict[str, Any]
    part_scores: tuple[float, ...] = ()


CANDIDATE_TOKEN_BUDGET = 4096
"""Query tokens x candidates scored exactly, when more than ``n_candidates`` (16 or more tokens keep 256)."""

_F = TypeVar("_F", bound=Callable[..., Any])
_BLAS: Any = None


@contextmanager
def _single_blas_thread() -> Iterator[None]:
    """Keep numpy's OpenBLAS to one thread while torch does a search's heavy products.

    OpenBLAS threads spin after each call and fight torch's OpenMP threads for
    the cores; on the 2-core machine that made search 1.25x slower.
    """
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    with _BLAS.limit(limits=1, user_api="blas"):
        yield


def _synchronized(method: _F) -> _F:
    """Serialise a public method on the store's mutex: one store object may be shared by threads."""

    @wraps(method)
    def wrapper(self: MultiVectorStore, *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _public(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if not k.startswith(_INTERNAL_PREFIX) and v is not None}


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``, so a mismatch message names the exact setting."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def _check_metadata(doc_id: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in metadata.items():
        if key.startswith(_INTERNAL_PREFIX) or key.startswith("chroma:"):
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
    return clean


def _summary_text(centroids: np.ndarray) -> str:
    return base64.b64encode(encode_int8(centroids)).decode("ascii")


def _summary_vectors(text: str, dim: int) -> np.ndarray:
    q, scale = decode_int8(base64.b64decode(text), dim)
    return dequantize(q, scale)


class MultiVectorStore:
    """Per-document multi-vector embeddings with metadata, text and grid previews, kept in Chroma.

    Args:
        path: the store directory: Chroma's files (embedded mode) and the local cache.
        host, port, ssl, headers: use a Chroma server (or Chroma's distributed deployment)
            instead of the embedded one; ``path`` then only holds the cache.
        collection: Chroma collection name (two companions are named after it).
        writable: take the single-writer lock (embedded mode; a server has no local lock).
        n_centroids: centroids kept per document for the first search stage.
        n_candidates: the fewest documents the centroid stage keeps to score exactly
            (queries of fewer than ``CANDIDATE_TOKEN_BUDGET / n_candidates`` tokens keep more).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        host: str | None = None,
        port: int = 8000,
        ssl: bool = False,
        headers: Mapping[str, str] | None = None,
        collection: str = "docpc",
        writable: bool = False,
        n_centroids: int = 16,
        n_candidates: int = 256,
        allow_old_format: bool = False,
    ) -> None:
        self.layout = StoreLayout.at(path)
        self.path = self.layout.root
        self.host = host
        self.n_centroids = n_centroids
        self.n_candidates = n_candidates
        self._mutex = threading.RLock()
        self._writable = writable
        local = self._read_local_manifest()
        if local.get("format") == 1 and not allow_old_format:
            raise StoreError(
                f"store {self.path} was written by docpc-retrievers 0.1 (format 1: vectors and grids in local "
                f"files); convert it in place with `docpc migrate {self.path}`"
            )
        if host is None and not writable and not self.layout.chroma.exists():
            raise StoreError(f"no docpc store at {self.path} (missing {self.layout.manifest.name}); index some documents first")
        self._lock = WriterLock(self.layout.lock) if writable and host is None else None
        self._cache: VectorCache | None = None
        try:
            if self._lock is not None:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock.acquire()
            self.collection_name = str(local.get("collection") or collection)
            self._client = chroma_client(self.layout.chroma, host, port, ssl, headers)
            if not writable and host is not None:
                self._require_collection()
            self.engine = ChromaEngine(self._client, self.collection_name)
            self._manifest = self.engine.read_manifest()
            if self._manifest.get("format", STORE_FORMAT) != STORE_FORMAT and not allow_old_format:
                raise StoreError(f"store {self.path}: format {self._manifest.get('format')} is not supported")
            if writable:
                self.path.mkdir(parents=True, exist_ok=True)
                if host is None and not self.layout.manifest.exists():
                    write_json_atomic(self.layout.manifest, {"format": STORE_FORMAT, "collection": self.collection_name})
            self._cache = VectorCache(self.layout.cache, self.engine.identity)
        except BaseException:
            self.close()
            raise
        self._index: CentroidIndex | None = None
        self._n: dict[str, int] = {}
        self._parts: dict[str, tuple[int, ...]] = {}
        self._meta_cache: dict[str, dict[str, Any]] = {}
        self._loaded = False

    # ------------------------------------------------------------------ setup
    def _read_local_manifest(self) -> dict[str, Any]:
        try:
            data = json.loads(self.layout.manifest.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"{self.layout.manifest} is unreadable: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def _require_collection(self) -> None:
        try:
            self._client.get_collection(self.collection_name)
        except Exception as exc:
            if "connect" in f"{type(exc).__name__} {exc}".lower():
                raise StoreError(f"the Chroma server at {self.host} cannot be reached ({exc})") from exc
            raise StoreError(
                f"no docpc store named {self.collection_name!r} on the Chroma server {self.host}; "
                "index some documents first"
            ) from exc

    @property
    def cache(self) -> VectorCache:
        assert self._cache is not None
        return self._cache

    # --------------------------------------------------------------- settings
    @property
    def dim(self) -> int | None:
        dim = self._manifest.get("dim")
        return int(dim) if dim is not None else None

    @property
    def settings(self) -> dict[str, Any]:
        """What the store was built with (encoder and index settings)."""
        return dict(self._manifest.get("settings") or {})

    def check_settings(self, settings: Mapping[str, Any], *, section: str | None = None) -> None:
        """Raise when ``settings`` differ from the recorded ones, naming each differing setting.

        The error is :class:`ModelMismatchError` for the ``encoder`` section and
        :class:`SettingsMismatchError` otherwise. The model is compared by identity
        (fingerprint or hub commit, see :class:`ModelIdentity`), never by the path it was loaded from.
        """
        if section is None:
            for name, part in settings.items():
                if isinstance(part, Mapping):
                    self.check_settings(part, section=name)
            return
        recorded = self.settings.get(section) or {}
        if not recorded:
            return
        diffs: list[str] = []
        have, want = _flatten(recorded), _flatten(settings)
        if section == "encoder":
            diffs = [f"{section}.{d}" for d in
                     ModelIdentity.from_settings(recorded).differences(ModelIdentity.from_settings(settings))]
            have = {k: v for k, v in have.items() if k not in IDENTITY_KEYS}
            want = {k: v for k, v in want.items() if k not in IDENTITY_KEYS}
        keys = [key for key in sorted(set(have) | set(want)) if have.get(key) != want.get(key)]
        diffs += [f"{section}.{key}: store has {have.get(key)!r}, got {want.get(key)!r}" for key in keys]
        if diffs:
            if section == "encoder":
                raise ModelMismatchError(
                    f"store {self.path} was built with a different model or encoder settings ({'; '.join(diffs)}); "
                    "pass a copy of the store's own model (any path; its fingerprint must match), omit --model / "
                    "model= to use the recorded one, or index into a new store"
                )
            raise SettingsMismatchError(
                f"store {self.path} was built with different {section} settings ({'; '.join(diffs)}); "
                "these are fixed when a store is created; index into a new store to change them"
            )

    @_synchronized
    def set_settings(self, settings: Mapping[str, Any]) -> None:
        """Record the settings on first write; later writes must match them.

        A matching write also refreshes the recorded model identity (a store written before
        identities gains its fingerprint; the path becomes the one last written with).
        """
        self._require_writer()
        self._manifest = self.engine.read_manifest() or self._manifest
        if self.settings:
            self.check_settings(settings)
            recorded = self.settings
            encoder = settings.get("encoder")
            if isinstance(encoder, Mapping) and ModelIdentity.from_settings(encoder).fingerprint:
                merged = {**(recorded.get("encoder") or {}), **{k: v for k, v in encoder.items() if k in IDENTITY_KEYS}}
                if merged != recorded.get("encoder"):
                    self._manifest["settings"] = json.loads(json.dumps({**recorded, "encoder": merged}))
                    self.engine.write_manifest(self._manifest)
            return
        self._manifest["settings"] = json.loads(json.dumps(dict(settings)))
        self._manifest["format"] = STORE_FORMAT
        self.engine.write_manifest(self._manifest)

    def _require_writer(self) -> None:
        if not self._writable or (self._lock is not None and not self._lock.held):
            raise StoreError(f"store {self.path} was opened read-only; open it with writable=True to change it")

    # ---------------------------------------------------------------- loading
    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._load()
        else:
            self.refresh()

    def _load(self) -> None:
        """Build the in-memory first stage: from the cache's saved summaries when valid, else from Chroma."""
        self._manifest = self.engine.read_manifest() or self._manifest
        self._loaded = True
        if self.dim is None:
            return
        self._index = CentroidIndex(self.n_centroids, self.dim)
        self._n, self._parts = {}, {}
        saved = self.cache.load_summaries() if self.cache.position else None
        if saved is not None:
            try:
                self._index.restore(saved)
            except (ValueError, KeyError) as exc:
                logger.info("saved first stage of %s not used (%s); reading it from the store", self.path, exc)
                self._index = CentroidIndex(self.n_centroids, self.dim)
            else:
                self._n = dict(zip(self._index.ids(), saved["counts"].tolist()))
                self._parts = {
                    str(k): tuple(int(v) for v in json.loads(str(p))) for k, p in zip(saved["part_ids"], saved["parts"])
                }
                self.refresh()
                return
        position, seen = self.engine.position()  # first: a commit landing meanwhile is replayed, not missed
        self._ingest(self.engine.records())
        self.cache.position = position
        self.cache.seen.update(seen)
        self._save_summaries()

    def _ingest(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        assert self._index is not None and self.dim is not None
        ids, cents = [], []
        for doc_id, meta in records.items():
            if "_summary" not in meta:
                continue  # a record of another format (or being written)
            ids.append(doc_id)
            cents.append(_summary_vectors(str(meta["_summary"]), self.dim))
            self._n[doc_id] = int(meta["_n"])
            parts = meta.get("_parts")
            if parts:
                self._parts[doc_id] = tuple(int(v) for v in parts)
        self._index.add(ids, cents)

    def _save_summaries(self) -> None:
        """Save the first stage to the cache so the next open need not read every record from Chroma."""
        if self._index is None or self.dim is None:
            return
        arrays = self._index.export()
        ids = arrays["ids"].tolist()
        arrays["counts"] = np.array([self._n.get(i, 0) for i in ids], dtype=np.int64)
        arrays["part_ids"] = np.array(list(self._parts), dtype="U64")
        arrays["parts"] = np.array([json.dumps(list(v)) for v in self._parts.values()], dtype="U4096")
        self.cache.save_summaries(arrays)
        self.cache.save()

    @_synchronized
    def refresh(self) -> None:
        """Apply what other writers committed since we last looked (the change feed): new, replaced, deleted."""
        if not self._loaded:
            self._load()
            return
        changes = self.engine.changes(self.cache.position, skip=self.cache.seen)
        if not changes:
            return
        if self.dim is None or self._index is None:  # the first documents came from another writer
            self._manifest = self.engine.read_manifest() or self._manifest
            self._loaded = False
            self._load()
            return
        touched = list(dict.fromkeys(i for c in changes for i in c.ids))
        self._forget(touched)
        live = self.engine.records([c for c in touched]) if touched else {}
        self._ingest(live)
        self.cache.seen.update(c.key for c in changes)
        self.cache.position = max(self.cache.position, max(c.seq for c in changes))
        self.cache.mark_dirty()
        if len(touched) > 100:
            self._save_summaries()

    def _advance(self, seq: int) -> None:
        """After our own commit: the feed position moves past it (we were up to date just before it)."""
        self.cache.seen.update(self.engine.last_keys)
        self.cache.position = max(self.cache.position, seq)
        self.cache.mark_dirty()

    def _forget(self, ids: Sequence[str]) -> None:
        if self._index is not None:
            self._index.remove(ids)
        for doc_id in ids:
            self._n.pop(doc_id, None)
            self._parts.pop(doc_id, None)
            self._meta_cache.pop(doc_id, None)
            try:
                self.layout.cached_grid(doc_id).unlink(missing_ok=True)
            except (OSError, DocumentNotFoundError):
                pass
        self.cache.drop(ids)

    # ----------------------------------------------------------------- writes
    @_synchronized
    def add(
        self,
        ids: Sequence[str],
        vectors: Sequence[np.ndarray],
        metadatas: Sequence[Mapping[str, Any]],
        texts: Sequence[str | None] | None = None,
        parts: Sequence[Sequence[int] | None] | None = None,
        *,
        anchors: Sequence[np.ndarray | None] | None = None,
        grids: Sequence[bytes | None] | None = None,
    ) -> None:
        """Insert or replace documents: ``vectors[i]`` is ``[n_i, dim]`` (unit rows, as encoders give).

        ``texts``: the text kept with each record. ``parts[i]`` splits document
        ``i``'s rows into consecutive parts (one per page in page mode); search
        scores each part and aggregates. ``anchors[i]``: for pooled vectors,
        the encoder token each row stands for (evidence maps). ``grids[i]``:
        the grid preview's bytes. Vectors are stored as int8 with a scale per row.
        """
        self._require_writer()
        n_docs = len(ids)
        if not (n_docs == len(vectors) == len(metadatas)) or (texts is not None and len(texts) != n_docs):
            raise ValueError("ids, vectors, metadatas (and texts) must have the same length")
        if len(set(ids)) != n_docs:
            raise ValueError("duplicate ids in one add() call")
        if not ids:
            return
        mats = [np.asarray(v, dtype=np.float32) for v in vectors]
        dim = self.dim or mats[0].shape[1]
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
        if self.dim is None:
            self._manifest = self.engine.read_manifest() or self._manifest
            if self.dim is None:
                self._manifest.update(dim=dim, format=STORE_FORMAT)
                self.engine.write_manifest(self._manifest)
        self._ensure_loaded()
        if self._index is None:
            self._index = CentroidIndex(self.n_centroids, dim)
        records, cents, packed = [], [], {}
        for i, (doc_id, m, meta) in enumerate(zip(ids, mats, metadatas)):
            c = document_centroids(m, self.n_centroids)
            anchor = None if anchors is None else anchors[i]
            data = pack_vectors(m, anchor)
            mean = m.mean(axis=0)
            rec = _check_metadata(doc_id, meta)
            rec.update({"_n": int(m.shape[0]), "_summary": _summary_text(c), "_vb": len(data)})
            split = None if parts is None else parts[i]
            if split is not None and len(split) > 1:
                rec["_parts"] = [int(v) for v in split]
            grid = None if grids is None else grids[i]
            if grid is not None:
                rec["_gb"] = len(grid)
            text = "" if texts is None else (texts[i] or "")
            records.append(DocumentRecord(doc_id, rec, text, mean / max(float(np.linalg.norm(mean)), 1e-12), data, grid))
            cents.append(_summary_vectors(rec["_summary"], dim))
            packed[doc_id] = data
        seq = self.engine.write(records)
        self._advance(seq)
        self._forget(list(ids))
        self._index.add(list(ids), cents)
        for rec in records:
            self._n[rec.id] = int(rec.metadata["_n"])
            if "_parts" in rec.metadata:
                self._parts[rec.id] = tuple(rec.metadata["_parts"])
        self.cache.put(packed)

    @_synchronized
    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id (records, vectors, grids); returns how many existed."""
        self._require_writer()
        self._ensure_loaded()
        present = [i for i in dict.fromkeys(ids) if i in self._n]
        if present:
            self._advance(self.engine.delete(present))
            self._forget(present)
        return len(present)

    @_synchronized
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Replace the public metadata of existing documents, keeping their vectors."""
        self._require_writer()
        old = self.engine.records(ids)
        new = []
        for doc_id, meta in zip(ids, metadatas):
            if doc_id not in old:
                raise DocumentNotFoundError(doc_id, self.path)
            rec = _check_metadata(doc_id, meta)
            rec.update({k: v for k, v in old[doc_id].items() if k.startswith(_INTERNAL_PREFIX)})
            new.append({**{k: None for k in old[doc_id]}, **rec})
        if new:
            self._advance(self.engine.update_metadata(list(ids), new))
            for doc_id in ids:
                self._meta_cache.pop(doc_id, None)

    # ------------------------------------------------------------------ reads
    @_synchronized
    def count(self) -> int:
        self._ensure_loaded()
        return len(self._n)

    @_synchronized
    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """All document ids, or those whose metadata matches a Chroma ``where`` filter."""
        where = check_where(where)
        self._ensure_loaded()
        if where is None:
            return list(self._n)
        return [i for i in self.engine.ids(where) if i in self._n]

    @_synchronized
    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        """Stored document ids by source path, for ``sources`` (one Chroma query, however many paths)."""
        self._ensure_loaded()
        found = self.engine.ids_by_source(sources)
        return {src: kept for src, ids in found.items() if (kept := [i for i in ids if i in self._n])}

    @_synchronized
    def __contains__(self, doc_id: object) -> bool:
        self._ensure_loaded()
        return doc_id in self._n

    @_synchronized
    def known(self, doc_id: str) -> bool:
        """Whether a document is stored, as of this process's last look (no change-feed query).

        What indexing asks per file: this process's own commits are always
        known; a document another writer adds meanwhile is written again
        (records are keyed by content, so that is harmless), and the feed
        query ``in`` makes would cost a Chroma round trip per file.
        """
        if not self._loaded:
            self._load()
        return doc_id in self._n

    def _packed(self, ids: Sequence[str]) -> dict[str, bytes]:
        """Packed vectors from the cache, fetching what it lacks from Chroma (and caching it)."""
        out = self.cache.get_many(ids)
        missing = [doc_id for doc_id in ids if doc_id not in out]
        if missing:
            fetched = self.engine.payload(missing, "v")
            self.cache.put(fetched)
            out.update(fetched)
        return out

    def _unpacked(self, doc_id: str, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        assert self.dim is not None
        return unpack_vectors(data, self.dim, self._n[doc_id])

    @_synchronized
    def vectors(self, doc_id: str) -> np.ndarray:
        """The stored ``[n, dim]`` multi-vector of a document, as float32 (dequantized)."""
        return self.vectors_with_anchors(doc_id)[0]

    @_synchronized
    def vectors_with_anchors(self, doc_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored vectors and, for pooled vectors, the encoder token each stands for (else None)."""
        self._ensure_loaded()
        if doc_id not in self._n:
            raise DocumentNotFoundError(doc_id, self.path)
        data = self._packed([doc_id]).get(doc_id)
        if data is None:
            self._check_deleted([doc_id])
            raise DocumentNotFoundError(doc_id, self.path)
        q, scale, anchors = self._unpacked(doc_id, data)
        return dequantize(q, scale), anchors

    @_synchronized
    def get(self, ids: Sequence[str] | None = None, *, include_vectors: bool = False) -> list[StoredDocument]:
        """Records by id (missing ids are skipped), or all records."""
        self._ensure_loaded()
        wanted = list(self._n) if ids is None else [i for i in ids if i in self._n]
        records = self.engine.records(wanted, include_summary=False) if wanted else {}
        return [
            StoredDocument(
                id=doc_id,
                metadata=_public(records[doc_id]),
                n_vectors=self._n[doc_id],
                vectors=self.vectors(doc_id) if include_vectors else None,
                parts=self._parts.get(doc_id, (self._n[doc_id],)),
            )
            for doc_id in wanted
            if doc_id in records
        ]

    def iter_documents(self, where: Mapping[str, Any] | None = None, *, page: int = 500) -> Iterator[StoredDocument]:
        """Every stored document (or those matching ``where``), a page of ``page`` records at a time.

        Memory stays at one page whatever the store's size; documents deleted while iterating
        are skipped, and one added meanwhile may or may not be seen.
        """
        if page < 1:
            raise ValueError("page must be >= 1")
        where = check_where(where)
        offset = 0
        while True:
            with self._mutex:
                self._ensure_loaded()
                rows = self.engine.records_page(where, page, offset)
                found = [
                    StoredDocument(i, _public(meta), self._n[i], parts=self._parts.get(i, (self._n[i],)))
                    for i, meta in rows
                    if i in self._n
                ]
            yield from found
            if len(rows) < page:
                return
            offset += page

    @_synchronized
    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The stored text of documents (empty string when none was kept)."""
        return self.engine.texts(ids) if ids else {}

    @_synchronized
    def grid(self, doc_id: str) -> bytes:
        """A document's grid preview bytes (cached locally on first read); DocumentNotFoundError when it has none."""
        path = self.layout.cached_grid(doc_id)
        self._ensure_loaded()
        if doc_id not in self._n:
            raise DocumentNotFoundError(doc_id, self.path)
        try:
            return path.read_bytes()
        except OSError:
            pass
        data = self.engine.payload([doc_id], "g").get(doc_id)
        if data is None:
            raise DocumentNotFoundError(doc_id, self.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            pass
        return data

    @_synchronized
    def total_vectors(self) -> int:
        self._ensure_loaded()
        return sum(self._n.values())

    def images_encoded(self) -> int:
        """Images behind the stored vectors: one per document, one per page for multi-part (page-mode) records."""
        self._ensure_loaded()
        return len(self._n) + sum(len(p) - 1 for p in self._parts.values())

    def bytes_on_disk(self) -> int:
        """Bytes under the store directory (Chroma's files in embedded mode, and the local cache)."""
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += (Path(root) / name).stat().st_size
                except OSError:
                    pass
        return total

    def bytes_by_part(self) -> dict[str, int]:
        """Payload bytes per document part, summed over the store (what a search reads, and the grids)."""
        recs = self.engine.records(include_summary=True)
        vectors = sum(int(m.get("_vb", 0)) for m in recs.values())
        summaries = sum(len(base64.b64decode(str(m["_summary"]))) for m in recs.values() if "_summary" in m)
        grids = sum(int(m.get("_gb", 0)) for m in recs.values())
        return {"vectors": vectors, "first_stage": summaries, "grids": grids}

    def describe(self, *, model: str, settings: Mapping[str, Any], page_cache: Mapping[str, int]) -> dict[str, Any]:
        """What the store holds and how it was built (``docpc info``); arguments fill what the store cannot know."""
        recorded = self.settings
        encoder = recorded.get("encoder") or {}
        identity = ModelIdentity.from_settings(encoder)
        index = recorded.get("index") or dict(settings)
        docs = self.count()
        parts = self.bytes_by_part()
        on_disk = self.bytes_on_disk()
        per_doc = {k: (round(v / docs) if docs else 0) for k, v in parts.items()}
        return {
            "path": str(self.path),
            "server": f"{self.host}" if self.host else None,
            "collection": self.collection_name,
            "documents": docs,
            "images_encoded": self.images_encoded(),
            "vectors": self.total_vectors(),
            "bytes_on_disk": on_disk,
            "bytes_grid_images": parts["grids"],
            "bytes_cache": self.cache.bytes(),
            "bytes_per_document": {**per_doc, "on_disk": round(on_disk / docs) if docs else 0},
            "model": identity.hub_id or identity.path or identity.model_id or model,
            "model_fingerprint": identity.fingerprint,
            "model_revision": identity.revision,
            "model_path": identity.path,
            "family": encoder.get("family"),
            "dim": self.dim,
            "max_num_visual_tokens": encoder.get("max_num_visual_tokens"),
            "mode": index.get("mode", "grid"),
            "strategy": index.get("strategy"),
            "pages": index.get("pages"),
            "grid": "x".join(str(v) for v in index.get("grid", [])) or None,
            "cell_size": index.get("cell_size"),
            "page_size": index.get("page_size"),
            "pool_factor": index.get("pool_factor"),
            "page_cache_pages": page_cache.get("pages", 0),
            "page_cache_bytes": page_cache.get("bytes", 0),
        }

    # ----------------------------------------------------------------- search
    def search(self, query: np.ndarray, top_k: int = 10, **options: Any) -> list[ScoredDocument]:
        """Top documents for one query ``[n_tokens, dim]`` by MaxSim, best first (options as :meth:`search_batch`)."""
        return self.search_batch([query], top_k, **options)[0]

    @_synchronized
    def search_batch(
        self,
        queries: Sequence[np.ndarray],
        top_k: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
        ids: Iterable[str] | None = None,
        n_candidates: int | None = None,
        exhaustive: bool = False,
        aggregate: str = "max",
    ) -> list[list[ScoredDocument]]:
        """Top documents per query by MaxSim, best first.

        ``where`` is a Chroma metadata filter, ``ids`` restricts to given
        documents. When the (filtered) corpus is no larger than the number of
        candidates, or ``exhaustive`` is set, every document is scored exactly.
        Multi-part records (page mode) score each part and combine them with
        ``aggregate``: ``max`` (MaxP), ``mean`` (AvgP) or ``sum`` (SumP).
        """
        if top_k < 0:
            raise ValueError("top_k must be >= 0")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        self._ensure_loaded()
        if top_k == 0 or not self._n or self._index is None:
            return [[] for _ in queries]
        qs = [np.asarray(q, dtype=np.float32) for q in queries]
        for q in qs:
            if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != self.dim:
                raise ValueError(f"query must be a non-empty [n_tokens, {self.dim}] matrix, got {q.shape}")
        allowed: set[str] | None = None
        if where is not None:
            allowed = set(self.ids(where))
        if ids is not None:
            id_set = {i for i in ids if i in self._n}
            allowed = id_set if allowed is None else allowed & id_set
        pool = list(self._n) if allowed is None else [i for i in self._n if i in allowed]
        if not pool:
            return [[] for _ in queries]
        out: list[list[ScoredDocument]] = []
        for q in qs:
            # A document deleted by another writer between the first stage and the record fetch is
            # left out and its slot filled by the next candidate: a reader never fails on a writer.
            gone: set[str] = set()
            for _attempt in range(4):
                live = pool if not gone else [i for i in pool if i not in gone]
                keep = allowed if not gone else {i for i in (allowed if allowed is not None else pool) if i not in gone}
                with _single_blas_thread():
                    hits = self._search_one(q, live, keep, top_k, max(n_candidates or self._candidates(q), top_k),
                                            exhaustive, aggregate)
                records = self._public_metadata([d for d, _, _ in hits])
                missing = {d for d, _, _ in hits if d not in records}
                found = [ScoredDocument(d, s, dict(records[d]), parts) for d, s, parts in hits if d in records]
                if len(found) >= min(top_k, len(live) - len(missing)) or not missing - gone:
                    break
                gone |= missing
            out.append(found[:top_k])
        return out

    def _candidates(self, query: np.ndarray) -> int:
        """Candidates to score exactly for a query of ``query.shape[0]`` tokens (see the module docstring)."""
        return int(min(4 * self.n_candidates, max(self.n_candidates, CANDIDATE_TOKEN_BUDGET // query.shape[0])))

    def _public_metadata(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Public metadata of result documents, remembered (the change feed forgets changed ones)."""
        missing = [i for i in ids if i not in self._meta_cache]
        if missing:
            for doc_id, meta in self.engine.records(missing, include_summary=False).items():
                self._meta_cache[doc_id] = _public(meta)
            while len(self._meta_cache) > _META_CACHE:
                self._meta_cache.pop(next(iter(self._meta_cache)))
        return {i: self._meta_cache[i] for i in ids if i in self._meta_cache}

    def _search_one(
        self,
        q: np.ndarray,
        pool: list[str],
        allowed: set[str] | None,
        top_k: int,
        n_cand: int,
        exhaustive: bool,
        aggregate: str,
    ) -> list[tuple[str, float, tuple[float, ...]]]:
        """First stage (unless exhaustive or the pool is small), then exact int8 MaxSim over the candidates."""
        assert self._index is not None
        cand = pool if exhaustive or len(pool) <= n_cand else self._index.top(q, n_cand, allowed)
        best: list[tuple[float, str, tuple[float, ...]]] = []
        for start in range(0, len(cand), _SCORE_CHUNK):
            chunk = cand[start : start + _SCORE_CHUNK]
            scores, per_part = self._score(q, chunk, aggregate)
            best.extend(  # -inf: deleted meanwhile (see _score)
                (float(s), d, tuple(float(v) for v in p)) for s, d, p in zip(scores.tolist(), chunk, per_part) if s > -np.inf
            )
            best = sorted(best, key=lambda x: (-x[0], x[1]))[:top_k]
        return [(d, s, p) for s, d, p in best]

    def _score(self, query: np.ndarray, ids: Sequence[str], aggregate: str) -> tuple[np.ndarray, list[np.ndarray]]:
        """Exact aggregate scores ``[len(ids)]`` and each document's part scores, straight from int8 rows."""
        packed = self._packed(ids)
        absent = [doc_id for doc_id in ids if doc_id not in packed]
        if absent:  # deleted meanwhile: scored -inf, so the search leaves them out and fills their slots
            self._check_deleted(absent)
        rows, scales, lengths, counts = [], [], [], []
        kept = [doc_id for doc_id in ids if doc_id in packed]
        if not kept:
            return np.full(len(ids), -np.inf, dtype=np.float32), [np.zeros(0, np.float32) for _ in ids]
        for doc_id in kept:
            data = packed[doc_id]
            q8, scale, _ = self._unpacked(doc_id, data)
            rows.append(q8)
            scales.append(scale)
            split = self._parts.get(doc_id) or (len(q8),)
            lengths.extend(split)
            counts.append(len(split))
        flat = maxsim_int8(query, np.concatenate(rows), np.concatenate(scales), lengths)
        if len(lengths) == len(kept):  # one part each: the part score is the document score
            scores, per_part = flat.astype(np.float32, copy=False), [flat[i : i + 1] for i in range(len(kept))]
        else:
            per_part = np.split(flat, np.cumsum(counts)[:-1])
            reduce = {"max": np.max, "mean": np.mean, "sum": np.sum}[aggregate]
            scores = np.array([reduce(p) for p in per_part], dtype=np.float32)
        if not absent:
            return scores, per_part
        by_id = dict(zip(kept, zip(scores.tolist(), per_part)))
        empty = (float("-inf"), np.zeros(0, np.float32))
        return (np.array([by_id.get(i, empty)[0] for i in ids], dtype=np.float32),
                [by_id.get(i, empty)[1] for i in ids])

    def _check_deleted(self, ids: Sequence[str]) -> None:
        """Payload missing: fine for documents deleted meanwhile (their records are gone too), an error otherwise."""
        still = self.engine.records(list(ids), include_summary=False)
        if still:
            raise StoreError(
                f"store {self.path}: the vectors of document(s) {', '.join(sorted(still))} are missing from Chroma"
            )

    # --------------------------------------------------------------- lifetime
    @_synchronized
    def close(self) -> None:
        """Save the cache and release the writer lock; the store can be reopened afterwards."""
        if getattr(self, "_cache", None) is not None:
            if getattr(self, "_loaded", False) and getattr(self, "_index", None) is not None and self.cache.dirty:
                self._save_summaries()
            self.cache.close()
        if getattr(self, "_lock", None) is not None:
            self._lock.release()

    def __enter__(self) -> MultiVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

