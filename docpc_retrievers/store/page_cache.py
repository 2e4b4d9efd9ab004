"""A persistent cache of full-resolution page embeddings, so reranking encodes a page at most once.

Entries are keyed by document id, page number and a fingerprint of the model
settings and render size: a different model or resolution never reuses an
entry. The cache is its own small store (``StoreLayout.page_cache``) with its own
writer lock, so a read-only search process can still fill it; when another
process holds that lock, new entries are kept in memory for this process only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.errors import StoreLockedError
from docpc_retrievers.store.layout import StoreLayout
from docpc_retrievers.store.multivector import MultiVectorStore

__all__ = ["PageEmbeddingCache", "cache_fingerprint"]

logger = logging.getLogger(__name__)


def cache_fingerprint(encoder_settings: Mapping[str, Any], page_size: Sequence[int]) -> str:
    """A short hash of everything that changes a page embedding."""
    blob = json.dumps({"encoder": dict(encoder_settings), "page_size": list(page_size)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class PageEmbeddingCache:
    """Page embeddings by ``(doc_id, page)`` for one fingerprint; see the module docstring."""

    def __init__(self, directory: str | Path, fingerprint: str) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        self._memory: dict[str, np.ndarray] = {}
        self._store: MultiVectorStore | None = None
        self._writable = False

    def _key(self, doc_id: str, page: int) -> str:
        return f"{doc_id}:{page}:{self.fingerprint}"

    def _open(self) -> MultiVectorStore | None:
        if self._store is None:
            try:
                self._store = MultiVectorStore(self.directory, collection="docpc-page-cache", writable=True)
                self._writable = True
            except StoreLockedError:
                logger.info("page cache %s is locked by another process; caching in memory only", self.directory)
                if StoreLayout(self.directory).exists():
                    self._store = MultiVectorStore(self.directory, collection="docpc-page-cache")
        return self._store

    def get(self, doc_id: str, pages: Sequence[int]) -> dict[int, np.ndarray]:
        """Cached ``[n, dim]`` embeddings of the given pages (1-based), those present."""
        out: dict[int, np.ndarray] = {}
        store = self._open()
        for page in pages:
            key = self._key(doc_id, page)
            if key in self._memory:
                out[page] = self._memory[key]
            elif store is not None and key in store:
                out[page] = store.vectors(key)
        return out

    def put(self, doc_id: str, embeddings: Mapping[int, np.ndarray]) -> None:
        """Remember page embeddings (persistently when this process holds the cache's lock)."""
        if not embeddings:
            return
        store = self._open()
        keys = [self._key(doc_id, page) for page in embeddings]
        if store is not None and self._writable:
            metas = [{"doc_id": doc_id, "page": int(page), "fingerprint": self.fingerprint} for page in embeddings]
            store.add(keys, list(embeddings.values()), metas)
        else:
            self._memory.update(zip(keys, embeddings.values()))

    def stats(self) -> dict[str, int]:
        """Cached pages and bytes on disk."""
        store = self._open() if StoreLayout(self.directory).exists() else None
        return {
            "pages": (store.count() if store is not None else 0) + len(self._memory),
            "bytes": store.bytes_on_disk() if store is not None else 0,
        }

    def clear(self) -> int:
        """Drop every cached page (all fingerprints) and the files that held them; returns how many were removed.

        Deleting records alone would leave Chroma's files at their size (its SQLite keeps the freed pages), so the
        whole folder goes once the store is closed; the next open at this path starts a fresh Chroma client
        (engine.py drops the stale one).
        """
        removed = len(self._memory)
        self._memory.clear()
        if not StoreLayout(self.directory).exists():
            return removed
        store = self._open()
        if store is None or not self._writable:
            raise StoreLockedError(f"page cache {self.directory} is in use by another process; clear it later")
        removed += store.count()
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        return removed

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
            self._writable = False
