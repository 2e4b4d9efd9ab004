"""The store's reader: everything a process knows of a store (its manifest, the view of counts, parts, summaries
and feed position, remembered metadata) and every read and search over it.

One convention for a document that vanished (deleted or replaced by another writer after this process last
looked): every internal read leaves it out of its answer (``VectorReader.rows`` and ``packed``, the engine's
payload read, the hit read), never an error or a placeholder score, and one place acts on its absence: the view's
search loop (``StoreView.search``), which follows the feed and gives its slot to the next document. A public call
that names one document (``vectors``, ``grid``) raises :class:`DocumentNotFoundError`, as for an id never stored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from docpc_retrievers.config import AGGREGATES, check_candidates
from docpc_retrievers.errors import DocumentNotFoundError
from docpc_retrievers.filters import check_where
from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.codec import dequantize
from docpc_retrievers.store.engine import ChromaEngine
from docpc_retrievers.store.hit_reads import grid_bytes, hit_reader
from docpc_retrievers.store.layout import StoreLayout
from docpc_retrievers.store.locking import synchronized
from docpc_retrievers.store.records import MetadataCache, ScoredDocument, StoredDocument, parts_of, public
from docpc_retrievers.store.search import SearchConfig
from docpc_retrievers.store.view import StoreView, checked_queries

__all__ = ["StoreReader"]

logger = logging.getLogger(__name__)

#: Documents a writer with no local snapshot still reads whole to open its view: one hosted Chroma read.
CHEAP_OPEN = 300


PREFETCH_PAGE = 32
"""Documents a background prefetch reads at a time, holding the store's lock: a search waits at most one such read
(32 grids of 760 vectors are about 12 MB; benchmarks/prefetch_lock_bench.py measures the wait)."""


class StoreReader:
    """Reads and searches of one store; opens its view on first need and follows the change feed on each read."""

    def __init__(self, engine: ChromaEngine, cache: VectorCache, layout: StoreLayout, manifest: dict[str, Any], *,
                 config: SearchConfig, mutex: threading.RLock) -> None:
        self.engine, self.cache, self.layout, self.config = engine, cache, layout, config
        self.path = layout.root
        self.manifest = manifest
        """The store-wide record (format, dim, settings), refreshed from Chroma when the view opens."""
        self._mutex = mutex
        self.view: StoreView | None = None
        self.metadata = MetadataCache(lambda ids: self.engine.records(ids, include_summary=False))
        self.loaded = False
        self._prefetcher: threading.Thread | None = None
        self._stop = threading.Event()
        self.prefetched = 0
        """Documents whose vectors the background prefetch has fetched so far."""

    @property
    def dim(self) -> int | None:
        dim = self.manifest.get("dim")
        return int(dim) if dim is not None else None

    @property
    def n(self) -> Mapping[str, int]:
        """Vector count per known document (empty before the view opens)."""
        return self.view.n if self.view is not None else {}

    @property
    def parts(self) -> Mapping[str, tuple[int, ...]]:
        return self.view.parts if self.view is not None else {}

    # ------------------------------------------------------------- the view
    def ensure_loaded(self) -> None:
        if not self.loaded:
            self._load()
        else:
            self.refresh()

    def load_if_cheap(self) -> bool:
        """Open the view when that costs little (a snapshot in the local cache, or a store of at most one read
        page); whether it is open. A writer needs only the ids it replaces, so on a big store with a cold cache it
        writes to Chroma alone and a later search follows its commits from the feed."""
        if self.loaded:
            self.refresh()
            return True
        if self.cache.position or self.engine.count() <= CHEAP_OPEN:
            self._load()
            return True
        return False

    def _load(self) -> None:
        """Open the view of the stored documents (see view.py): the cache's snapshot, else Chroma's records."""
        self.manifest.update(self.engine.read_manifest())
        self.loaded = True
        if self.dim is not None:
            self.view = self.new_view(self.dim)
            self.forget_local(self.view.open())

    def new_view(self, dim: int) -> StoreView:
        return StoreView(self.engine, self.cache, self.path, dim=dim, config=self.config,
                         on_change=self.forget_local)

    @synchronized
    def refresh(self) -> None:
        """Apply what other writers committed since we last looked (the change feed): new, replaced, deleted."""
        if not self.loaded:
            self._load()
        elif self.view is None:  # the first documents may have come from another writer
            if self.engine.changes(self.cache.position, skip=self.cache.seen):
                self._load()
        else:
            self.forget_local(self.view.follow())

    def committed(self, seq: int, ids: Sequence[str], summaries: Sequence[np.ndarray], counts: Sequence[int],
                  parts: Sequence[tuple[int, ...] | None], packed: Mapping[str, bytes]) -> None:
        """This process's own commit: into the view and the cache, the feed position past it (we were up to date
        just before it). Nothing when the view is not open: it will read the commit from the feed."""
        self.forget(ids)
        if self.view is None:
            return
        self.cache.advance(seq, self.engine.last_keys)
        self.view.add(list(ids), summaries, counts, parts)
        self.cache.put(dict(packed))

    def removed(self, seq: int, ids: Sequence[str]) -> None:
        """This process's own deletion."""
        if self.view is not None:
            self.cache.advance(seq, self.engine.last_keys)
        self.forget(ids)

    def relabelled(self, seq: int, ids: Sequence[str]) -> None:
        """This process's own metadata edit: the remembered metadata of ``ids`` goes; the vectors stay."""
        if self.view is not None:
            self.cache.advance(seq, self.engine.last_keys)
        for doc_id in ids:
            self.metadata.forget(doc_id)

    def forget(self, ids: Sequence[str]) -> None:
        if self.view is not None:
            self.view.forget(ids)
        self.forget_local(ids)

    def forget_local(self, ids: Sequence[str]) -> None:
        """Drop what this process keeps of changed documents: remembered metadata, cached vectors and grids."""
        for doc_id in ids:
            self.metadata.forget(doc_id)
            try:
                self.layout.cached_grid(doc_id).unlink(missing_ok=True)
            except (OSError, DocumentNotFoundError):
                pass
        self.cache.drop(ids)

    # ---------------------------------------------------------------- reads
    @synchronized
    def present(self, ids: Sequence[str]) -> list[str]:
        """Which of ``ids`` are stored (as of the view when it is open, else Chroma's records), in their order."""
        wanted = list(dict.fromkeys(ids))
        if self.load_if_cheap():
            return [i for i in wanted if i in self.n]
        stored = self.engine.records(wanted, include_summary=False)
        return [i for i in wanted if i in stored]

    @synchronized
    def count(self) -> int:
        self.ensure_loaded()
        return len(self.n)

    @synchronized
    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """All document ids, or those whose metadata matches a Chroma ``where`` filter."""
        where = check_where(where)
        if not self.load_if_cheap():  # Chroma alone: ids are all a writer reads of a big store
            return self.engine.ids(where)
        if where is None:
            return list(self.n)
        return self._matching(where)

    def _matching(self, where: Mapping[str, Any]) -> list[str]:
        """Known ids matching a checked ``where`` filter, in the filter's order (the caller has followed the feed)."""
        return [i for i in (self.view.matching(where) if self.view else self.engine.ids(where)) if i in self.n]

    @synchronized
    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        """Stored document ids by source path, for ``sources`` (one Chroma query, however many paths)."""
        found = self.engine.ids_by_source(sources)
        if not self.load_if_cheap():
            return found
        return {src: kept for src, ids in found.items() if (kept := [i for i in ids if i in self.n])}

    @synchronized
    def contains(self, doc_id: object) -> bool:
        self.ensure_loaded()
        return doc_id in self.n

    @synchronized
    def known(self, doc_id: str) -> bool:
        """Whether a document is stored, as of this process's last look: no feed query (a Chroma round trip) per
        file. A document another writer added meanwhile is written again, which is harmless (records are keyed by
        content)."""
        if not self.loaded and not self.load_if_cheap():
            return bool(self.engine.records([doc_id], include_summary=False))
        return doc_id in self.n

    @synchronized
    def vectors_with_anchors(self, doc_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored vectors (float32, dequantized) and, for pooled vectors, the encoder token each stands for."""
        self.ensure_loaded()
        data = self.view.reader.packed([doc_id]).get(doc_id) if self.view is not None and doc_id in self.n else None
        if data is None:
            raise DocumentNotFoundError(doc_id, self.path)
        q, scale, anchors = self.view.reader.unpacked(doc_id, data)  # type: ignore[union-attr]
        return dequantize(q, scale), anchors

    @synchronized
    def get(self, ids: Sequence[str] | None = None, *, include_vectors: bool = False) -> list[StoredDocument]:
        """Records by id (missing ids are skipped), or all records."""
        if self.load_if_cheap():
            wanted = list(self.n) if ids is None else [i for i in ids if i in self.n]
            records = self.engine.records(wanted, include_summary=False) if wanted else {}
        else:
            records = self.engine.records(ids, include_summary=False)
            wanted = list(records) if ids is None else list(ids)
        return [self._stored(doc_id, records[doc_id], include_vectors) for doc_id in wanted
                if doc_id in records and "_n" in records[doc_id]]

    def _stored(self, doc_id: str, meta: Mapping[str, Any], include_vectors: bool = False) -> StoredDocument:
        """A record as the user sees it, from its Chroma metadata alone (count and parts are in the record)."""
        n = int(meta["_n"])
        return StoredDocument(doc_id, public(meta), n, self.vectors_with_anchors(doc_id)[0] if include_vectors else None,
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
    def grid(self, doc_id: str) -> bytes:
        """A document's grid preview bytes (cached locally on first read); DocumentNotFoundError when it has none."""
        self.ensure_loaded()
        data = grid_bytes(self.layout, self.engine, doc_id) if doc_id in self.n else None
        if data is None:
            raise DocumentNotFoundError(doc_id, self.path)
        return data

    @synchronized
    def total_vectors(self) -> int:
        self.ensure_loaded()
        return sum(self.n.values())

    @synchronized
    def images_encoded(self) -> int:
        """Images behind the stored vectors: one per document, one per page for multi-part (page-mode) records."""
        self.ensure_loaded()
        return len(self.n) + sum(len(p) - 1 for p in self.parts.values())

    @synchronized
    def warm(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Fill this machine's cache for the whole store (every document's vectors and the search snapshot), so that
        the first queries of a reader on a fresh machine do not wait for them; resumable. Returns what it did."""
        self.ensure_loaded()
        if self.view is None:  # an empty store
            return {"documents": 0, "fetched": 0, "seconds": 0.0}
        return self.view.warm(on_progress)

    def prefetch(self) -> None:
        """Fetch in the background every document's vectors this machine's cache lacks, :data:`PREFETCH_PAGE`
        documents a read, so a long-lived reader's queries stop waiting on Chroma. The store's lock is taken per
        read: a search meanwhile waits at most one such read. Stops at :meth:`close`; a failure is logged, never
        raised."""
        if self._prefetcher is not None and self._prefetcher.is_alive():
            return
        self._stop.clear()
        self._prefetcher = threading.Thread(target=self._prefetch, name="docpc-prefetch", daemon=True)
        self._prefetcher.start()

    def _prefetch(self) -> None:
        try:
            with self._mutex:
                self.ensure_loaded()
                missing = [d for d in self.n if d not in self.cache]
            for start in range(0, len(missing), PREFETCH_PAGE):
                if self._stop.is_set():
                    return
                with self._mutex:
                    if self.view is None or self._stop.is_set():
                        return
                    chunk = [d for d in missing[start : start + PREFETCH_PAGE] if d in self.n and d not in self.cache]
                    self.prefetched += len(self.view.reader.packed(chunk))
                time.sleep(0.001)  # the lock is not fair: without a pause this thread takes it back before a search
            logger.info("prefetched the vectors of %d documents", self.prefetched)
        except Exception as exc:  # a background helper: the next search fetches what it needs and says what failed
            logger.warning("background prefetch stopped: %s: %s", type(exc).__name__, exc)

    @property
    def prefetching(self) -> bool:
        """Whether a background prefetch is still fetching."""
        return self._prefetcher is not None and self._prefetcher.is_alive()

    def stop_prefetch(self) -> None:
        """Stop the background prefetch (what it fetched stays cached)."""
        self._stop.set()
        if self._prefetcher is not None:
            self._prefetcher.join(timeout=60)
            self._prefetcher = None

    # --------------------------------------------------------------- search
    @synchronized
    def search_batch(self, queries: Sequence[np.ndarray], top_k: int = 10, *, where: Mapping[str, Any] | None = None,
                     ids: Iterable[str] | None = None, n_candidates: int | None = None, exhaustive: bool = False,
                     aggregate: str = "max", with_text: bool = False, with_vectors: bool = False,
                     with_grid: bool = False) -> list[list[ScoredDocument]]:
        """Top documents per query by MaxSim, best first (the options as :meth:`MultiVectorStore.search_batch`; a filter
        checked already, as a search's options carry it, is not checked again)."""
        if top_k < 0:
            raise ValueError("top_k must be >= 0")
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        check_candidates(n_candidates, "n_candidates")
        self.ensure_loaded()
        if top_k == 0 or not self.n or self.view is None:
            return [[] for _ in queries]
        qs = checked_queries(queries, self.view.dim)
        allowed: set[str] | None = None
        checked = check_where(where)
        if checked is not None:  # an empty filter ({}) matches every document
            allowed = set(self._matching(checked))
        if ids is not None:
            id_set = {i for i in ids if i in self.n}
            allowed = id_set if allowed is None else allowed & id_set
        if allowed is not None and not allowed:
            return [[] for _ in queries]
        read = hit_reader(self.engine, self.metadata, self.view.reader, self.layout, with_text=with_text,
                          with_vectors=with_vectors, with_grid=with_grid)
        return [[ScoredDocument(h.id, h.score, meta, h.parts, *extra) for h, meta, extra in self.view.search(
            q, top_k, allowed, read, candidates=n_candidates, exhaustive=exhaustive,
            aggregate=aggregate)] for q in qs]

    @synchronized
    def save(self) -> None:
        """Save the view's snapshot when it changed since its last save."""
        if self.view is not None and self.cache.dirty:
            self.view.save()
