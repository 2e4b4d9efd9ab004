"""Commits run in order on one background thread, a few queued, so the encoding thread that hands them over goes on.

A commit holds Python's lock inside Chroma's embedded writes; the thread that hands commits over (encoding, on a
GPU machine) must not also wait for each to finish. A failed commit makes the ones queued behind it skip, so an
interrupted or failed indexing run has committed a prefix of its batches and a re-run completes it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from docpc_retrievers.timeline import Timeline

__all__ = ["CommitQueue"]


class CommitQueue:
    """Runs commits one at a time on a background thread, in submission order.

    Up to ``backlog`` commits wait their turn before :meth:`submit` blocks, so the
    encoding thread that hands them over does not wait for each one to finish
    (a commit holds Python's lock inside Chroma's writes). A commit that fails
    makes the ones queued behind it skip, so an interrupted or failed run has
    committed a prefix of its batches; its error is raised by the next
    :meth:`submit` or :meth:`wait`.
    """

    def __init__(self, timeline: Timeline | None = None, backlog: int = 3) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._queued: deque[Future[None]] = deque()
        self._backlog = max(1, backlog)
        self._failed = threading.Event()
        self._timeline = timeline

    def submit(self, commit: Callable[[], None]) -> None:
        while self._queued and (self._queued[0].done() or len(self._queued) >= self._backlog):
            self._queued.popleft().result()  # its error, if it failed
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docpc-commit")
        if self._timeline is not None:
            self._timeline.depth("commit_backlog", len(self._queued))
        self._queued.append(self._executor.submit(self._run, commit))

    def _run(self, commit: Callable[[], None]) -> None:
        if self._failed.is_set():  # an earlier commit failed: keep what is committed a prefix
            return
        try:
            if self._timeline is not None:
                with self._timeline.busy("commit"):
                    commit()
            else:
                commit()
        except BaseException:
            self._failed.set()
            raise

    def wait(self) -> None:
        """Wait for every queued commit; re-raise the first error."""
        while self._queued:
            self._queued.popleft().result()

    def close(self) -> None:
        """Let queued commits finish (what was encoded is kept), then stop the thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
