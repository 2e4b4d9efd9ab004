"""Chroma-backed multi-vector store: one Chroma record per document, vectors in fp16 segments.

Paths come from :class:`~docpc_retrievers.store.layout.StoreLayout` (``store.json``,
``write.lock``, ``chroma/``, ``vectors/``).

Chroma is the record of what is indexed: one record per document with its
metadata (source, title, pages, layout, model, ...), a pointer into a vector
segment, and a mean-pooled unit vector as its Chroma embedding (so the
collection is also usable by plain Chroma tools and filters). A document's
full ``[n, dim]`` multi-vector and its centroid summary live in the segment.
Search has three stages: centroid MaxSim over every document in memory (see
candidates.py) keeps ``n_candidates``; their full vectors are scored in
float16 (``maxsim_half``); the best ``top_k + rescore_margin`` are scored
exactly in float32, and those exact scores are what search returns. With a Chroma
server (``host=...``) records live on the server and the vector segments in
the local directory.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from functools import wraps
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from docpc_retrievers.store.candidates import CentroidIndex, document_centroids
from docpc_retrievers.errors import DocumentNotFoundError, ModelMismatchError, SettingsMismatchError, StoreError
from docpc_retrievers.store.layout import StoreLayout, write_json_atomic
from docpc_retrievers.store.locking import WriterLock
from docpc_retrievers.scoring.maxsim import maxsim, maxsim_half
from docpc_retrievers.store.segments import SegmentReader, SegmentWriter

__all__ = ["AGGREGATES", "MultiVectorStore", "ScoredDocument", "StoredDocument", "STORE_FORMAT"]

logger = logging.getLogger(__name__)

STORE_FORMAT = 1
_INTERNAL_KEYS = ("_seg", "_off", "_n", "_nc", "_parts")
AGGREGATES = ("max", "mean", "sum")
_SETTINGS_KEY = "docpc_settings"


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
    return {k: v for k, v in metadata.items() if k not in _INTERNAL_KEYS}


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``, so a mismatch message names the exact setting."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def _replacing(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chroma merges metadata on upsert/update; a None for every dropped key makes it a replacement."""
    out = dict(new)
    for key in old or {}:
        out.setdefault(key, None)
    return out


