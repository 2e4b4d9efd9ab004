"""What this process knows of the store: each document's vector count and parts, and the first stage.

Built from the cache's first-stage snapshot when there is one (memory-mapped,
nothing read at open), else from every record in Chroma; kept in step with
other writers through the change feed (:meth:`StoreView.follow`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.codec import dequantize
from docpc_retrievers.store.engine import ChromaEngine
from docpc_retrievers.store.payload import VectorReader
from docpc_retrievers.store.records import summary_vectors
from docpc_retrievers.store.search import CentroidIndex, TwoStageSearch
from docpc_retrievers.store.search.token_build import TokenStageBuild
from docpc_retrievers.store.search.tokens import TokenIndex, faiss_available

__all__ = ["StoreView"]

logger = logging.getLogger(__name__)

_SAVE_EVERY = 20_000
"""Documents this process adds after which the snapshots are saved (their in-memory parts folded in)."""
_SAVE_AFTER = 100
"""Documents changed by other writers after which the snapshot is saved again."""
_FILTERS_KEPT = 32
"""Distinct ``where`` filters whose matching ids a view remembers (all forgotten when more come)."""
INLINE_BUILD_MAX = 1_000
"""Stores of at most this many documents build a missing token stage while the query that needs it waits (seconds);
larger ones in the background (token_build.py), their queries answered from the summaries meanwhile."""


class StoreView:
    """Vector counts (``n``), parts and the first stage of the documents this process knows."""

    def __init__(self, engine: ChromaEngine, cache: VectorCache, path: Path, *, dim: int,
                 n_centroids: int, n_candidates: int, lock: Any = None) -> None:
        self.engine, self.cache, self.path, self.dim = engine, cache, path, dim
        self.lock = lock if lock is not None else threading.RLock()
        """The store's lock: every call into the view holds it; a background build takes it to read."""
        self.n: dict[str, int] = {}
        self.parts: dict[str, tuple[int, ...]] = {}
        self.index = CentroidIndex(n_centroids, dim)
        self.reader = VectorReader(engine, cache, path, dim, self.n, self.parts)
        # The token-level stage (faiss): built on first need when no saved copy matches the centroid one.
        self.tokens: TokenIndex | None = None
        self._tokens_wanted = faiss_available()
        self._build: TokenStageBuild | None = None  # a token stage being built in the background
        self._saved_position = -1  # the change feed's position of the first-stage snapshot in the cache
        self._tokens_position = -1  # and of the token stage's
        self._added_since_save = 0
        self._feed_size = -1  # the feed's size when last followed completely (-1: never, this process)
        self._matches: dict[str, tuple[int, list[str]]] = {}  # where filter -> (feed size, matching ids)
        self.search = TwoStageSearch(self.index, self.reader, n_candidates, token_stage=self._token_stage)

    def open(self) -> list[str]:
        """Fill the view: the cache's snapshot plus the feed since, or every record. Returns ids changed meanwhile."""
        saved = self.index.load(self.cache.first_stage_dir) if self.cache.position else None
        parts = _saved_parts(saved)
        if saved is not None and parts is not None:
            self.n.update(zip(self.index.ids(), saved["counts"].tolist()))
            self.parts.update(parts)
            if int(saved["position"]) != self.cache.position:  # replay from the snapshot (replaying is idempotent)
                self.cache.position = int(saved["position"])
                self.cache.seen.clear()
            self._saved_position = int(saved["position"])
            if self._tokens_wanted:
                tokens = TokenIndex(self.dim)
                kept = tokens.load(self.cache.token_stage_dir)
                if kept is not None and int(kept.get("position", -1)) == int(saved["position"]) and len(tokens) == len(self.n):
                    self.tokens, self._tokens_position = tokens, int(saved["position"])
            return self.follow()
        self.index = CentroidIndex(self.index.n_centroids, self.dim)
        self.search.first_stage = self.index
        self.n.clear()
        self.parts.clear()
        position, seen = self.engine.position()  # first: a commit landing meanwhile is replayed, not missed
        self.ingest(self.engine.records())
        self.cache.position = position
        self.cache.seen.update(seen)
        self.save()
        return []

    def ingest(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Add (or replace) documents from their Chroma records."""
        ids, cents = [], []
        for doc_id, meta in records.items():
            if "_summary" not in meta:
                continue  # a record of another format (or being written)
            ids.append(doc_id)
            cents.append(summary_vectors(str(meta["_summary"]), self.dim))
            self.n[doc_id] = int(meta["_n"])
            parts = meta.get("_parts")
            if parts:
                self.parts[doc_id] = tuple(int(v) for v in parts)
        self.index.add(ids, cents)

    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray], counts: Sequence[int],
            parts: Sequence[tuple[int, ...] | None], vectors: Sequence[np.ndarray]) -> None:
        """Our own commit: documents whose summaries and vectors we already hold."""
        self.index.add(list(ids), summaries)
        self._touched(ids)
        if self.tokens is not None:
            self.tokens.add(list(ids), vectors)
        elif self._tokens_wanted and not self.n:  # the first documents of a store: start the token stage with them
            self.tokens = TokenIndex(self.dim)
            self.tokens.add(list(ids), vectors)
        for doc_id, n, split in zip(ids, counts, parts):
            self.n[doc_id] = int(n)
            if split:
                self.parts[doc_id] = split
        self._added_since_save += len(ids)
        if self._added_since_save >= _SAVE_EVERY:  # bounds the in-memory segments of a long indexing run
            self.save()  # after the counts: a save records them, and a token-stage rebuild reads every counted id

    def forget(self, ids: Sequence[str]) -> None:
        self.index.remove(ids)
        self._touched(ids)
        if self.tokens is not None:
            self.tokens.remove(ids)
        for doc_id in ids:
            self.n.pop(doc_id, None)
            self.parts.pop(doc_id, None)

    def follow(self) -> list[str]:
        """Apply what other writers committed since we last looked (new, replaced, deleted); the ids touched.

        The feed's size is read first and checked before the feed itself: a search pays a count, not a
        keyed query, when nothing changed; a commit landing after the count is caught by the next follow.
        """
        size = self.engine.feed_size()
        if size == self._feed_size:
            return []
        changes = self.engine.changes(self.cache.position, skip=self.cache.seen)
        if not changes:
            self._feed_size = size
            return []
        touched = list(dict.fromkeys(i for c in changes for i in c.ids))
        self.forget(touched)
        records = self.engine.records(touched) if touched else {}
        self.ingest(records)
        if self.tokens is not None:
            self.tokens.add(*self._stored_vectors(touched))  # those still stored: re-ingested from their records
        self.cache.seen.update(c.key for c in changes)
        self.cache.position = max(self.cache.position, max(c.seq for c in changes))
        self.cache.mark_dirty()
        if len(touched) > _SAVE_AFTER:
            self.save()
        self._feed_size = size
        return touched

    def matching(self, where: Mapping[str, Any]) -> list[str]:
        """Ids whose metadata match a ``where`` filter, remembered until the feed moves.

        Every write (records, metadata, deletions) appends to the feed, so while its size is the one this
        view last followed, the answer cannot have changed: a filter repeated over many searches costs one
        Chroma query (45 ms for 5,000 of 100,000 documents), not one per search.
        """
        key = json.dumps(where, sort_keys=True, default=str)
        kept = self._matches.get(key)
        if kept is not None and self._feed_size >= 0 and kept[0] == self._feed_size:
            return kept[1]
        found = self.engine.ids(where)
        if len(self._matches) >= _FILTERS_KEPT:
            self._matches.clear()
        self._matches[key] = (self._feed_size, found)
        return found

    def _token_stage(self) -> TokenIndex | None:
        """The token-level stage; where there is none, built from every stored vector: while the query waits on a
        small store (``INLINE_BUILD_MAX``), else in the background (meanwhile what it has added so far, its
        ``coverage`` below 1, or None before that: the caller takes the summaries' candidates for the rest). Saved
        once built."""
        if self.tokens is not None or not self._tokens_wanted or not self.n:
            return self.tokens
        if len(self.n) <= INLINE_BUILD_MAX:
            self.tokens = self._build_tokens()
            self.save()
        elif self._build is None or not self._build.running:  # none yet, or one that failed (logged): start one
            self._build = self._new_build()
            self._build.start()
            logger.warning(
                "%s has no token-level first stage on this machine: building it in the background from %d documents' "
                "vectors (minutes at 100k on 2 cores); until then short queries take their candidates from the "
                "centroid summaries and the part built so far, which may rank fewer of the best. `docpc warm` builds "
                "it ahead of the first query.", self.path, len(self.n))
        return self.tokens if self.tokens is not None or self._build is None else self._build.partial

    @property
    def token_stage_state(self) -> str:
        """``ready``, ``building`` (in the background), ``absent`` (built on first need) or ``unavailable`` (no faiss)."""
        if self.tokens is not None:
            return "ready"
        if not self._tokens_wanted:
            return "unavailable"
        return "building" if self._build is not None and self._build.running else "absent"

    def warm(self, on_progress: Callable[[int, int], None] | None = None, *, chunk: int = 500,
             on_build: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Fetch into the cache every document's vectors it lacks, then build the token stage where it has none and
        save both first stages: what a fresh machine's first queries would otherwise wait for (at 100k on 2 cores,
        minutes). Interrupted, it keeps what it fetched (the cache saves as it grows) and a re-run goes on. A build
        running in the background is taken over where it stands. ``on_progress``: (fetched, documents);
        ``on_build``: (added to the token stage, documents)."""
        started = time.perf_counter()
        ids = list(self.n)
        missing = [doc_id for doc_id in ids if doc_id not in self.cache]
        for start in range(0, len(missing), chunk):
            self.reader.packed(missing[start : start + chunk])
            if on_progress is not None:
                on_progress(len(ids) - len(missing) + min(start + chunk, len(missing)), len(ids))
        built = self.tokens is None and self._tokens_wanted and bool(self.n)
        if built:
            self.tokens = self._build_tokens(on_build)
        self.save()
        return {"documents": len(ids), "fetched": len(missing), "token_stage_built": built,
                "token_stage": self.tokens is not None, "seconds": time.perf_counter() - started}

    def close(self) -> None:
        """Stop a background build (what it built is lost: the next reader starts again)."""
        if self._build is not None:
            self._build.stop()
            self._build = None

    def _new_build(self) -> TokenStageBuild:
        return TokenStageBuild(self.dim, list(self.n), read=self._stored_vectors, lock=self.lock, done=self._adopt,
                               label=str(self.path), position=self.cache.position, persist=self._persist)

    def _persist(self, build: TokenStageBuild) -> None:
        """Save a finished background build as it stands (outside the lock: its index is still its own)."""
        started = time.perf_counter()
        try:
            build.tokens.save(self.cache.token_stage_dir, {"position": np.array(build.position, dtype=np.int64)})
        except OSError as exc:
            logger.warning("could not save the token stage to %s: %s", self.cache.token_stage_dir, exc)
            return
        logger.info("saved the token-level first stage of %s in %.1f s", self.path, time.perf_counter() - started)

    def _build_tokens(self, on_progress: Callable[[int, int], None] | None = None) -> TokenIndex:
        """A token-level stage of every stored vector, built in this thread (one running in the background, if
        any, is taken over where it stands)."""
        build, self._build = self._build, None
        if build is not None:
            build.stop()
        if build is None or build.error is not None:
            build = self._new_build()
        build.on_progress = on_progress
        return self._applied(build)

    def _adopt(self, build: TokenStageBuild) -> None:
        """A background build finished (called under the lock): the changes made meanwhile applied, then used. Saved
        again only where its saved copy no longer matches the cache's first-stage snapshot (a change came meanwhile,
        or the snapshot is older than the view): the 100k write holds the lock for tens of seconds."""
        self._build = None
        if build.saved and not build.touched and build.position == self.cache.position == self._saved_position:
            self.tokens = build.run()  # nothing left to read: the index as saved
            self._tokens_position = build.position
            return
        self.tokens = self._applied(build)
        self.save()

    def _applied(self, build: TokenStageBuild) -> TokenIndex:
        """``build`` finished (in this thread if it had not) with the documents changed since it began."""
        tokens = build.run()
        touched = list(build.touched)
        tokens.remove(touched)
        tokens.add(*self._stored_vectors(touched))
        return tokens

    def _touched(self, ids: Sequence[str]) -> None:
        if self._build is not None:
            self._build.touch(ids)

    def _stored_vectors(self, ids: Sequence[str]) -> tuple[list[str], list[np.ndarray]]:
        """The float32 vectors of those of ``ids`` still stored, with their ids."""
        ids = [doc_id for doc_id in ids if doc_id in self.n]
        packed = self.reader.packed(ids)
        found = [doc_id for doc_id in ids if doc_id in packed]
        out = []
        for doc_id in found:
            q, scale, _ = self.reader.unpacked(doc_id, packed[doc_id])
            out.append(dequantize(q, scale))
        return found, out

    def save(self) -> None:
        """Save the first stage as a snapshot in the cache, so the next open maps it instead of reading Chroma."""
        ids = self.index.ids()
        extras = {
            "counts": np.array([self.n.get(i, 0) for i in ids], dtype=np.int64),
            "part_ids": np.array(list(self.parts), dtype=str),
            "parts": np.array([json.dumps(list(v)) for v in self.parts.values()], dtype=str),
            "position": np.array(self.cache.position, dtype=np.int64),
        }
        self._added_since_save = 0
        try:
            self.index.save(self.cache.first_stage_dir, extras)
            self._saved_position = int(extras["position"])
            if self.tokens is not None and self.tokens.outgrown:  # lists trained on the first few documents
                self.tokens = self._build_tokens()
            if self.tokens is not None and (self.tokens.changed or self._tokens_position != self.cache.position):
                self.tokens.save(self.cache.token_stage_dir, {"position": extras["position"]})  # 2.6 GB at 100k
                self._tokens_position = self.cache.position
            (self.cache.folder / "first_stage.npz").unlink(missing_ok=True)  # where 0.2 kept it
        except OSError as exc:
            logger.warning("could not save the first stage to %s: %s", self.cache.first_stage_dir, exc)
        self.cache.save()


def _saved_parts(saved: Mapping[str, np.ndarray] | None) -> dict[str, tuple[int, ...]] | None:
    """Each document's part sizes from a first-stage snapshot's extras; None when it lacks them or a part list does
    not parse (cut short by a save before 0.3, at 4,096 characters): the view is then rebuilt from Chroma."""
    if saved is None or not {"counts", "part_ids", "parts", "position"} <= set(saved):
        return None
    try:
        return {str(k): tuple(int(v) for v in json.loads(str(p))) for k, p in zip(saved["part_ids"], saved["parts"])}
    except ValueError as exc:
        logger.info("saved first stage not used (%s); reading every record", exc)
        return None
