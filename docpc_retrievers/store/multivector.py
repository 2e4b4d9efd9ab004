"""The multi-vector store: every document's compact multi-vector, summary, metadata, text and grid, in Chroma.

Chroma is the source of truth (engine.py); a local cache (cache.py) keeps what
a search reads, refilled from Chroma when missing, stale or deleted, and the
change feed tells readers what other writers did (view.py). This module keeps
records, writes and statistics; search (store/search/) keeps candidates with a
first stage behind a small interface and scores them exactly from int8 rows.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.blas_threads import single_blas_thread
from docpc_retrievers.config import AGGREGATES, check_candidates
from docpc_retrievers.errors import DocumentNotFoundError, StoreError
from docpc_retrievers.filters import check_where
from docpc_retrievers.store import statistics
from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.codec import dequantize
from docpc_retrievers.store.chroma_client import chroma_client, require_collection
from docpc_retrievers.store.engine import READABLE_FORMATS, STORE_FORMAT, ChromaEngine, payload_packing
from docpc_retrievers.store.hit_reads import grid_bytes, hit_reader
from docpc_retrievers.store.layout import StoreLayout, write_json_atomic
from docpc_retrievers.store.locking import WriterLock, synchronized
from docpc_retrievers.store.records import (
    MetadataCache,
    ScoredDocument,
    StoredDocument,
    build_record,
    check_batch,
    parts_of,
    public,
    replaced_metadata,
)
from docpc_retrievers.store.search import SearchConfig
from docpc_retrievers.store.settings import check_settings, with_current_identity
from docpc_retrievers.store.view import StoreView, checked_queries

__all__ = ["AGGREGATES", "MultiVectorStore", "ScoredDocument", "StoredDocument", "STORE_FORMAT"]



logger = logging.getLogger(__name__)

#: Documents a writer with no local snapshot still reads whole to open its view: one hosted Chroma read.
_CHEAP_OPEN = 300

class MultiVectorStore:
    """Per-document multi-vector embeddings with metadata, text and grid previews, kept in Chroma.

    Args:
        path: the store directory: Chroma's files (embedded mode) and the local cache.
        host, port, ssl, headers: use a Chroma server (or Chroma's distributed deployment)
            instead of the embedded one; ``path`` then only holds the cache.
        collection: Chroma collection name (two companions are named after it).
        writable: take the single-writer lock (embedded mode; a server has no local lock).
        search: how this process searches the store (backend and its settings; see store/search/config.py).
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
        search: SearchConfig | None = None,
        allow_old_format: bool = False,
    ) -> None:
        self.layout = StoreLayout.at(path)
        self.path = self.layout.root
        self.host = host
        self.search_config = search or SearchConfig()
        self._mutex = threading.RLock()
        self._writable = writable
        local = self.layout.read_manifest()
        if local.get("format") == 1 and not allow_old_format:
            raise StoreError(
                f"store {self.path} was written by docpc-retrievers 0.1 (format 1: vectors and grids in local "
                f"files); convert it in place with `docpc migrate {self.path}`"
            )
        if host is None and not writable and not self.layout.chroma.exists():
            raise StoreError(f"no docpc store at {self.path} (missing {self.layout.manifest.name}); index some documents first")
        if writable and host is None:
            self.layout.check_can_create()
        self._lock = WriterLock(self.layout.lock) if writable and host is None else None
        self._cache: VectorCache | None = None
        try:
            if self._lock is not None:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock.acquire()
            self.collection_name = str(local.get("collection") or collection)
            self._client = chroma_client(self.layout.chroma, host, port, ssl, headers)
            if not writable and host is not None:
                require_collection(self._client, self.collection_name, host)
            self.engine = ChromaEngine(self._client, self.collection_name)
            self._manifest = self.engine.read_manifest()
            store_format = self._manifest.get("format", STORE_FORMAT)
            if store_format not in READABLE_FORMATS and not allow_old_format:
                raise StoreError(f"store {self.path}: format {store_format} is not supported by this version"
                                 f" (it reads formats {', '.join(map(str, READABLE_FORMATS))})")
            self.engine.packing = payload_packing(int(store_format))
            if writable:
                self.path.mkdir(parents=True, exist_ok=True)
                if host is None and not self.layout.manifest.exists():
                    write_json_atomic(self.layout.manifest, {"format": STORE_FORMAT, "collection": self.collection_name})
            self._cache = VectorCache(self.layout.cache, self.engine.identity)
        except BaseException:
            self.close()
            raise
        self._view: StoreView | None = None
        self._meta_cache = MetadataCache(lambda ids: self.engine.records(ids, include_summary=False))
        self._loaded = False

    @property
    def cache(self) -> VectorCache:
        assert self._cache is not None
        return self._cache

    @property
    def dim(self) -> int | None:
        dim = self._manifest.get("dim")
        return int(dim) if dim is not None else None

    @property
    def settings(self) -> dict[str, Any]:
        """What the store was built with (encoder and index settings)."""
        return dict(self._manifest.get("settings") or {})

    def check_settings(self, settings: Mapping[str, Any], *, section: str | None = None) -> None:
        """Raise when ``settings`` differ from the recorded ones, naming each (see :func:`settings.check_settings`)."""
        check_settings(self.path, self.settings, settings, section=section)

    @synchronized
    def set_settings(self, settings: Mapping[str, Any]) -> None:
        """Record the settings on first write; later writes must match them.

        A matching write also refreshes the recorded model identity (a store written before
        identities gains its fingerprint; the path becomes the one last written with).
        """
        self._require_writer()
        self._manifest = self.engine.read_manifest() or self._manifest
        if self.settings:
            self.check_settings(settings)
            refreshed = with_current_identity(self.settings, settings)
            if refreshed is not None:
                self._manifest["settings"] = refreshed
                self.engine.write_manifest(self._manifest)
            return
        self._manifest["settings"] = json.loads(json.dumps(dict(settings)))
        self._manifest.setdefault("format", STORE_FORMAT)
        self.engine.write_manifest(self._manifest)

    @property
    def writable(self) -> bool:
        """Whether this object may change the store (opened writable and still holding the writer lock)."""
        return self._writable and (self._lock is None or self._lock.held)

    def _require_writer(self) -> None:
        if not self.writable:
            raise StoreError(f"store {self.path} was opened read-only; open it with DocPCIndex(path, writable=True) "
                             "to change it")

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._load()
        else:
            self._refresh()

    def _load_if_cheap(self) -> bool:
        """Open the view for a writer when that costs little (a snapshot in the local cache, or a store of at most
        one read page); whether it is open. A writer needs only the ids it replaces, so on a big store with a cold
        cache it writes to Chroma alone and a later search follows its commits from the feed."""
        if self._loaded:
            self._refresh()
            return True
        if self.cache.position or self.engine.count() <= _CHEAP_OPEN:
            self._load()
            return True
        return False

    def _load(self) -> None:
        """Open the view of the stored documents (see view.py): the cache's snapshot, else Chroma's records."""
        self._manifest = self.engine.read_manifest() or self._manifest
        self._loaded = True
        if self.dim is not None:
            self._view = self._new_view(self.dim)
            self._forget_local(self._view.open())

    def _new_view(self, dim: int) -> StoreView:
        return StoreView(self.engine, self.cache, self.path, dim=dim, config=self.search_config, lock=self._mutex,
                         on_change=self._forget_local)

    _n = property(lambda self: self._view.n if self._view is not None else {}, doc="Vector count per known document.")
    _parts = property(lambda self: self._view.parts if self._view is not None else {}, doc="Part split per record.")

    @synchronized
    def refresh(self) -> None:
        """Apply what other writers committed since we last looked (the change feed): new, replaced, deleted."""
        self._refresh()

    def _refresh(self) -> None:
        if not self._loaded:
            self._load()
        elif self._view is None:  # the first documents may have come from another writer
            if self.engine.changes(self.cache.position, skip=self.cache.seen):
                self._load()
        else:
            self._forget_local(self._view.follow())

    def _advance(self, seq: int) -> None:
        """After our own commit: the feed position moves past it (we were up to date just before it)."""
        self.cache.advance(seq, self.engine.last_keys)

    def _forget(self, ids: Sequence[str]) -> None:
        if self._view is not None:
            self._view.forget(ids)
        self._forget_local(ids)

    def _forget_local(self, ids: Sequence[str]) -> None:
        """Drop what this process keeps of changed documents: remembered metadata, cached vectors and grids."""
        for doc_id in ids:
            self._meta_cache.forget(doc_id)
            try:
                self.layout.cached_grid(doc_id).unlink(missing_ok=True)
            except (OSError, DocumentNotFoundError):
                pass
        self.cache.drop(ids)

    @synchronized
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
        mats = check_batch(ids, vectors, metadatas, texts, parts, anchors, grids, self.dim)
        if not mats:
            return
        dim = mats[0].shape[1]
        if self.dim is None:
            self._manifest = self.engine.read_manifest() or self._manifest
            if self.dim is None:
                self._manifest.update(dim=dim, format=STORE_FORMAT)
                self.engine.write_manifest(self._manifest)
        in_view = self._load_if_cheap()
        if in_view and self._view is None:
            self._view = self._new_view(dim)
        records, cents, packed = [], [], {}
        with single_blas_thread():  # the summaries' small products: more BLAS threads only spin
            for i, (doc_id, m, meta) in enumerate(zip(ids, mats, metadatas)):
                record, centroids = build_record(
                    doc_id, m, meta, self.search_config.n_centroids, text=None if texts is None else texts[i],
                    parts=None if parts is None else parts[i], anchors=None if anchors is None else anchors[i],
                    grid=None if grids is None else grids[i],
                )
                records.append(record)
                cents.append(centroids)
                packed[doc_id] = record.vectors
        seq = self.engine.write(records)
        self._forget(list(ids))
        if self._view is None:  # written to Chroma alone: the view, when it opens, reads it from the feed
            return
        self._advance(seq)
        self._view.add([r.id for r in records], cents, [int(r.metadata["_n"]) for r in records],
                       [parts_of(r.metadata.get("_parts")) for r in records])
        self.cache.put(packed)

    @synchronized
    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id (records, vectors, grids); returns how many existed."""
        self._require_writer()
        wanted = list(dict.fromkeys(ids))
        if self._load_if_cheap():
            present = [i for i in wanted if i in self._n]
        else:
            stored = self.engine.records(wanted, include_summary=False)
            present = [i for i in wanted if i in stored]
        if present:
            seq = self.engine.delete(present)
            if self._view is not None:
                self._advance(seq)
            self._forget(present)
        return len(present)

    @synchronized
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Replace the public metadata of existing documents, keeping their vectors."""
        self._require_writer()
        old = self.engine.records(ids)
        missing = [doc_id for doc_id in ids if doc_id not in old]
        if missing:
            raise DocumentNotFoundError(missing[0], self.path)
        new = [replaced_metadata(doc_id, old[doc_id], meta) for doc_id, meta in zip(ids, metadatas)]
        if new:
            self._advance(self.engine.update_metadata(list(ids), new))
            for doc_id in ids:
                self._meta_cache.forget(doc_id)

    @synchronized
    def count(self) -> int:
        self._ensure_loaded()
        return len(self._n)

    @synchronized
    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """All document ids, or those whose metadata matches a Chroma ``where`` filter."""
        where = check_where(where)
        if not self._load_if_cheap():  # Chroma alone: ids are all a writer reads of a big store
            return self.engine.ids(where)
        if where is None:
            return list(self._n)
        return self._matching(where)

    def _matching(self, where: Mapping[str, Any]) -> list[str]:
        """Known ids matching a checked ``where`` filter, in the filter's order (the caller has followed the feed)."""
        return [i for i in (self._view.matching(where) if self._view else self.engine.ids(where)) if i in self._n]

    @synchronized
    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        """Stored document ids by source path, for ``sources`` (one Chroma query, however many paths)."""
        found = self.engine.ids_by_source(sources)
        if not self._load_if_cheap():
            return found
        return {src: kept for src, ids in found.items() if (kept := [i for i in ids if i in self._n])}

    @synchronized
    def __contains__(self, doc_id: object) -> bool:
        self._ensure_loaded()
        return doc_id in self._n

    @synchronized
    def known(self, doc_id: str) -> bool:
        """Whether a document is stored, as of this process's last look: no feed query (a Chroma round trip) per file.

        A document another writer added meanwhile is written again, which is harmless (records are keyed by content).
        """
        if not self._loaded and not self._load_if_cheap():
            return bool(self.engine.records([doc_id], include_summary=False))
        return doc_id in self._n

    @synchronized
    def vectors(self, doc_id: str) -> np.ndarray:
        """The stored ``[n, dim]`` multi-vector of a document, as float32 (dequantized)."""
        return self.vectors_with_anchors(doc_id)[0]

    @synchronized
    def vectors_with_anchors(self, doc_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored vectors and, for pooled vectors, the encoder token each stands for (else None)."""
        self._ensure_loaded()
        if doc_id not in self._n:
            raise DocumentNotFoundError(doc_id, self.path)
        assert self._view is not None
        reader = self._view.reader
        data = reader.packed([doc_id]).get(doc_id)
        if data is None:  # deleted meanwhile
            raise DocumentNotFoundError(doc_id, self.path)
        q, scale, anchors = reader.unpacked(doc_id, data)
        return dequantize(q, scale), anchors

    @synchronized
    def get(self, ids: Sequence[str] | None = None, *, include_vectors: bool = False) -> list[StoredDocument]:
        """Records by id (missing ids are skipped), or all records."""
        if self._load_if_cheap():
            wanted = list(self._n) if ids is None else [i for i in ids if i in self._n]
            records = self.engine.records(wanted, include_summary=False) if wanted else {}
        else:
            records = self.engine.records(ids, include_summary=False)
            wanted = list(records) if ids is None else list(ids)
        return [self._stored(doc_id, records[doc_id], include_vectors) for doc_id in wanted
                if doc_id in records and "_n" in records[doc_id]]

    def _stored(self, doc_id: str, meta: Mapping[str, Any], include_vectors: bool = False) -> StoredDocument:
        """A record as the user sees it, from its Chroma metadata alone (count and parts are in the record)."""
        n = int(meta["_n"])
        return StoredDocument(doc_id, public(meta), n, self.vectors(doc_id) if include_vectors else None,
                              parts_of(meta.get("_parts")) or (n,))

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
                rows = self.engine.records_page(where, page, offset)
                found = [self._stored(i, meta) for i, meta in rows if "_n" in meta]
            yield from found
            if len(rows) < page:
                return
            offset += page

    @synchronized
    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The stored text of documents (empty string when none was kept)."""
        return self.engine.texts(ids) if ids else {}

    @synchronized
    def grid(self, doc_id: str) -> bytes:
        """A document's grid preview bytes (cached locally on first read); DocumentNotFoundError when it has none."""
        self._ensure_loaded()
        if doc_id not in self._n:
            raise DocumentNotFoundError(doc_id, self.path)
        data = grid_bytes(self.layout, self.engine, doc_id)
        if data is None:
            raise DocumentNotFoundError(doc_id, self.path)
        return data

    @synchronized
    def total_vectors(self) -> int:
        self._ensure_loaded()
        return sum(self._n.values())

    def images_encoded(self) -> int:
        """Images behind the stored vectors: one per document, one per page for multi-part (page-mode) records."""
        self._ensure_loaded()
        return len(self._n) + sum(len(p) - 1 for p in self._parts.values())

    def bytes_on_disk(self) -> int:
        """Bytes under the store directory (Chroma's files in embedded mode, and the local cache)."""
        return statistics.bytes_under(self.path)

    def bytes_by_part(self) -> dict[str, int]:
        """Payload bytes per document part, summed over the store (what a search reads, and the grids)."""
        return statistics.bytes_by_part(self.engine.records(include_summary=True))

    def describe(self, *, model: str, settings: Mapping[str, Any], page_cache: Mapping[str, int]) -> dict[str, Any]:
        """What the store holds and how it was built (``docpc info``); arguments fill what the store cannot know."""
        return statistics.describe(self, model=model, settings=settings, page_cache=page_cache)

    @synchronized
    def warm(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Fill this machine's cache for the whole store (every document's vectors and the search snapshot), so that
        the first queries of a reader on a fresh machine do not wait for them; resumable. Returns what it did."""
        self._ensure_loaded()
        if self._view is None:  # an empty store
            return {"documents": 0, "fetched": 0, "seconds": 0.0}
        return self._view.warm(on_progress)

    def search(self, query: np.ndarray, top_k: int = 10, **options: Any) -> list[ScoredDocument]:
        """Top documents for one query ``[n_tokens, dim]`` by MaxSim, best first (options as :meth:`search_batch`)."""
        return self.search_batch([query], top_k, **options)[0]

    @synchronized
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
        with_text: bool = False,
        with_vectors: bool = False,
        with_grid: bool = False,
    ) -> list[list[ScoredDocument]]:
        """Top documents per query by MaxSim, best first.

        ``where`` is a Chroma metadata filter, ``ids`` restricts to given
        documents. ``n_candidates``: documents the first stage keeps for exact
        scoring (None: the search configuration's rule by query length). ``exhaustive``: every document scored
        exactly in float32, with no first stage and no approximate pass (the truth, slow).
        Multi-part records (page mode) score each part and combine them with
        ``aggregate``: ``max`` (MaxP), ``mean`` (AvgP) or ``sum`` (SumP).
        ``with_text`` / ``with_vectors`` / ``with_grid``: each hit comes with its stored text / vectors / grid
        preview, read with its metadata, so a document deleted meanwhile is replaced by the next one here rather
        than failing a caller later.
        """
        if top_k < 0:
            raise ValueError("top_k must be >= 0")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        check_candidates(n_candidates, "n_candidates")
        self._ensure_loaded()
        if top_k == 0 or not self._n or self._view is None:
            return [[] for _ in queries]
        qs = checked_queries(queries, self._view.dim)
        allowed: set[str] | None = None
        checked = check_where(where)
        if checked is not None:  # an empty filter ({}) matches every document
            allowed = set(self._matching(checked))
        if ids is not None:
            id_set = {i for i in ids if i in self._n}
            allowed = id_set if allowed is None else allowed & id_set
        if allowed is not None and not allowed:
            return [[] for _ in queries]
        read = hit_reader(self.engine, self._meta_cache, self._view.reader, self.layout, with_text=with_text,
                          with_vectors=with_vectors, with_grid=with_grid)
        return [[ScoredDocument(h.id, h.score, meta, h.parts, *extra) for h, meta, extra in self._view.search(
            q, top_k, allowed, read, candidates=n_candidates, exhaustive=exhaustive,
            aggregate=aggregate)] for q in qs]


    @synchronized
    def close(self) -> None:
        """Save the cache and release the writer lock; the store can be reopened afterwards."""
        if getattr(self, "_cache", None) is not None:
            if getattr(self, "_view", None) is not None and self.cache.dirty:
                self._view.save()
            self.cache.close()
        if getattr(self, "_lock", None) is not None:
            self._lock.release()

    def __enter__(self) -> MultiVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

