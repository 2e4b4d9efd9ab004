"""Building the token-level first stage from every stored vector, in a background thread or in the caller's.

A reader with no saved token stage (a fresh machine that skipped ``docpc warm``) needs one for its short queries; at
100k documents on 2 cores the build takes about 12 minutes from a warm cache, more with the vectors still in Chroma.
A large store builds it in a thread while queries take candidates from the centroid summaries; the build holds
the store's lock only to read a few documents' vectors at a time (the cache and the reader are not shared between
threads otherwise), and adds them to faiss outside it. Documents changed meanwhile are recorded (``touched``) and
applied when the built index is handed over. What it has added is handed to queries as it grows (``partial``,
``PUBLISHED_PARTS`` times over a build), so short queries take the token stage's candidates for that share of the
store and the summaries' for the rest. The thread runs at a lower scheduling priority (``BUILD_NICENESS``): a query
and the build wanting the same core, the query gets it.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from docpc_retrievers.blas_threads import one_faiss_thread
from docpc_retrievers.store.search.tokens import TokenIndex

__all__ = ["ADD_CHUNK", "BUILD_NICENESS", "PUBLISHED_PARTS", "READ_CHUNK", "TokenStageBuild"]

logger = logging.getLogger(__name__)

READ_CHUNK = 64
"""Documents read per hold of the store's lock: from the cache about a millisecond; from Chroma about 0.5 s at 137
documents/s (the 100k benchmark store on 2 cores), the longest a query waits behind the build."""
ADD_CHUNK = 512
"""Documents added to faiss at a time, outside the lock."""
PUBLISHED_PARTS = 16
"""A background build hands queries a view of what it has added each time a further 1/16 of the store is in (at
least ``ADD_CHUNK`` documents): each view's faiss parts are closed to additions, so a query can search them while the
thread adds to the next. More parts cost each query one more faiss search apiece until the build is saved as one."""
BUILD_NICENESS = 10
"""Nice value of the background build's thread (Linux gives each thread its own): where queries and the build want
the same core, CFS gives the queries' threads about nine tenths of it (weights 1,024 against 110); alone, the build
runs at full speed. It holds the store's lock only for reads of a millisecond or so, so a query seldom waits on a
build that lost its core. 0: the process's own priority."""
_LOCK_POLL_S = 0.1
"""How often a build waiting for the store's lock looks whether it was stopped."""


