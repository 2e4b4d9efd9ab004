"""Rendering in worker processes: PDFs represented in parallel, in order, a bad one failing alone.

Opening, selecting, rendering and composing pages is CPU work under
PyMuPDF's global lock, so one process renders one document at a time. A
:class:`RenderPool` runs ``workers`` processes (fresh interpreters running
this module, never forks of a process holding the encoder's threads, and
never re-running the caller's script, so ``from_pdfs`` works at the top
level of a script without a ``__main__`` guard), hands each a document at a time and gives
the results back in submission order, so whatever consumes them sees
exactly what the sequential loop would. Each worker runs
:func:`docpc_retrievers.documents.rendering.serve`. A document that takes longer than
``render_timeout`` or kills its worker (MuPDF can crash on malformed input)
fails with kind ``render_timeout`` or ``render_crashed``; the worker is
replaced and the run goes on. Each worker's address space is capped
(``memory_limit``) so a decompression bomb fails alone with ``too_large``.
:class:`InlineRenderer` does the same in the calling process (``workers=0``),
without the time limit or the isolation.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from docpc_retrievers.child_process import describe_exit, start_child
from docpc_retrievers.pixel_files import remove_files, remove_orphans
from docpc_retrievers.documents.rendering import (
    DEFAULT_WORKER_MEMORY,
    WORKER_READY,
    Rendered,
    RenderFailure,
    RenderJob,
    attach_pixels,
    render_document,
    spool_prefix,
)

__all__ = [
    "DEFAULT_RENDER_TIMEOUT",
    "DEFAULT_WORKER_MEMORY",
    "InlineRenderer",
    "RenderFailure",
    "RenderJob",
    "RenderPool",
    "Rendered",
    "default_workers",
    "make_renderer",
    "render_document",
]

logger = logging.getLogger(__name__)

DEFAULT_RENDER_TIMEOUT = 60.0
"""Seconds one document may take to render in a worker before it fails with ``render_timeout``."""
WORKER_START_LIMIT = 60.0
"""Seconds a fresh render worker may take to start (interpreter and imports) before its document fails: start-up
is not counted in a document's render time (on a loaded 2-core machine it took over 1.5 s)."""

if TYPE_CHECKING:
    from docpc_retrievers.timeline import Timeline

T = TypeVar("T")


#: The most render workers a run starts when none are asked for.
MAX_DEFAULT_WORKERS = 16


def default_workers(cores: int | None = None) -> int:
    """Render workers when none are asked for: one per core beyond the one that encodes, and beyond 8 cores one per
    core beyond two (the indexing process's encoding, commit and feeding threads), at most 16.

    Rendering, not the encoder, was the slower side of a GPU machine's run: on 16 cores and an H200, 1,200 varied
    PDFs rendered at 27.7 documents/s with 8 workers and 45.4 with 14, against 40.2 encoded
    (benchmarks/results/2026-11-28-gpu-h200-indexing-pipeline.md). Workers past what the encoder takes wait idle
    (the render window bounds how far they run ahead), so a CPU-only machine loses nothing by having them.
    """
    n = cores if cores is not None else (os.cpu_count() or 2)
    return max(1, min(MAX_DEFAULT_WORKERS, n - 1 if n <= 8 else n - 2))


class InlineRenderer:
    """Renders in the calling process, in order (``workers=0``): no time limit, no crash isolation."""

    def __init__(self, job: RenderJob) -> None:
        self._job = job

    def imap(self, items: Iterable[T], plan: Callable[[T], tuple[Path, str] | None]) -> Iterator[tuple[T, Rendered | None]]:
        """For each item, in order: ``plan(item)`` gives ``(path, doc id)`` to render, or None to pass it through."""
        for item in items:
            task = plan(item)
            yield item, (None if task is None else render_document(self._job, *task))

    def close(self) -> None:
        pass

    def __enter__(self) -> InlineRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Entry(Generic[T]):
    __slots__ = ("item", "task", "result")

    def __init__(self, item: T, task: tuple[Path, str] | None) -> None:
        self.item = item
        self.task = task
        self.result: Rendered | None = None

    @property
    def done(self) -> bool:
        return self.task is None or self.result is not None


