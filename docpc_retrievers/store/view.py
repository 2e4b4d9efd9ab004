"""What this process knows of the store: each document's vector count and parts, and the search backend.

Built from the cache's snapshot of the backend when there is one (memory-mapped,
nothing read at open), else from every record in Chroma; kept in step with
other writers through the change feed (:meth:`StoreView.follow`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.engine import ChromaEngine
from docpc_retrievers.store.payload import VectorReader
from docpc_retrievers.store.records import parts_of, summary_codes, summary_vectors
from docpc_retrievers.store.search import (
    Scored,
    SummaryCodes,
    SearchBackend,
    SearchConfig,
    backend_for,
)
from docpc_retrievers.store.search.ranking import ranked
from docpc_retrievers.store.snapshot_build import build_snapshot

__all__ = ["StoreView", "checked_queries"]

logger = logging.getLogger(__name__)

_SAVE_EVERY = 20_000
"""Documents changed (added here, or followed from other writers) after which the snapshot is saved, its in-memory
delta folded in. Below that a change stays an in-memory segment beside the mapped snapshot: following another
writer costs the changed records, never a rewrite of the whole snapshot inside a search."""
_RETRIES = 4
"""Rounds a search makes when documents it found were deleted (or replaced) by another writer meanwhile."""
_FILTERS_KEPT = 32
"""Distinct ``where`` filters whose matching ids a view remembers (all forgotten when more come)."""


class StoreView:
    """Vector counts (``n``), parts and the search backend of the documents this process knows."""

    def __init__(self, engine: ChromaEngine, cache: VectorCache, path: Path, *, dim: int,
                 config: SearchConfig,
                 on_change: Callable[[list[str]], None] | None = None) -> None:
        self.engine, self.cache, self.path, self.dim, self.config = engine, cache, path, dim, config
        self.on_change = on_change
        """Told the ids a search's own look at the feed changed (the store drops what it remembers of them)."""
        self.n: dict[str, int] = {}
        self.parts: dict[str, tuple[int, ...]] = {}
        self.reader = VectorReader(engine, cache, path, dim, self.n, self.parts)
        self.backend: SearchBackend = backend_for(config.backend, self.reader, dim=dim, config=config)
        self._added_since_save = 0
        self._feed_size = -1  # the feed's size when last followed completely (-1: never, this process)
        self._matches: dict[str, tuple[int, list[str]]] = {}  # where filter -> (feed size, matching ids)

    def open(self) -> list[str]:
        """Fill the view: the cache's snapshot plus the feed since, or every record. Returns ids changed meanwhile."""
        saved = self.backend.load(self.cache.first_stage_dir) if self.cache.position else None
        parts = _saved_parts(saved)
        if saved is not None and parts is not None:
            self.n.update(zip(self.backend.ids(), saved["counts"].tolist()))
            self.parts.update(parts)
            if int(saved["position"]) != self.cache.position:  # replay from the snapshot (replaying is idempotent)
                self.cache.position = int(saved["position"])
                self.cache.seen.clear()
            return self.follow()
        self.backend = backend_for(self.config.backend, self.reader, dim=self.dim, config=self.config)
        self.n.clear()
        self.parts.clear()
        position, seen = self.engine.position()  # first: a commit landing meanwhile is replayed, not missed
        self.cache.position = position
        self.cache.seen.update(seen)
        try:
            build_snapshot(self.backend, self.cache.first_stage_dir, self._summary_pages(), self.engine.count(),
                           self._extras)
        except OSError as exc:  # a cache folder that cannot be written: the summaries held in memory instead
            logger.warning("could not write the search snapshot to %s (%s); holding it in memory",
                           self.cache.first_stage_dir, exc)
            self.backend = backend_for(self.config.backend, self.reader, dim=self.dim, config=self.config)
            self.ingest(self.engine.records())
            return []
        self._added_since_save = 0
        (self.cache.folder / "first_stage.npz").unlink(missing_ok=True)  # where 0.2 kept it
        self.cache.save()
        return []

    def _summary_pages(self) -> Iterator[list[SummaryCodes]]:
        """Every record's summary in its int8 form, a read's page at a time, filling the counts and parts."""
        for page in self.engine.record_pages():
            out = []
            for doc_id, meta in page:
                if "_summary" not in meta:
                    continue  # a record of another format (or being written)
                codes, scales = summary_codes(str(meta["_summary"]), self.dim)
                out.append((doc_id, codes, scales))
                self.n[doc_id] = int(meta["_n"])
                parts = parts_of(meta.get("_parts"))
                if parts:
                    self.parts[doc_id] = parts
            yield out

    def ingest(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Add (or replace) documents from their Chroma records."""
        ids, cents = [], []
        for doc_id, meta in records.items():
            if "_summary" not in meta:
                continue  # a record of another format (or being written)
            ids.append(doc_id)
            cents.append(summary_vectors(str(meta["_summary"]), self.dim))
            self.n[doc_id] = int(meta["_n"])
            parts = parts_of(meta.get("_parts"))
            if parts:
                self.parts[doc_id] = parts
        self.backend.add(ids, cents)

    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray], counts: Sequence[int],
            parts: Sequence[tuple[int, ...] | None]) -> None:
        """Our own commit: documents whose summaries we already hold."""
        self.backend.add(list(ids), summaries)
        for doc_id, n, split in zip(ids, counts, parts):
            self.n[doc_id] = int(n)
            if split:
                self.parts[doc_id] = split
        self._added_since_save += len(ids)
        if self._added_since_save >= _SAVE_EVERY:  # bounds the in-memory segments of a long indexing run
            self.save()

    def forget(self, ids: Sequence[str]) -> None:
        self.backend.remove(ids)
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
        self.cache.seen.update(c.key for c in changes)
        self.cache.position = max(self.cache.position, max(c.seq for c in changes))
        self.cache.mark_dirty()
        self._added_since_save += len(touched)
        if self._added_since_save >= _SAVE_EVERY:  # bounds the in-memory delta of a reader that never closes
            self.save()
        self._feed_size = size
        return touched

    def search(self, query: np.ndarray, k: int, allowed: set[str] | None,
               read: Callable[[list[str]], Mapping[str, tuple[Mapping[str, Any], Any]]], *,
               candidates: int | None = None, exhaustive: bool = False,
               aggregate: str = "max") -> list[tuple[Scored, dict[str, Any], Any]]:
        """The backend's best ``k``, each with what ``read`` gives for it: its metadata and whatever else the caller
        needs of the hit (text, vectors), read in one go (``exhaustive``: every allowed document scored exactly in
        float32).

        This is the one place where other writers' changes meet a search: a hit ``read`` no longer finds (deleted
        meanwhile), or one whose ``source`` a better hit already has (a file's old and new versions, both present
        for a moment while it is replaced), gives its slot to the next document. A reader never fails on a writer
        and never lists one file twice."""
        gone: set[str] = set()
        found: list[tuple[Scored, dict[str, Any], Any]] = []
        for _ in range(_RETRIES):
            keep = allowed if not gone else set(allowed if allowed is not None else self.n) - gone
            if exhaustive:
                pool = list(keep) if keep is not None else list(self.n)
                hits = ranked(query, pool, self.reader, k, self.config, aggregate=aggregate, exact=True)
            else:
                hits = self.backend.search(query, k, keep, candidates=candidates, aggregate=aggregate)
            records = read([h.id for h in hits])
            found, sources, dropped = [], set(), set()
            for h in hits:
                if h.id not in records:
                    dropped.add(h.id)
                    continue
                meta, extra = records[h.id]
                source = meta.get("source")
                if source is not None and source in sources:
                    dropped.add(h.id)
                    continue
                sources.add(source)
                found.append((h, dict(meta), extra))
            if len(found) >= k:
                break
            if not dropped - gone:
                # Fewer than k, nothing refused by the read: documents deleted while they were scored (they score
                # -inf and drop out of the ranking). What the feed says since decides whether to look again.
                touched = self.follow()
                if not touched:
                    break
                if self.on_change is not None:
                    self.on_change(touched)
            gone |= dropped
        return found[:k]

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

    def warm(self, on_progress: Callable[[int, int], None] | None = None, *, chunk: int = 500) -> dict[str, Any]:
        """Fetch into the cache every document's vectors it lacks and save the snapshot: what a fresh machine's first
        queries would otherwise wait for, this machine's kernel and thread choices included. Interrupted, it keeps
        what it fetched (the cache saves as it grows) and a re-run goes on. ``on_progress``: (fetched so far,
        documents)."""
        from docpc_retrievers.scoring.kernels import int8_kernel_choice
        from docpc_retrievers.store.shortlist_threads import threads_choice

        started = time.perf_counter()
        machine = {"int8_kernel": int8_kernel_choice().choice, "shortlist_threads": threads_choice().choice}
        ids = list(self.n)
        missing = [doc_id for doc_id in ids if doc_id not in self.cache]
        for start in range(0, len(missing), chunk):
            self.reader.packed(missing[start : start + chunk])
            if on_progress is not None:
                on_progress(len(ids) - len(missing) + min(start + chunk, len(missing)), len(ids))
        self.save()
        return {"documents": len(ids), "fetched": len(missing), "seconds": time.perf_counter() - started, **machine}

    def _extras(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """What a snapshot keeps beside the backend: counts in the order of its ``ids``, parts, the feed position."""
        return {
            "counts": np.array([self.n.get(i, 0) for i in ids], dtype=np.int64),
            "part_ids": np.array(list(self.parts), dtype=str),
            "parts": np.array([json.dumps(list(v)) for v in self.parts.values()], dtype=str),
            "position": np.array(self.cache.position, dtype=np.int64),
        }

    def save(self) -> None:
        """Save the backend as a snapshot in the cache, so the next open maps it instead of reading Chroma."""
        extras = self._extras(self.backend.ids())
        self._added_since_save = 0
        try:
            self.backend.save(self.cache.first_stage_dir, extras)
            (self.cache.folder / "first_stage.npz").unlink(missing_ok=True)  # where 0.2 kept it
        except OSError as exc:
            logger.warning("could not save the search snapshot to %s: %s", self.cache.first_stage_dir, exc)
        self.cache.save()


def checked_queries(queries: Sequence[np.ndarray], dim: int) -> list[np.ndarray]:
    """Queries as float32 ``[n_tokens, dim]`` matrices; ValueError for an empty or misshapen one."""
    qs = [np.asarray(q, dtype=np.float32) for q in queries]
    for q in qs:
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != dim:
            raise ValueError(f"query must be a non-empty [n_tokens, {dim}] matrix, got {q.shape}")
    return qs


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
