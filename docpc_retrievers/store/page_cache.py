"""A persistent cache of full-resolution page embeddings, so reranking encodes a page at most once.

Entries are keyed by document id, page number and a fingerprint of the model settings and render size: a
different model or resolution never reuses an entry. The cache is one SQLite file (``StoreLayout.page_cache`` /
``pages.sqlite3``) of int8 rows with a scale each, the store's own vector code: a key-value table, not a store, so
any process (a read-only search among them) reads and fills it, SQLite taking care of concurrent writers. When
the file cannot be written, new entries are kept in memory for this process only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.store.codec import decode_int8, dequantize, encode_int8
from docpc_retrievers.store.statistics import bytes_under

__all__ = ["PageEmbeddingCache", "cache_fingerprint"]

logger = logging.getLogger(__name__)

_FILE = "pages.sqlite3"
_SCHEMA = """CREATE TABLE IF NOT EXISTS pages (
    key TEXT PRIMARY KEY, doc_id TEXT NOT NULL, page INTEGER NOT NULL, fingerprint TEXT NOT NULL,
    dim INTEGER NOT NULL, data BLOB NOT NULL)"""


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
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _key(self, doc_id: str, page: int) -> str:
        return f"{doc_id}:{page}:{self.fingerprint}"

    def _open(self, create: bool) -> sqlite3.Connection | None:
        """The cache's database (made when ``create``); None when it is absent or cannot be opened."""
        if self._db is None:
            path = self.directory / _FILE
            if not create and not path.exists():
                return None
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                if create:
                    _drop_old_layout(self.directory)
                db = sqlite3.connect(path, timeout=30, check_same_thread=False)
                db.execute(_SCHEMA)
                db.commit()
            except (OSError, sqlite3.Error) as exc:
                logger.info("page cache %s not usable (%s); caching in memory only", path, exc)
                return None
            self._db = db
        return self._db

    def get(self, doc_id: str, pages: Sequence[int]) -> dict[int, np.ndarray]:
        """Cached ``[n, dim]`` embeddings of the given pages (1-based), those present."""
        out = {page: self._memory[key] for page in pages if (key := self._key(doc_id, page)) in self._memory}
        wanted = {self._key(doc_id, page): page for page in pages if page not in out}
        with self._lock:
            db = self._open(create=False)
            if db is None or not wanted:
                return out
            marks = ",".join("?" * len(wanted))
            rows = db.execute(f"SELECT key, dim, data FROM pages WHERE key IN ({marks})", list(wanted)).fetchall()
        for key, dim, data in rows:
            out[wanted[key]] = dequantize(*decode_int8(bytes(data), int(dim)))
        return out

    def put(self, doc_id: str, embeddings: Mapping[int, np.ndarray]) -> None:
        """Remember page embeddings (in the cache's file, or in memory when it cannot be written)."""
        if not embeddings:
            return
        rows = [(self._key(doc_id, page), doc_id, int(page), self.fingerprint, int(np.shape(e)[1]),
                 encode_int8(np.asarray(e, dtype=np.float32))) for page, e in embeddings.items()]
        with self._lock:
            db = self._open(create=True)
            if db is not None:
                try:
                    db.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?, ?)", rows)
                    db.commit()
                    return
                except sqlite3.Error as exc:
                    logger.info("page cache %s not written (%s); caching in memory only", self.directory, exc)
        self._memory.update((self._key(doc_id, page), np.asarray(e, np.float32)) for page, e in embeddings.items())

    def stats(self) -> dict[str, int]:
        """Cached pages (every fingerprint) and bytes on disk."""
        with self._lock:
            db = self._open(create=False)
            stored = int(db.execute("SELECT COUNT(*) FROM pages").fetchone()[0]) if db is not None else 0
        return {"pages": stored + len(self._memory),
                "bytes": bytes_under(self.directory) if self.directory.exists() else 0}

    def clear(self) -> int:
        """Drop every cached page (all fingerprints) and the files that held them; returns how many were removed."""
        removed = self.stats()["pages"]
        self._memory.clear()
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        return removed

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _drop_old_layout(directory: Path) -> None:
    """Remove what a cache written before the SQLite file left in ``directory`` (a whole store: Chroma's files, its
    cache and lock); its pages are encoded again when needed."""
    for name in ("chroma", "cache", "store.json", "write.lock"):
        old = directory / name
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        elif old.exists():
            old.unlink(missing_ok=True)
