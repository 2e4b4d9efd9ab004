"""The local cache of a store: compact vectors and first-stage summaries copied from the engine.

Never needed for correctness and safe to delete at any time: every entry is
derived from the engine (Chroma), filled on demand, and dropped when the
engine's change feed says the document changed or when the engine behind the
store is a different one (its identity changed). Several processes may share
a cache folder: each appends to its own file, and a read that fails for any
reason is a miss (the engine is asked again).

Files (under ``StoreLayout.cache``)::

    state.json            engine identity, the change-feed position applied
    first_stage/          the search backend's snapshot (search/centroids.py: raw centroid files, memory-mapped)
    vec-<session>.bin     packed compact vectors, appended (codec.pack_vectors)
    vectors.npz           where each document's packed vectors are: file, offset, length
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["VectorCache"]

logger = logging.getLogger(__name__)

_STATE_VERSION = 1
_OLD_ID_WIDTH = 64

SAVE_EVERY_BYTES = 256 << 20
"""A cache saves its index after appending this much, so a reader killed before ``close()`` keeps what it fetched
(before, a 100k-document reader that filled 3.5 GB from Chroma in 15 minutes and was stopped left it all
unreferenced). Each save rewrites the index: 23 MB at 100k documents of 32-character ids, against 256 MiB of
vectors."""

_OPEN: weakref.WeakSet[VectorCache] = weakref.WeakSet()


@atexit.register
def _save_open_caches() -> None:
    """At interpreter exit, save the index of every cache its owner never closed (a script without ``close()``)."""
    for cache in list(_OPEN):
        try:
            if cache.dirty:
                cache.save()
        except Exception as exc:
            logger.debug("cache %s not saved at exit: %s", cache.folder, exc)


class VectorCache:
    """Packed vectors by document id in append-only files, plus the saved first-stage summaries."""

    def __init__(self, folder: Path, identity: str) -> None:
        self.folder = folder
        self.identity = identity
        self.position = 0
        self.seen: set[str] = set()
        self._where: dict[str, tuple[str, int, int]] = {}
        self._file: BinaryIO | None = None
        self._file_name = f"vec-{os.getpid()}-{secrets.token_hex(4)}.bin"
        self._maps: dict[str, np.memmap] = {}
        self._fds: dict[str, int] = {}
        self._dirty = False
        self._unsaved_bytes = 0
        self._load_state()
        shutil.rmtree(folder / "token_stage", ignore_errors=True)  # an older version's token-level index: unused now
        _OPEN.add(self)

    # ----------------------------------------------------------------- state
    def _load_state(self) -> None:
        try:
            state = json.loads((self.folder / "state.json").read_text())
            if state.get("version") != _STATE_VERSION or state.get("identity") != self.identity:
                raise ValueError("cache belongs to another store")
            self.position = int(state.get("position", 0))
            self.seen = set(state.get("seen") or [])
            with np.load(self.folder / "vectors.npz") as z:  # lists first: 0.42 s -> 0.08 s at 100k entries
                self._where = dict(zip(z["ids"].tolist(), zip(z["files"].tolist(), z["offsets"].tolist(),
                                                              z["lengths"].tolist())))
            if not state.get("whole_ids"):  # before 0.3 ids were cut at 64 characters: such an entry may be another's
                self._where = {k: v for k, v in self._where.items() if len(k) != _OLD_ID_WIDTH}
        except FileNotFoundError:
            self._reset()
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
            logger.info("local cache %s not used (%s); it will be rebuilt from the store", self.folder, exc)
            self._reset()

    def _reset(self) -> None:
        """Forget every cached entry (files of other sessions are left for them; unreferenced ones are cleaned)."""
        self.position, self.seen, self._where = 0, set(), {}
        for name in ("first_stage.npz", "summaries.npz", "vectors.npz", "state.json", "first_stage/current.json"):
            try:
                (self.folder / name).unlink()
            except OSError:
                pass
        self._dirty = True

    @property
    def dirty(self) -> bool:
        """Whether something changed since the last :meth:`save`."""
        return self._dirty

    def advance(self, position: int, keys: Iterable[str]) -> None:
        """Our own commit at feed ``position`` (keys ``keys``): followed without reading it back."""
        self.seen.update(keys)
        self.position = max(self.position, position)
        self._dirty = True

    def mark_dirty(self) -> None:
        """Note a change made from outside (the feed position, the seen keys)."""
        self._dirty = True

    def save(self) -> None:
        """Write the index of cached vectors and the feed position (atomically)."""
        if not self._dirty:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if self._file is not None:
                self._file.flush()
            ids = list(self._where)
            files = [self._where[i][0] for i in ids]
            offsets = np.array([self._where[i][1] for i in ids], dtype=np.int64)
            lengths = np.array([self._where[i][2] for i in ids], dtype=np.int64)
            _atomic_npz(self.folder / "vectors.npz", ids=np.array(ids, dtype=str), files=np.array(files, dtype=str),
                        offsets=offsets, lengths=lengths)
            state = {"version": _STATE_VERSION, "identity": self.identity, "position": self.position,
                     "seen": sorted(self.seen)[-2000:], "whole_ids": True}
            _atomic_text(self.folder / "state.json", json.dumps(state))
            self._dirty, self._unsaved_bytes = False, 0
        except OSError as exc:
            logger.warning("could not save the local cache %s: %s", self.folder, exc)

    @property
    def first_stage_dir(self) -> Path:
        """Where the first stage saves its snapshot (see ``CentroidIndex.save``)."""
        return self.folder / "first_stage"

    # ---------------------------------------------------------------- vectors
    def get(self, doc_id: str) -> bytes | None:
        """Cached packed vectors of a document, or None (a miss, including any read failure)."""
        self._flush_for([doc_id])
        view = self._view(doc_id)
        return None if view is None else view.tobytes()

    def views(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        """Read-only uint8 views of cached entries in the mapped files (misses left out), their reads issued together.

        What :meth:`get_many` returns without copying each entry into a ``bytes`` first: exact scoring copies the
        rows once, into the matrix it multiplies (for 1,024 candidates ``get_many`` took 34 ms, the views 3 ms). The
        files are append-only and never truncated (compaction writes new ones), so a view stays valid.
        """
        wanted = [i for i in ids if i in self._where]
        if len(wanted) > 1:
            self.advise(wanted)
        self._flush_for(wanted)
        out: dict[str, np.ndarray] = {}
        for doc_id in wanted:
            view = self._view(doc_id)
            if view is not None:
                out[doc_id] = view
        return out

    def buffers(self, ids: Sequence[str]) -> list[np.ndarray | None]:
        """:meth:`views` without the hint, as a list in the order of ``ids`` (None: a miss): the few dictionary
        lookups per entry that the approximate pass can afford for thousands of candidates."""
        self._flush_for(ids)
        where, maps = self._where, self._maps
        out: list[np.ndarray | None] = []
        for doc_id in ids:
            entry = where.get(doc_id)
            if entry is None:
                out.append(None)
                continue
            name, offset, length = entry
            mm = maps.get(name)
            if mm is not None and mm.shape[0] >= offset + length:
                out.append(mm[offset : offset + length])
            else:  # a file not mapped yet (or grown since), or unreadable: the careful path
                out.append(self._view(doc_id))
        return out

    def get_many(self, ids: Iterable[str]) -> dict[str, bytes]:
        """Cached packed vectors of several documents (misses left out), their reads issued together.

        Why: a query's candidates are scattered over a file larger than the
        page cache may hold; asking the kernel for every range first lets the
        disk serve them in parallel instead of one cold read after another.
        """
        return {doc_id: view.tobytes() for doc_id, view in self.views(ids).items()}

    def _flush_for(self, ids: Iterable[str]) -> None:
        """Flush this process's own file when one of ``ids`` lives in it (its last writes may still be buffered)."""
        if self._file is not None and any(self._where.get(i, ("",))[0] == self._file_name for i in ids):
            self._file.flush()

    def _view(self, doc_id: str) -> np.ndarray | None:
        """The mapped bytes of one entry, or None: unknown, or unreadable (then forgotten, so it is fetched again)."""
        where = self._where.get(doc_id)
        if where is None:
            return None
        name, offset, length = where
        try:
            mm = self._maps.get(name)
            if mm is None or mm.shape[0] < offset + length:  # a plain view of the map: slicing a memmap costs 6 us more
                # Copy-on-write, not read-only: nothing writes to it, and torch copies out of writable arrays without
                # a warning and without holding the GIL (payload.py, ``_gather``); the file is never changed.
                mm = self._maps[name] = np.memmap(self.folder / name, dtype=np.uint8, mode="c").view(np.ndarray)
            if mm.shape[0] < offset + length:
                raise ValueError("short cache file")
        except (OSError, ValueError):
            self._where.pop(doc_id, None)
            self._maps.pop(name, None)
            self._dirty = True
            return None
        return mm[offset : offset + length]

    def advise(self, ids: Iterable[str]) -> None:
        """Start reading the cached ranges of ``ids`` into the page cache (a hint: unknown ids and failures are
        ignored). Safe beside other threads' reads: the search's threads advise their blocks in parallel."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None:
            return
        for doc_id in ids:
            where = self._where.get(doc_id)
            if where is None:
                continue
            name, offset, length = where
            try:
                fd = self._fds.get(name)
                if fd is None:
                    opened = os.open(self.folder / name, os.O_RDONLY)
                    fd = self._fds.setdefault(name, opened)
                    if fd != opened:  # another thread opened it first
                        os.close(opened)
                advise(fd, offset, length, os.POSIX_FADV_WILLNEED)
            except OSError:
                return

    def _close_fds(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def put(self, items: Mapping[str, bytes]) -> None:
        """Remember packed vectors (a failure to write only costs a later refetch)."""
        if not items:
            return
        try:
            if self._file is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._file = open(self.folder / self._file_name, "ab")
            for doc_id, data in items.items():
                offset = self._file.tell()
                self._file.write(data)
                self._where[doc_id] = (self._file_name, offset, len(data))
                self._unsaved_bytes += len(data)
            self._dirty = True
        except OSError as exc:
            logger.warning("could not write the local cache %s: %s", self.folder, exc)
            return
        if self._unsaved_bytes >= SAVE_EVERY_BYTES:
            self.save()

    def drop(self, ids: Iterable[str]) -> None:
        """Forget documents (they changed or were deleted)."""
        for doc_id in ids:
            if self._where.pop(doc_id, None) is not None:
                self._dirty = True

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._where

    def bytes(self) -> int:
        """Bytes of the cache folder."""
        if not self.folder.exists():
            return 0
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())

    def live_bytes(self) -> int:
        """Bytes of the entries still referenced."""
        return sum(n for _, _, n in self._where.values())

    def compact(self) -> int:
        """Rewrite the live entries into a fresh file when dead ones take more room; returns bytes freed.

        Deleted and replaced documents leave their old rows in append-only files;
        this reclaims them (files of other live processes are left alone, see :meth:`vacuum`).
        """
        files = {f for f, _, _ in self._where.values()}
        total = sum((self.folder / f).stat().st_size for f in files if (self.folder / f).exists())
        live = self.live_bytes()
        if total <= 2 * live + (1 << 20):
            return self.vacuum()
        old = dict(self._where)
        if self._file is not None:
            self._file.close()
            self._file = None
        self._file_name = f"vec-{os.getpid()}-{secrets.token_hex(4)}.bin"
        for doc_id in old:  # one entry at a time: a large cache never sits in memory
            data = self.get(doc_id)
            if data is not None:
                self.put({doc_id: data})
        self.save()
        freed = 0
        for name in files:  # this process's old files: nothing refers to them now
            if name.startswith(f"vec-{os.getpid()}-") and name != self._file_name:
                path = self.folder / name
                freed += path.stat().st_size if path.exists() else 0
                path.unlink(missing_ok=True)
                self._maps.pop(name, None)
                fd = self._fds.pop(name, None)
                if fd is not None:
                    os.close(fd)
        return freed + self.vacuum()

    def vacuum(self, *, min_age: float = 60.0) -> int:
        """Remove cache files no entry of this process refers to and rewrite nothing else; returns bytes freed.

        Files written by other live processes are kept when they are newer than a minute.
        """
        import time

        if not self.folder.exists():
            return 0
        used = {f for f, _, _ in self._where.values()} | {self._file_name}
        freed = 0
        for path in self.folder.glob("vec-*.bin"):
            if path.name in used or time.time() - path.stat().st_mtime < min_age:
                continue
            freed += path.stat().st_size
            path.unlink(missing_ok=True)
            self._maps.pop(path.name, None)
            fd = self._fds.pop(path.name, None)
            if fd is not None:
                os.close(fd)
        return freed

    def close(self) -> None:
        """Save the index, reclaim dead rows when they dominate, and close the file."""
        try:
            self.compact()
        except OSError as exc:
            logger.debug("cache compaction skipped: %s", exc)
        self.save()
        if self._file is not None:
            self._file.close()
            self._file = None
        self._maps.clear()
        self._close_fds()
        _OPEN.discard(self)


def _atomic_npz(path: Path, **arrays: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)


def _atomic_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