class TokenStageBuild:
    """One build of a token stage over ``ids`` (shuffled: the lists train on the first few hundred documents added,
    and a store's first documents are often one batch about one subject; 100k benchmark store, short queries: trained
    on the first 500, 0.98 of the exact top 10; on a random 500, 0.99: docs/store.md).

    ``read(ids)`` returns the float32 vectors ``[n_i, dim]`` of the ids still stored (with the ids); ``lock`` is the
    store's lock, held around each read; ``done(build)`` hands the finished build over, under the lock. ``persist``
    (optional) saves the finished index before that, outside the lock: at 100k the write takes tens of seconds,
    which queries would otherwise wait for; ``position`` is the change feed's position when the ids were listed.
    """

    def __init__(self, dim: int, ids: Sequence[str], *,
                 read: Callable[[Sequence[str]], tuple[list[str], list[np.ndarray]]],
                 lock: Any, done: Callable[[TokenStageBuild], None], label: str = "", position: int = -1,
                 persist: Callable[[TokenStageBuild], None] | None = None) -> None:
        self.tokens = TokenIndex(dim)
        self.ids = [ids[i] for i in np.random.default_rng(0).permutation(len(ids))]
        self.touched: set[str] = set()
        """Ids added, replaced or removed since the build listed its ids (:meth:`touch`): applied when it is handed
        over."""
        self.error: BaseException | None = None
        self.on_progress: Callable[[int, int], None] | None = None
        """Called with (documents added, documents listed) after each add (a progress bar's callback)."""
        self.label, self.position = label, position
        self.saved = False
        """Whether ``persist`` saved the finished index (as built: before the ``touched`` changes)."""
        self.partial: TokenIndex | None = None
        """What the background thread had added when it last published (``PUBLISHED_PARTS``), for queries to search
        meanwhile; None before the first."""
        self._published = 0  # documents in ``partial``
        self._read, self._lock, self._done, self._persist = read, lock, done, persist
        self._finished_at: float | None = None
        self._next = 0  # ids[:_next] are read
        self._read_ids: list[str] = []  # read, not yet added
        self._read_vectors: list[np.ndarray] = []
        self._stop = threading.Event()
        self._views = threading.Lock()  # ``touched`` and ``partial`` read together by the thread, set by writers
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()

    def touch(self, ids: Collection[str]) -> None:
        """Record ``ids`` as changed (added, replaced or removed) since the build listed its ids. The part handed to
        queries keeps their old vectors; it stops covering them, so the summaries rank their current ones."""
        with self._views:
            self.touched.update(ids)
            partial = self.partial
            if partial is not None and not partial.covered.isdisjoint(ids):
                partial.covered = partial.covered.difference(ids)  # a new set: the summaries' skip mask follows it

    @property
    def progress(self) -> tuple[int, int]:
        """(documents read, documents listed)."""
        return self._next, len(self.ids)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Go on in a daemon thread (stopped at interpreter exit, before the cache saves its index)."""
        self._thread = threading.Thread(target=self._background, name="docpc-token-stage", daemon=True)
        atexit.register(self.stop)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread after its current step; what it built so far is kept (:meth:`run` goes on).
        Call it holding the store's lock or not: the thread gives up waiting for the lock once stopped."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        atexit.unregister(self.stop)

    def run(self) -> TokenIndex:
        """Finish the build in the calling thread (taking the lock for each read) and return the index built."""
        while self._next < len(self.ids):
            with self._lock:
                self._read_next(ADD_CHUNK)
            self._flush()
        self._flush()
        self._finished()
        return self.tokens

    # ---------------------------------------------------------------- thread
    def _background(self) -> None:
        try:
            one_faiss_thread()  # the other core answers queries
            _yield_to_queries()
            while self._next < len(self.ids):
                if not self._locked():
                    return
                try:
                    self._read_next(READ_CHUNK)
                finally:
                    self._lock.release()
                if len(self._read_ids) >= ADD_CHUNK:
                    self._flush()
                    self._publish()
                time.sleep(0)  # let a query waiting for the lock take it first
            self._flush()
            self._finished()
            if self._persist is not None and not self._stop.is_set():
                self._persist(self)
                self.saved = True
            if not self._locked():
                return
            try:
                self._done(self)  # which calls run(): nothing left to read, it records the build as finished
            finally:
                self._lock.release()
        except Exception as exc:  # noqa: BLE001  (queries go on with the summaries; the next one starts another build)
            self.error = exc
            logger.warning("building the token-level first stage of %s failed: %s", self.label, exc)
        finally:
            atexit.unregister(self.stop)

    def _locked(self) -> bool:
        """Take the store's lock unless the build is stopped first (then False, the lock not held)."""
        while not self._stop.is_set():
            if self._lock.acquire(timeout=_LOCK_POLL_S):
                if not self._stop.is_set():
                    return True
                self._lock.release()
        return False

    # ------------------------------------------------------------------ steps
    def _read_next(self, count: int) -> None:
        """Read the next ``count`` listed documents' vectors (the caller holds the lock); added by :meth:`_flush`."""
        chunk = self.ids[self._next : self._next + count]
        found, vectors = self._read(chunk)
        self._read_ids.extend(found)
        self._read_vectors.extend(vectors)
        self._next += len(chunk)

    def _flush(self) -> None:
        """Add what was read to the index (outside the lock: the index is this build's own until handed over)."""
        ids, vectors = self._read_ids, self._read_vectors
        self._read_ids, self._read_vectors = [], []
        if not ids:
            return
        self.tokens.add(ids, vectors)
        done, total = self.progress
        if self.on_progress is not None:
            self.on_progress(done, total)
        if total >= 10 * ADD_CHUNK and (done * 10) // total != ((done - len(ids)) * 10) // total:
            logger.info("token-level first stage of %s: %d of %d documents (%.0f s)", self.label, done, total,
                        time.perf_counter() - self._started)

    def _publish(self) -> None:
        """Hand queries a view of what is added so far, once a further ``1 / PUBLISHED_PARTS`` of the store is in."""
        step = max(ADD_CHUNK, math.ceil(len(self.ids) / PUBLISHED_PARTS))
        if self._next < len(self.ids) and self.tokens.trained and len(self.tokens) - self._published >= step:
            self._published = len(self.tokens)
            partial = self.tokens.view(self._published / len(self.ids))
            with self._views:  # changed since they were read, or from now on (touch): the summaries find them
                partial.covered = partial.covered - self.touched
                self.partial = partial

    def _finished(self) -> None:
        if self._finished_at is not None:
            return
        self._finished_at = time.perf_counter()
        self.tokens.trained_on = len(self.ids)
        logger.info("built the token-level first stage of %s (%d documents) in %.1f s", self.label, len(self.ids),
                    time.perf_counter() - self._started)


def _yield_to_queries() -> None:
    """Lower the calling thread's priority to :data:`BUILD_NICENESS` (Linux only; never raise it: an unprivileged
    process cannot take it back). Threads it starts later (OpenMP's) inherit it."""
    if BUILD_NICENESS <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < BUILD_NICENESS:
            os.setpriority(os.PRIO_PROCESS, tid, BUILD_NICENESS)
    except OSError as exc:  # a sandbox that forbids it: the build runs at the process's priority
        logger.debug("could not lower the token-stage build's priority: %s", exc)