class _Worker:
    """One render process: a fresh interpreter fed through a pipe each way (the job first, then tasks)."""

    def __init__(self, job: RenderJob, memory_limit: int | None) -> None:
        no_blas_threads = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
        # a grid is 4 MB of pixels when no shared memory carries it: a wide pipe back
        self.process, self.sender, self.conn = start_child("docpc_retrievers.documents.rendering", "serve",
                                                           env=no_blas_threads, wide_pipe=True)
        self.sender.send((job, memory_limit))
        self.entry: _Entry[Any] | None = None
        self.spawned = time.monotonic()
        self.ready = False
        self.started = 0.0

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def deadline(self, render_timeout: float) -> float:
        """When the document it holds runs out of time: ``render_timeout`` after it got the document, or, while the
        interpreter is still starting, :data:`WORKER_START_LIMIT` after the spawn (start-up is not the document's)."""
        if self.ready:
            return self.started + render_timeout
        return max(self.started + render_timeout, self.spawned + WORKER_START_LIMIT)

    def give(self, entry: _Entry[Any]) -> None:
        """Send ``entry``'s task; its render clock starts now, or once the worker is ready if it is still starting."""
        self.entry, self.started = entry, time.monotonic()
        try:
            self.sender.send(entry.task)
        except OSError:  # died while idle: the read end reports it
            pass

    def exit_description(self) -> str:
        return describe_exit(self.process)

    def stop(self, *, kill: bool = False) -> None:
        if not kill:
            try:
                self.sender.send(None)
            except OSError:
                pass
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self.sender.close()
        self.conn.close()


