"""The multi-vector store: every document's compact multi-vector, summary, metadata, text and grid, in Chroma.

Chroma is the source of truth (engine.py); a local cache (cache.py) keeps what a search reads, refilled from Chroma
when missing, stale or deleted. This module opens a store (the Chroma client, its format, the writer lock) and
hands reads and searches to its reader (reader.py: what this process knows, kept in step with other writers
through the change feed) and changes to its writer (writer.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from docpc_retrievers.config import AGGREGATES
from docpc_retrievers.errors import StoreError
from docpc_retrievers.store import statistics
from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.cache_transfer import write_cache_archive
from docpc_retrievers.store.chroma_client import chroma_client, forget_embedded, require_collection
from docpc_retrievers.store.chroma_process import ChromaProcess
from docpc_retrievers.store.engine import READABLE_FORMATS, STORE_FORMAT, ChromaEngine, payload_packing
from docpc_retrievers.store.layout import StoreLayout, write_json_atomic
from docpc_retrievers.store.locking import WriterLock, synchronized
from docpc_retrievers.store.writer import PreparedAdd
from docpc_retrievers.store.reader import StoreReader
from docpc_retrievers.store.records import ScoredDocument, StoredDocument
from docpc_retrievers.store.search import SearchConfig
from docpc_retrievers.store.settings import check_settings
from docpc_retrievers.store.writer import StoreWriter

__all__ = ["AGGREGATES", "STORE_FORMAT", "MultiVectorStore", "ScoredDocument", "StoredDocument"]

logger = logging.getLogger(__name__)


class MultiVectorStore:
    """Per-document multi-vector embeddings with metadata, text and grid previews, kept in Chroma.

    Args:
        path: the store directory: Chroma's files (embedded mode) and the local cache.
        host, port, ssl, headers: use a Chroma server (or Chroma's distributed deployment)
            instead of the embedded one; ``path`` then only holds the cache.
        collection: Chroma collection name (two companions are named after it).
        writable: take the single-writer lock (embedded mode; a server has no local lock).
        search: how this process searches the store (backend and its settings; see store/search/config.py).
        chroma_process: serve the embedded folder's Chroma from a child ``chroma run`` on a loopback port while the
            store is open (store/chroma_process.py), so Chroma's writes do not hold this process's Python lock;
            the lock, manifest and cache stay here. Any local user can reach that port meanwhile.
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
        chroma_process: bool = False,
    ) -> None:
        if chroma_process and host is not None:
            raise ValueError("chroma_process serves an embedded store from a child process; a store on host= is "
                             "served by its Chroma server already")
        if chroma_process and not writable:
            raise ValueError("chroma_process is for the store's writer (writable=True): a reader's child would be "
                             "a second Chroma server on a folder the writer's process may hold open")
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
        self._chroma_child: ChromaProcess | None = None
        try:
            if self._lock is not None:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock.acquire()
            self.collection_name = str(local.get("collection") or collection)
            if chroma_process:
                self._chroma_child = ChromaProcess(self.layout.chroma)
                forget_embedded(self.layout.chroma)  # an embedded client held here would not see the child's writes
                self._chroma_child.start()
                self._client = chroma_client(None, self._chroma_child.host, self._chroma_child.port)
            else:
                self._client = chroma_client(self.layout.chroma, host, port, ssl, headers)
            if not writable and host is not None:
                require_collection(self._client, self.collection_name, host)
            self.engine = ChromaEngine(self._client, self.collection_name)
            manifest = self.engine.read_manifest()
            store_format = manifest.get("format", STORE_FORMAT)
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
        self.reader = StoreReader(self.engine, self.cache, self.layout, manifest, config=self.search_config,
                                  mutex=self._mutex)
        self.writer = StoreWriter(self.engine, self.reader, self.path, writable=writable, lock=self._lock,
                                  n_centroids=self.search_config.n_centroids, mutex=self._mutex)

    @property
    def cache(self) -> VectorCache:
        assert self._cache is not None
        return self._cache

    @property
    def dim(self) -> int | None:
        return self.reader.dim

    @property
    def settings(self) -> dict[str, Any]:
        """What the store was built with (encoder and index settings)."""
        return dict(self.reader.manifest.get("settings") or {})

    def check_settings(self, settings: Mapping[str, Any], *, section: str | None = None) -> None:
        """Raise when ``settings`` differ from the recorded ones, naming each (see :func:`settings.check_settings`)."""
        check_settings(self.path, self.settings, settings, section=section)

    @property
    def writable(self) -> bool:
        """Whether this object may change the store (opened writable and still holding the writer lock)."""
        return self.writer.writable

    # ------------------------------------------------------------------ writes
    def set_settings(self, settings: Mapping[str, Any]) -> None:
        """Record the settings on first write; later writes must match them (the model identity is refreshed)."""
        self.writer.set_settings(settings)

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
        self.writer.add(ids, vectors, metadatas, texts, parts, anchors=anchors, grids=grids)

    def prepare_add(
        self,
        ids: Sequence[str],
        vectors: Sequence[np.ndarray],
        metadatas: Sequence[Mapping[str, Any]],
        texts: Sequence[str | None] | None = None,
        parts: Sequence[Sequence[int] | None] | None = None,
        *,
        anchors: Sequence[np.ndarray | None] | None = None,
        grids: Sequence[bytes | None] | None = None,
    ) -> PreparedAdd | None:
        """:meth:`add`'s CPU part (checks, summaries, packed payload), which may run while another commit writes;
        :meth:`add_prepared` writes it. ``add(...)`` is ``add_prepared(prepare_add(...))``."""
        return self.writer.prepare(ids, vectors, metadatas, texts, parts, anchors=anchors, grids=grids)

    def add_prepared(self, batch: PreparedAdd | None) -> None:
        """Write what :meth:`prepare_add` built, as one commit."""
        self.writer.add_prepared(batch)

    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id (records, vectors, grids); returns how many existed."""
        return self.writer.delete(ids)

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Replace the public metadata of existing documents, keeping their vectors."""
        self.writer.update_metadata(ids, metadatas)

    # ------------------------------------------------------------------- reads
    def refresh(self) -> None:
        """Apply what other writers committed since we last looked (the change feed): new, replaced, deleted."""
        self.reader.refresh()

    def count(self) -> int:
        return self.reader.count()

    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """All document ids, or those whose metadata matches a Chroma ``where`` filter."""
        return self.reader.ids(where)

    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        """Stored document ids by source path, for ``sources`` (one Chroma query, however many paths)."""
        return self.reader.ids_by_source(sources)

    def __contains__(self, doc_id: object) -> bool:
        return self.reader.contains(doc_id)

    def known(self, doc_id: str) -> bool:
        """Whether a document is stored, as of this process's last look (no feed read per file)."""
        return self.reader.known(doc_id)

    def vectors(self, doc_id: str) -> np.ndarray:
        """The stored ``[n, dim]`` multi-vector of a document, as float32 (dequantized)."""
        return self.reader.vectors_with_anchors(doc_id)[0]

    def vectors_with_anchors(self, doc_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored vectors and, for pooled vectors, the encoder token each stands for (else None)."""
        return self.reader.vectors_with_anchors(doc_id)

    def get(self, ids: Sequence[str] | None = None, *, include_vectors: bool = False) -> list[StoredDocument]:
        """Records by id (missing ids are skipped), or all records."""
        return self.reader.get(ids, include_vectors=include_vectors)

    def iter_documents(self, where: Mapping[str, Any] | None = None, *, page: int = 500) -> Iterator[StoredDocument]:
        """Every stored document (or those matching ``where``), a page of ``page`` records at a time (memory: one
        page); documents deleted while iterating are skipped, one added meanwhile may or may not be seen."""
        return self.reader.iter_documents(where, page=page)

    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The stored text of documents (empty string when none was kept)."""
        return self.engine.texts(ids) if ids else {}

    def grid(self, doc_id: str) -> bytes:
        """A document's grid preview bytes (cached locally on first read); DocumentNotFoundError when it has none."""
        return self.reader.grid(doc_id)

    def total_vectors(self) -> int:
        return self.reader.total_vectors()

    def images_encoded(self) -> int:
        """Images behind the stored vectors: one per document, one per page for multi-part (page-mode) records."""
        return self.reader.images_encoded()

    def bytes_on_disk(self) -> int:
        """Bytes under the store directory (Chroma's files in embedded mode, and the local cache)."""
        return statistics.bytes_under(self.path)

    def bytes_by_part(self) -> dict[str, int]:
        """Payload bytes per document part, summed over the store (what a search reads, and the grids)."""
        return statistics.bytes_by_part(self.engine.records(include_summary=True))

    def describe(self, *, model: str, settings: Mapping[str, Any], page_cache: Mapping[str, int]) -> dict[str, Any]:
        """What the store holds and how it was built (``docpc info``); arguments fill what the store cannot know."""
        return statistics.describe(self, model=model, settings=settings, page_cache=page_cache)

    def warm(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Fill this machine's cache for the whole store (every document's vectors and the search snapshot), so that
        the first queries of a reader on a fresh machine do not wait for them; resumable. Returns what it did."""
        return self.reader.warm(on_progress)

    def prefetch(self) -> None:
        """Fetch in the background every document's vectors this machine's cache lacks (a server's first queries
        then stop waiting on Chroma); stops when the store closes. See :meth:`StoreReader.prefetch`."""
        self.reader.prefetch()

    def search(self, query: np.ndarray, top_k: int = 10, **options: Any) -> list[ScoredDocument]:
        """Top documents for one query ``[n_tokens, dim]`` by MaxSim, best first (options as :meth:`search_batch`)."""
        return self.search_batch([query], top_k, **options)[0]

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
        partial: bool = False,
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
        than failing a caller later. ``partial`` is for a store read through shard searchers (``ShardedStore``):
        a store in one piece always answers whole.
        """
        return self.reader.search_batch(queries, top_k, where=where, ids=ids, n_candidates=n_candidates,
                                        exhaustive=exhaustive, aggregate=aggregate, with_text=with_text,
                                        with_vectors=with_vectors, with_grid=with_grid)

    @synchronized
    def export_cache(self, out: BinaryIO) -> int:
        """Write this process's cache of the store (search snapshot, vectors, feed position) as a tar stream to
        ``out``, taken under the store's lock after the snapshot is saved: what a new replica starts from
        (store/cache_transfer.py). Returns how many files went in."""
        self.reader.ensure_loaded()
        if self.reader.view is not None:
            self.reader.view.save()
        return write_cache_archive(self.cache.folder, out)

    @synchronized
    def close(self) -> None:
        """Save the cache and release the writer lock; the store can be reopened afterwards."""
        if getattr(self, "_cache", None) is not None:
            if getattr(self, "reader", None) is not None:
                self.reader.stop_prefetch()
                self.reader.save()
            self.cache.close()
        child = getattr(self, "_chroma_child", None)
        if child is not None:  # stopped before the lock is released: no other writer while it may still write
            child.stop()
            forget_embedded(self.layout.chroma)
        if getattr(self, "_lock", None) is not None:
            self._lock.release()

    def __enter__(self) -> MultiVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