def _check_metadata(doc_id: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in metadata.items():
        if key in _INTERNAL_KEYS or key.startswith("chroma:"):
            raise ValueError(f"document {doc_id}: metadata key {key!r} is reserved")
        if value is None:
            continue  # Chroma stores no None: an absent key means the same, in memory and on disk
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


class MultiVectorStore:
    """Per-document multi-vector embeddings with metadata, persisted in Chroma plus fp16 segments.

    Args:
        path: the store directory (created if missing).
        host, port, ssl, headers: use a Chroma server instead of the embedded one.
        collection: Chroma collection name.
        writable: take the single-writer lock; a second writer gets StoreLockedError.
        n_centroids: centroids kept per document for the first search stage.
        n_candidates: documents kept by the centroid stage and scored in float16.
        rescore_margin: beyond ``top_k``, how many float16 survivors are rescored
            exactly in float32 (returned scores are always exact).
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
        rescore_margin: int = 22,
    ) -> None:
        self.layout = StoreLayout.at(path)
        self.path = self.layout.root
        self.host = host
        self.n_centroids = n_centroids
        self.n_candidates = n_candidates
        self.rescore_margin = rescore_margin
        self._mutex = threading.RLock()
        self._lock = WriterLock(self.layout.lock) if writable else None
        manifest_path = self.layout.manifest
        if not writable and not manifest_path.exists():
            raise StoreError(f"no docpc store at {self.path} (missing {manifest_path.name}); index some documents first")
        self.path.mkdir(parents=True, exist_ok=True)
        if self._lock is not None:
            self._lock.acquire()
        try:
            self._manifest = self._load_manifest(collection)
            self.collection_name = str(self._manifest["collection"])
            self._client = self._make_client(host, port, ssl, headers)
            self._collection = self._client.get_or_create_collection(
                self.collection_name,
                embedding_function=None,
                configuration={"hnsw": {"space": "ip"}},
            )
        except BaseException:
            self.close()
            raise
        self._writer: SegmentWriter | None = None
        self._reader: SegmentReader | None = None
        self._index: CentroidIndex | None = None
        self._records: dict[str, dict[str, Any]] = {}
        self._loaded_generation = -1

    # ------------------------------------------------------------------ setup
    def _make_client(self, host: str | None, port: int, ssl: bool, headers: Mapping[str, str] | None) -> Any:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        if host is not None:
            return chromadb.HttpClient(host=host, port=port, ssl=ssl, headers=dict(headers or {}), settings=settings)
        return chromadb.PersistentClient(path=str(self.layout.chroma), settings=settings)

    def _load_manifest(self, collection: str) -> dict[str, Any]:
        path = self.layout.manifest
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise StoreError(f"{path} is unreadable: {exc}") from exc
            if data.get("format") != STORE_FORMAT:
                raise StoreError(f"{path}: store format {data.get('format')} is not supported (expected {STORE_FORMAT})")
            return data
        data = {"format": STORE_FORMAT, "collection": collection, "dim": None, "settings": {}, "generation": 0}
        write_json_atomic(path, data)
        return data

    def _save_manifest(self) -> None:
        self._manifest["generation"] = int(self._manifest.get("generation", 0)) + 1
        write_json_atomic(self.layout.manifest, self._manifest)
        self._loaded_generation = self._manifest["generation"]

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
        :class:`SettingsMismatchError` otherwise.

        ``section`` compares only that sub-dict (e.g. ``"encoder"`` for search).
        """
        recorded = self.settings
        if section is not None:
            recorded = recorded.get(section) or {}
        if not recorded:
            return
        have, want = _flatten(recorded), _flatten(settings)
        keys = [key for key in sorted(set(have) | set(want)) if have.get(key) != want.get(key)]
        diffs = [f"{key}: store has {have.get(key)!r}, got {want.get(key)!r}" for key in keys]
        if diffs:
            what = f"{section} settings" if section else "settings"
            hint = (
                "use the store's own model (omit --model) or index into a new store"
                if section == "encoder"
                else "these are fixed when a store is created; index into a new store to change them"
            )
            model = section == "encoder" or any(k.startswith("encoder.") for k in keys)
            error = ModelMismatchError if model else SettingsMismatchError
            raise error(f"store {self.path} was built with different {what} ({'; '.join(diffs)}); {hint}")

    @_synchronized
    def set_settings(self, settings: Mapping[str, Any]) -> None:
        """Record the settings on first write; later writes must match them."""
        self._require_writer()
        if self.settings:
            self.check_settings(settings)
            return
        self._manifest["settings"] = json.loads(json.dumps(dict(settings)))
        self._save_manifest()

    # ---------------------------------------------------------------- loading
    def _require_writer(self) -> None:
        if self._lock is None or not self._lock.held:
            raise StoreError(f"store {self.path} was opened read-only; open it with writable=True to change it")

    def _segments(self) -> SegmentReader:
        if self._reader is None:
            if self.dim is None:
                raise StoreError("store has no vectors yet")
            self._reader = SegmentReader(self.layout.vectors, self.dim)
        return self._reader

    @_synchronized
    def refresh(self) -> None:
        """Reload records when another writer changed the store since we last looked."""
        path = self.layout.manifest
        try:
            on_disk = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return
        if on_disk.get("generation") != self._loaded_generation:
            self._manifest = on_disk
            self._load_all()

    def _load_all(self) -> None:
        """Read every record from Chroma and rebuild the in-memory first stage."""
        self._records = {}
        self._index = None
        self._loaded_generation = int(self._manifest.get("generation", 0))
        if self.dim is None:
            return
        self._index = CentroidIndex(self.n_centroids, self.dim)
        total = self._collection.count()
        page = 5000
        for start in range(0, total, page):
            got = self._collection.get(include=["metadatas"], limit=page, offset=start)
            self._ingest(got["ids"], got["metadatas"])

    def _ingest(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        assert self._index is not None
        reader = self._segments()
        cents = []
        for doc_id, meta in zip(ids, metadatas):
            self._records[doc_id] = dict(meta)
            n, nc = int(meta["_n"]), int(meta["_nc"])
            cents.append(np.asarray(reader.read(str(meta["_seg"]), int(meta["_off"]) + n, nc), dtype=np.float32))
        self._index.add(list(ids), cents)

    def _ensure_loaded(self) -> None:
        if self._index is None and self.dim is not None:
            self._load_all()
        else:
            self.refresh()

    # ----------------------------------------------------------------- writes
    @_synchronized
    def add(
        self,
        ids: Sequence[str],
        vectors: Sequence[np.ndarray],
        metadatas: Sequence[Mapping[str, Any]],
        texts: Sequence[str | None] | None = None,
        parts: Sequence[Sequence[int] | None] | None = None,
    ) -> None:
        """Insert or replace documents: ``vectors[i]`` is ``[n_i, dim]`` (unit rows, as encoders give).

        ``texts`` (optional) is kept as the Chroma document text, e.g. the text
        layer of the selected pages. ``parts[i]`` (optional) splits document
        ``i``'s rows into consecutive parts of the given lengths (one per page in
        page mode); search then scores each part and aggregates. The batch is committed as a unit: vectors
        are made durable first, then the Chroma records that point at them.
        """
        self._require_writer()
        if not (len(ids) == len(vectors) == len(metadatas)) or (texts is not None and len(texts) != len(ids)):
            raise ValueError("ids, vectors, metadatas (and texts) must have the same length")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate ids in one add() call")
        if not ids:
            return
        mats = [np.asarray(v, dtype=np.float32) for v in vectors]
        dim = self.dim or mats[0].shape[1]
        if parts is not None and len(parts) != len(ids):
            raise ValueError("parts must have one entry per document")
        for i, (doc_id, m) in enumerate(zip(ids, mats)):
            split = None if parts is None else parts[i]
            if split is not None and (sum(split) != m.shape[0] or min(split, default=0) < 1):
                raise ValueError(f"document {doc_id}: parts {list(split)} do not split its {m.shape[0]} rows")
            if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] != dim:
                raise ValueError(f"document {doc_id}: expected a non-empty [n, {dim}] matrix, got {m.shape}")
            if not np.isfinite(m).all():
                raise ValueError(f"document {doc_id}: embedding contains NaN or inf")
        if self.dim is None:
            self._manifest["dim"] = dim
            self._save_manifest()
        self._ensure_loaded()
        if self._writer is None:
            self._writer = SegmentWriter(self.layout.vectors, dim)
        writer = self._writer

        records: list[dict[str, Any]] = []
        pooled = np.empty((len(ids), dim), dtype=np.float32)
        cents = []
        for i, (doc_id, m, meta) in enumerate(zip(ids, mats, metadatas)):
            c = document_centroids(m, self.n_centroids)
            offset = writer.append(m)
            writer.append(c)
            mean = m.mean(axis=0)
            pooled[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
            rec = _check_metadata(doc_id, meta)
            rec.update({"_seg": writer.name, "_off": offset, "_n": int(m.shape[0]), "_nc": int(c.shape[0])})
            split = None if parts is None else parts[i]
            if split is not None and len(split) > 1:
                rec["_parts"] = [int(v) for v in split]
            records.append(rec)
            cents.append(c)
        writer.flush()

        max_batch = self._client.get_max_batch_size()
        for s in range(0, len(ids), max_batch):
            e = s + max_batch
            docs = [""] * len(ids[s:e]) if texts is None else [t or "" for t in texts[s:e]]
            metas = [_replacing(r, self._records.get(i)) for i, r in zip(ids[s:e], records[s:e])]
            self._collection.upsert(ids=list(ids[s:e]), embeddings=pooled[s:e], metadatas=metas, documents=docs)
        for doc_id, rec in zip(ids, records):
            self._records[doc_id] = rec
        assert self._index is not None
        self._index.add(list(ids), cents)
        self._save_manifest()

    @_synchronized
    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many existed."""
        self._require_writer()
        self._ensure_loaded()
        present = [i for i in dict.fromkeys(ids) if i in self._records]
        if present:
            self._collection.delete(ids=present)
            for doc_id in present:
                self._records.pop(doc_id, None)
            if self._index is not None:
                self._index.remove(present)
            self._save_manifest()
        return len(present)

    @_synchronized
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Replace the public metadata of existing documents, keeping their vectors."""
        self._require_writer()
        self._ensure_loaded()
        new = []
        for doc_id, meta in zip(ids, metadatas):
            if doc_id not in self._records:
                raise DocumentNotFoundError(doc_id, self.path)
            rec = _check_metadata(doc_id, meta)
            rec.update({k: self._records[doc_id][k] for k in _INTERNAL_KEYS if k in self._records[doc_id]})
            new.append(rec)
        if new:
            self._collection.update(
                ids=list(ids), metadatas=[_replacing(r, self._records[i]) for i, r in zip(ids, new)]
            )
            for doc_id, rec in zip(ids, new):
                self._records[doc_id] = rec
            self._save_manifest()

    # ------------------------------------------------------------------ reads
    @_synchronized
    def count(self) -> int:
        self._ensure_loaded()
        return len(self._records)

    @_synchronized
    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """All document ids, or those whose metadata matches a Chroma ``where`` filter."""
        self._ensure_loaded()
        if where is None:
            return list(self._records)
        got = self._collection.get(where=dict(where), include=[])
        return [i for i in got["ids"] if i in self._records]

    @_synchronized
    def __contains__(self, doc_id: object) -> bool:
        self._ensure_loaded()
        return doc_id in self._records

    @_synchronized
    def vectors(self, doc_id: str) -> np.ndarray:
        """The stored ``[n, dim]`` multi-vector of a document, as float32."""
        self._ensure_loaded()
        rec = self._records.get(doc_id)
        if rec is None:
            raise DocumentNotFoundError(doc_id, self.path)
        return self._read_vectors(rec)

    def _read_raw(self, rec: Mapping[str, Any]) -> np.ndarray:
        """The stored float16 rows of a record (a memory-mapped view, no copy)."""
        return self._segments().read(str(rec["_seg"]), int(rec["_off"]), int(rec["_n"]))

    def _read_vectors(self, rec: Mapping[str, Any]) -> np.ndarray:
        return np.asarray(self._read_raw(rec), dtype=np.float32)

    @_synchronized
    def get(self, ids: Sequence[str] | None = None, *, include_vectors: bool = False) -> list[StoredDocument]:
        """Records by id (missing ids are skipped), or all records."""
        self._ensure_loaded()
        wanted = list(self._records) if ids is None else [i for i in ids if i in self._records]
        return [
            StoredDocument(
                id=doc_id,
                metadata=_public(self._records[doc_id]),
                n_vectors=int(self._records[doc_id]["_n"]),
                vectors=self._read_vectors(self._records[doc_id]) if include_vectors else None,
                parts=tuple(self._records[doc_id].get("_parts") or (int(self._records[doc_id]["_n"]),)),
            )
            for doc_id in wanted
        ]

    @_synchronized
    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The stored text of documents (empty string when none was kept)."""
        if not ids:
            return {}
        got = self._collection.get(ids=list(ids), include=["documents"])
        return {i: (d or "") for i, d in zip(got["ids"], got["documents"] or [])}

    @_synchronized
    def total_vectors(self) -> int:
        self._ensure_loaded()
        return sum(int(r["_n"]) for r in self._records.values())

    def bytes_on_disk(self) -> int:
        """Bytes used under the store directory (Chroma files and vector segments)."""
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += (Path(root) / name).stat().st_size
                except OSError:
                    pass
        return total

    def describe(
        self, *, model: str, settings: Mapping[str, Any], grid_bytes: int, page_cache: Mapping[str, int]
    ) -> dict[str, Any]:
        """What the store holds and how it was built (``docpc info``); arguments fill what the store cannot know."""
        recorded = self.settings
        encoder = recorded.get("encoder") or {}
        index = recorded.get("index") or dict(settings)
        return {
            "path": str(self.path),
            "documents": self.count(),
            "images_encoded": sum(len(d.parts) for d in self.get()),
            "vectors": self.total_vectors(),
            "bytes_on_disk": self.bytes_on_disk(),
            "bytes_grid_images": grid_bytes,
            "model": encoder.get("model_id", model),
            "family": encoder.get("family"),
            "dim": self.dim,
            "max_num_visual_tokens": encoder.get("max_num_visual_tokens"),
            "mode": index.get("mode", "grid"),
            "strategy": index.get("strategy"),
            "pages": index.get("pages"),
            "grid": "x".join(str(v) for v in index.get("grid", [])) or None,
            "cell_size": index.get("cell_size"),
            "page_size": index.get("page_size"),
            "page_cache_pages": page_cache.get("pages", 0),
            "page_cache_bytes": page_cache.get("bytes", 0),
        }

    # ----------------------------------------------------------------- search
    def search(
        self,
        query: np.ndarray,
        top_k: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
        ids: Iterable[str] | None = None,
        n_candidates: int | None = None,
        exhaustive: bool = False,
        aggregate: str = "max",
    ) -> list[ScoredDocument]:
        """Top documents for one query ``[n_tokens, dim]`` by MaxSim, best first.

        ``where`` is a Chroma metadata filter, ``ids`` restricts to given
        documents. When the (filtered) corpus is no larger than the number of
        candidates, or ``exhaustive`` is set, every document is scored exactly.
        Multi-part records (page mode) score each part and combine them with
        ``aggregate``: ``max`` (MaxP), ``mean`` (AvgP) or ``sum`` (SumP).
        """
        return self.search_batch(
            [query], top_k, where=where, ids=ids, n_candidates=n_candidates, exhaustive=exhaustive, aggregate=aggregate
        )[0]

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
        """:meth:`search` for several queries at once (one list of hits per query)."""
        if top_k < 0:
            raise ValueError("top_k must be >= 0")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        self._ensure_loaded()
        if top_k == 0 or not self._records or self._index is None:
            return [[] for _ in queries]
        qs = [np.asarray(q, dtype=np.float32) for q in queries]
        for q in qs:
            if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != self.dim:
                raise ValueError(f"query must be a non-empty [n_tokens, {self.dim}] matrix, got {q.shape}")
        allowed: set[str] | None = None
        if where is not None:
            allowed = set(self.ids(where))
        if ids is not None:
            id_set = {i for i in ids if i in self._records}
            allowed = id_set if allowed is None else allowed & id_set
        pool = list(self._records) if allowed is None else [i for i in self._records if i in allowed]
        if not pool:
            return [[] for _ in queries]
        n_cand = max(n_candidates or self.n_candidates, top_k)
        with _single_blas_thread():
            return [self._search_one(q, pool, allowed, top_k, n_cand, exhaustive, aggregate) for q in qs]

    def _search_one(
        self,
        q: np.ndarray,
        pool: list[str],
        allowed: set[str] | None,
        top_k: int,
        n_cand: int,
        exhaustive: bool,
        aggregate: str,
    ) -> list[ScoredDocument]:
        assert self._index is not None
        if exhaustive or len(pool) <= n_cand:
            cand = pool
        else:
            cand = self._index.top(q, n_cand, allowed)
        if not exhaustive and len(cand) > top_k + self.rescore_margin:
            # Screen in float16, then score the survivors exactly in float32.
            rough, _ = self._score(q, cand, aggregate, half=True)
            keep = np.argpartition(-rough, top_k + self.rescore_margin - 1)[: top_k + self.rescore_margin]
            cand = [cand[i] for i in keep]
        scores, per_part = self._score(q, cand, aggregate, half=False)
        order = sorted(range(len(cand)), key=lambda i: (-scores[i], cand[i]))[:top_k]
        return [
            ScoredDocument(
                cand[i],
                float(scores[i]),
                _public(self._records[cand[i]]),
                tuple(float(v) for v in per_part[i]),
            )
            for i in order
        ]

    def _score(
        self, query: np.ndarray, ids: Sequence[str], aggregate: str, *, half: bool
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Aggregate scores ``[len(ids)]`` and each document's part scores, float16 screen or exact."""
        pieces: list[np.ndarray] = []
        counts: list[int] = []
        for doc_id in ids:
            rec = self._records[doc_id]
            rows = self._read_raw(rec)
            split = rec.get("_parts")
            if split:
                bounds = np.cumsum([0, *split])
                pieces.extend(rows[a:b] for a, b in zip(bounds[:-1], bounds[1:]))
                counts.append(len(split))
            else:
                pieces.append(rows)
                counts.append(1)
        flat = maxsim_half(query, pieces) if half else maxsim([query], pieces)[0]
        if len(pieces) == len(ids):  # one part each: the part score is the document score
            return flat.astype(np.float32, copy=False), [flat[i : i + 1] for i in range(len(ids))]
        per_doc = np.split(flat, np.cumsum(counts)[:-1])
        reduce = {"max": np.max, "mean": np.mean, "sum": np.sum}[aggregate]
        return np.array([reduce(p) for p in per_doc], dtype=np.float32), per_doc

    # --------------------------------------------------------------- lifetime
    @_synchronized
    def close(self) -> None:
        """Flush and release the writer lock; the store can be reopened afterwards."""
        if getattr(self, "_writer", None) is not None:
            self._writer.close()
            self._writer = None
        if getattr(self, "_reader", None) is not None:
            self._reader.close()
            self._reader = None
        if getattr(self, "_lock", None) is not None:
            self._lock.release()

    def __enter__(self) -> MultiVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