class RenderPool:
    """``workers`` render processes fed one document at a time, results handed back in submission order.

    A feeder thread owns the workers: it hands out planned documents, collects
    results and enforces the time limit while the caller is busy elsewhere
    (encoding a batch), so rendering runs ahead instead of waiting for the
    caller's next request. The caller only plans items and takes finished
    ones, in order.
    """

    def __init__(
        self,
        job: RenderJob,
        workers: int,
        *,
        render_timeout: float | None = DEFAULT_RENDER_TIMEOUT,
        memory_limit: int | None = DEFAULT_WORKER_MEMORY,
        ahead: int | None = None,
        timeline: Timeline | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a RenderPool needs at least one worker (use InlineRenderer for none)")
        if render_timeout is not None and render_timeout <= 0:
            raise ValueError("render_timeout must be > 0 seconds (or None for no limit)")
        self._job = job
        self.workers = workers
        self.render_timeout = render_timeout
        self.memory_limit = memory_limit
        self.ahead = ahead or 4 * workers
        self._pool: list[_Worker] = []  # the feeder thread's alone
        self._todo: deque[_Entry[Any]] = deque()  # shared: guarded by _cond
        self._cond = threading.Condition()
        self._feeder: threading.Thread | None = None
        self._closing = False
        self._error: BaseException | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.replaced = 0
        self._timeline = timeline
        remove_orphans()

    # ------------------------------------------------------- the feeder thread
    def _spawn(self) -> _Worker:
        return _Worker(self._job, self.memory_limit)

    def _feed(self) -> None:
        """The feeder's loop: give queued documents to idle workers, wait for one to finish, repeat."""
        try:
            while True:
                with self._cond:
                    if self._closing:
                        return
                    self._dispatch()
                self._wait()
        except BaseException as exc:  # handed to the caller by imap
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _dispatch(self) -> None:
        """Give queued documents to idle workers, starting workers up to ``workers`` (holding ``_cond``)."""
        while self._todo:
            idle = next((w for w in self._pool if w.entry is None), None)
            if idle is not None and not idle.is_alive():  # died between documents
                idle.stop(kill=True)
                self._pool.remove(idle)
                continue
            if idle is None:
                if len(self._pool) >= self.workers:
                    return
                idle = self._spawn()
                self._pool.append(idle)
            idle.give(self._todo.popleft())

    def _finish(self, worker: _Worker, result: Rendered) -> None:
        """Record the result of the worker's document and tell the caller."""
        with self._cond:
            if worker.entry is not None:
                worker.entry.result = result
            worker.entry = None
            self._cond.notify_all()

    def _replace(self, worker: _Worker, failure: RenderFailure) -> None:
        """Fail the worker's document, stop the worker, start another in its place (on the next dispatch)."""
        if worker.entry is not None:
            logger.warning("%s", failure.message)
        self._finish(worker, Rendered(None, failure, time.monotonic() - worker.started))
        worker.stop(kill=True)
        remove_files(spool_prefix(os.getpid(), worker.process.pid))
        self._pool.remove(worker)
        self.replaced += 1

    def _receive(self, worker: _Worker) -> bool:
        """Take a finished result from ``worker``; False when its pipe broke (the worker died)."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            return False
        if message == WORKER_READY:
            worker.ready = True
            worker.started = time.monotonic()  # a document given before start-up is timed from now
            return True
        light, pixels = message
        if self._timeline is not None:
            now = time.perf_counter()
            self._timeline.span(f"render:{worker.process.pid}", now - light.seconds - light.preview_seconds, now)
        try:
            result = attach_pixels(light, pixels)
        except OSError as exc:
            path = str(worker.entry.task[0]) if worker.entry is not None and worker.entry.task else "?"
            failure = RenderFailure(path, "render_crashed", f"{path}: its rendered pages could not be read back: {exc}")
            result = Rendered(None, failure, light.seconds)
        self._finish(worker, result)
        return True

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):  # already awake (pipe full) or closed
            pass

    def _wait(self) -> None:
        """Block until some busy worker finishes, dies or runs out of time, or the caller queues work."""
        busy = [w for w in self._pool if w.entry is not None]
        timeout = None
        if busy and self.render_timeout is not None:
            timeout = max(0.0, min(w.deadline(self.render_timeout) for w in busy) - time.monotonic())
        by_handle: dict[Any, _Worker] = {w.conn: w for w in busy}  # a dead worker's pipe reads as EOF
        ready = wait([*by_handle, self._wake_r], timeout)
        for handle in ready:
            if handle == self._wake_r:
                self._drain_wake()
                continue
            w = by_handle[handle]
            if w.entry is None or w not in self._pool:
                continue
            if self._receive(w):
                continue
            how = w.exit_description()
            path = str(w.entry.task[0]) if w.entry.task else "?"
            self._replace(w, RenderFailure(path, "render_crashed", f"{path}: the render worker crashed ({how})"))
        if self.render_timeout is not None:
            now = time.monotonic()
            for w in [w for w in self._pool if w.entry is not None and now >= w.deadline(self.render_timeout)]:
                path = str(w.entry.task[0]) if w.entry is not None and w.entry.task else "?"
                message = (f"{path}: rendering took longer than {self.render_timeout:g} s" if w.ready else
                           f"{path}: its render worker did not start within {WORKER_START_LIMIT:g} s")
                self._replace(w, RenderFailure(path, "render_timeout", message))

    # -------------------------------------------------------------------- public
    def _submit(self, entry: _Entry[Any]) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("this RenderPool is closed")
            self._todo.append(entry)
            if self._feeder is None:
                self._feeder = threading.Thread(target=self._feed, name="docpc-render-feeder", daemon=True)
                self._feeder.start()
        self._wake()

    def imap(self, items: Iterable[T], plan: Callable[[T], tuple[Path, str] | None]) -> Iterator[tuple[T, Rendered | None]]:
        """For each item, in order: ``plan(item)`` gives ``(path, doc id)`` to render, or None to pass it through.

        ``plan`` runs (in the caller's thread) up to ``ahead`` items before
        their results are consumed; the workers render them in the background
        while the caller does other work between items.
        """
        source = iter(items)
        window: deque[_Entry[T]] = deque()
        exhausted = False
        while True:
            while not exhausted and len(window) < self.ahead:
                try:
                    item = next(source)
                except StopIteration:
                    exhausted = True
                    break
                entry = _Entry(item, plan(item))
                window.append(entry)
                if entry.task is not None:
                    self._submit(entry)
            if not window:
                return
            head = window[0]
            with self._cond:
                while not head.done and self._error is None:
                    self._cond.wait()
                if self._error is not None and not head.done:
                    raise RuntimeError(f"the render pool failed: {self._error}") from self._error
            window.popleft()
            if self._timeline is not None:
                self._timeline.depth("rendered_waiting", sum(1 for e in window if e.done))
            yield head.item, head.result

    def close(self) -> None:
        """Stop the feeder and every worker (documents still queued are dropped)."""
        with self._cond:
            self._closing = True
            self._todo.clear()
            feeder, self._feeder = self._feeder, None
        self._wake()
        if feeder is not None:
            feeder.join()
        for w in self._pool:
            w.stop(kill=w.entry is not None)
        self._pool = []
        remove_files(spool_prefix(os.getpid()))  # those of results never taken
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def __enter__(self) -> RenderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_renderer(
    job: RenderJob,
    *,
    workers: int | None = None,
    render_timeout: float | None = DEFAULT_RENDER_TIMEOUT,
    memory_limit: int | None = DEFAULT_WORKER_MEMORY,
    ahead: int | None = None,
    timeline: Timeline | None = None,
) -> InlineRenderer | RenderPool:
    """A :class:`RenderPool` of ``workers`` processes (None: :func:`default_workers`), or inline for 0.

    ``ahead``: documents planned and rendered before their turn (at least 4 per worker); indexing asks
    for two batches, so a whole batch is ready when the encoder finishes the previous one. ``timeline``: records
    each worker's render spans and how many rendered documents wait to be taken.
    """
    n = default_workers() if workers is None else workers
    if n < 0:
        raise ValueError("workers must be >= 0 (0 renders in this process)")
    if n == 0:
        return InlineRenderer(job)
    return RenderPool(job, n, render_timeout=render_timeout, memory_limit=memory_limit,
                      ahead=max(4 * n, ahead or 0), timeline=timeline)
