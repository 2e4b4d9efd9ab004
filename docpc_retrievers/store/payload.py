"""Reading documents' payload: compact vectors and grid previews, from the local cache, else from Chroma (then cached)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.cache import VectorCache
from docpc_retrievers.store.codec import unpack_vectors
from docpc_retrievers.store.engine import ChromaEngine

__all__ = ["SCRATCH_ROWS", "VectorReader", "read_grid"]

SCRATCH_ROWS = 1 << 20
"""Most rows a reader's thread keeps in its scratch buffer between searches (128 MiB at 128 dimensions): 1,024
candidates of a grid store are about 400k rows; larger gathers get fresh arrays."""


WARM_COPY_RATE = 1e9
"""Bytes per second above which a copy of cached rows came from memory, not disk. The next reads then skip their
hints (``posix_fadvise``), which on a warm cache cost more than the copy: 8,192 candidates of the 100k benchmark
store took 176 ms without hints and 227 ms with them (two threads); a copy from disk without hints runs far below
this rate, so the hints come back with the first slow copy."""
_RATE_SAMPLE_BYTES = 1 << 20


class VectorReader:
    """The :class:`~docpc_retrievers.store.search.VectorSource` of a store: packed int8 rows by document id.

    ``counts`` and ``parts`` are the caller's live maps (vector count, part split per document).
    """

    def __init__(self, engine: ChromaEngine, cache: VectorCache, path: Path, dim: int,
                 counts: Mapping[str, int], parts: Mapping[str, tuple[int, ...]]) -> None:
        self.engine, self.cache, self.path, self.dim = engine, cache, path, dim
        self.counts, self._parts = counts, parts
        self._local = threading.local()
        self._lock = threading.Lock()
        self._warm = False

    def packed(self, ids: Sequence[str]) -> dict[str, bytes]:
        """Packed vectors of ``ids``; absent for documents deleted meanwhile (StoreError if a live one lacks them)."""
        found = self.cache.get_many(ids)
        missing = [doc_id for doc_id in ids if doc_id not in found]
        if missing:
            fetched = self.engine.payload(missing, "v")
            self.cache.put(fetched)
            found.update(fetched)
        absent = [doc_id for doc_id in ids if doc_id not in found]
        if absent:
            still = self.engine.records(absent, include_summary=False)
            if still:  # payload missing while the record lives: the store is damaged
                raise StoreError(
                    f"store {self.path}: the vectors of document(s) {', '.join(sorted(still))} are missing from Chroma"
                )
        return found

    def rows(self, ids: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        """The documents of ``ids`` still stored, their row counts, their int8 rows ``[N, dim]`` one after another,
        and the rows' scales ``[N]``.

        Cached entries are copied once, from the mapped cache straight into the result; misses come from Chroma
        as in :meth:`packed` (and are cached). A document deleted meanwhile is left out. The rows and scales are
        this thread's scratch buffers: valid until its next call (exact scoring multiplies them at once).

        The reads are hinted to the kernel first (outside the lock: the threads' system calls overlap) unless the
        last sizable copy ran at memory speed (:data:`WARM_COPY_RATE`): on a warm cache the hints cost more than
        the copy they precede.
        """
        if len(ids) > 1 and not self._warm:
            self.cache.advise(ids)
        dim, counts = self.dim, self.counts
        with self._lock:  # the cache's maps and a miss's fetch and write are shared by the threads of a search
            found = self.cache.buffers(ids)
            counted = [counts.get(doc_id) for doc_id in ids]
            if all(buf is not None and n is not None and len(buf) >= n * (dim + 2)  # every one live and cached
                   for buf, n in zip(found, counted)):
                kept, sizes, buffers = list(ids), counted, found
            else:
                kept, sizes, buffers, missing = [], [], [], []
                for doc_id, buf, n in zip(ids, found, counted):
                    if n is None:  # deleted meanwhile
                        continue
                    if buf is None or len(buf) < n * (dim + 2):  # a miss, or an entry short of its record's rows
                        missing.append(doc_id)
                    kept.append(doc_id)
                    sizes.append(n)
                    buffers.append(buf)
                if missing:
                    kept, sizes, buffers = self._fetch_missing(ids, kept, buffers, missing)
        return self._copied(kept, sizes, buffers)  # type: ignore[arg-type]  # the copy runs outside the lock

    def _copied(self, kept: list[str], sizes: list[int],
                buffers: list[np.ndarray]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        """:meth:`rows`'s answer: ``buffers``' int8 rows and scales copied into this thread's scratch arrays."""
        dim = self.dim
        total = sum(sizes)
        rows, scales = self._scratch(total)
        if kept:  # byte slices of the packed layout (int8 rows, then float16 scales): no per-document view objects
            start = time.perf_counter()
            _gather([b[: n * dim] for b, n in zip(buffers, sizes)], rows.reshape(-1).view(np.uint8))
            if total * dim >= _RATE_SAMPLE_BYTES:  # a copy large enough to tell memory from disk
                self._warm = total * dim > WARM_COPY_RATE * (time.perf_counter() - start)
            _gather([b[n * dim : n * (dim + 2)] for b, n in zip(buffers, sizes)], scales.view(np.uint8))
        return kept, sizes, rows, scales

    def _fetch_missing(
        self, ids: Sequence[str], kept: list[str], buffers: list[np.ndarray | None], missing: list[str]
    ) -> tuple[list[str], list[int], list[np.ndarray]]:
        """``kept`` with the misses' buffers fetched from Chroma (and cached); a cache entry too short for its
        record is dropped and fetched again. Documents deleted meanwhile are left out; the order of ``ids`` kept."""
        wanted = set(missing)
        self.cache.drop([d for d, b in zip(kept, buffers) if b is not None and d in wanted])
        fetched = {d: np.frombuffer(bytearray(b), dtype=np.uint8) for d, b in self.packed(missing).items()}
        found = {d: b for d, b in zip(kept, buffers) if b is not None and d not in wanted}
        found.update(fetched)
        out = [d for d in ids if d in found and d in self.counts]
        return out, [self.counts[d] for d in out], [found[d] for d in out]

    def _scratch(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """This thread's reusable ``[n, dim]`` int8 rows and ``[n]`` scales (grown as needed, never shrunk).

        Why: a fresh 50 MB array per 1,024 candidates is fresh pages the kernel maps in on first write; copying
        into pages already mapped took 9 ms instead of 17 (hard queries at 100k).
        """
        if n > SCRATCH_ROWS:  # a rare, large gather (many-page records): fresh arrays, not kept
            return np.empty((n, self.dim), dtype=np.int8), np.empty(n, dtype="<f2")
        buf = getattr(self._local, "buf", None)
        if buf is None or buf[0].shape[0] < n:
            buf = self._local.buf = (np.empty((max(n, 1), self.dim), dtype=np.int8), np.empty(max(n, 1), dtype="<f2"))
        return buf[0][:n], buf[1][:n]

    def unpacked(self, doc_id: str, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """int8 rows ``[n, dim]``, scales ``[n]`` and anchors (or None) of one document."""
        return unpack_vectors(data, self.dim, self.counts[doc_id])

    def parts(self, doc_id: str) -> tuple[int, ...] | None:
        return self._parts.get(doc_id)


def _gather(pieces: Sequence[np.ndarray], out: np.ndarray) -> None:
    """Copy byte arrays ``pieces`` one after another into ``out`` (uint8), without holding the GIL where it can.

    Why: numpy's concatenate holds the GIL through the copy, so the approximate pass's threads took turns; torch's
    does not (1,280 candidates on two threads: 22 -> 17 ms on the 100k benchmark store; benchmarks/results/).
    torch wraps only writable arrays without a warning: the cache maps its files copy-on-write (cache.py), and a
    read-only piece (none on the search path) falls back to numpy.
    """
    import torch

    if sum(len(p) for p in pieces) != out.size:  # torch would resize ``out`` away from the numpy buffer instead
        raise ValueError("the pieces do not fill the output exactly")
    if not all(p.flags.writeable for p in pieces):
        np.concatenate(pieces, out=out)
        return
    torch.cat([torch.from_numpy(p) for p in pieces], out=torch.from_numpy(out))


def read_grid(cached: Path, fetch: Callable[[], bytes | None]) -> bytes | None:
    """A grid preview from its cached file, else ``fetch()``-ed and written there (a failed write is only a miss)."""
    try:
        return cached.read_bytes()
    except OSError:
        pass
    data = fetch()
    if data is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, cached)
        except OSError:
            pass
    return data
