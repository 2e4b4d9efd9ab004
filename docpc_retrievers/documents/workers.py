"""Rendering in worker processes: PDFs represented in parallel, in order, a bad one failing alone.

Opening, selecting, rendering and composing pages is CPU work under
PyMuPDF's global lock, so one process renders one document at a time. A
:class:`RenderPool` runs ``workers`` processes (fresh interpreters running
this module, never forks of a process holding the encoder's threads, and
never re-running the caller's script, so ``from_pdfs`` works at the top
level of a script without a ``__main__`` guard), hands each a document at a time and gives
the results back in submission order, so whatever consumes them sees
exactly what the sequential loop would. A document that takes longer than
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
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Generic, TypeVar

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.preview import encode_grid
from docpc_retrievers.documents.represent import RepresentedDocument, represent_pdf
from docpc_retrievers.errors import PDFLoadError

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
DEFAULT_WORKER_MEMORY = 4 * 1024**3
"""Address space a render worker may add to what it holds after start-up (bytes) before its document fails
with ``too_large``."""

T = TypeVar("T")


@dataclass(frozen=True)
class RenderFailure:
    """Why a document could not be represented: a stable ``kind`` and a message naming the file."""

    path: str
    kind: str
    message: str


@dataclass(frozen=True)
class Rendered:
    """A document represented (``doc``) or not (``failure``), the seconds its rendering took, and its
    grid preview (WebP bytes, when the job asks for previews) with the seconds that took."""

    doc: RepresentedDocument | None
    failure: RenderFailure | None
    seconds: float
    preview: bytes | None = None
    preview_seconds: float = 0.0


def default_workers() -> int:
    """Render workers when none are asked for: one per core beyond the one that encodes, at most 8."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


@dataclass(frozen=True)
class RenderJob:
    """What every document of a run is rendered with (sent once to each worker).

    ``previews``: also encode each grid as the store's preview bytes, so that
    CPU work runs in the workers rather than beside the encoder.
    """

    settings: IndexSettings
    password: str | None
    max_file_bytes: int | None
    previews: bool = False


def render_document(job: RenderJob, path: Path, doc_id: str, memory_limit: int | None = None) -> Rendered:
    """Represent one PDF; every failure becomes a :class:`RenderFailure` (nothing is raised)."""
    t0 = time.perf_counter()
    doc: RepresentedDocument | None = None
    failure: RenderFailure | None = None
    try:
        doc = represent_pdf(path, job.settings, password=job.password, max_file_bytes=job.max_file_bytes, doc_id=doc_id)
    except PDFLoadError as exc:
        failure = RenderFailure(exc.path, exc.kind, str(exc))
    except MemoryError:
        limit = f"the worker memory limit of {memory_limit // 2**20} MiB" if memory_limit else "the memory available"
        failure = RenderFailure(str(path), "too_large", f"{path}: rendering needed more than {limit}")
    except (OSError, ValueError, RuntimeError) as exc:  # a broken file must not stop the batch
        failure = RenderFailure(str(path), "error", f"{path}: {exc}")
    seconds = time.perf_counter() - t0
    if not job.previews or doc is None or doc.grid is None:
        return Rendered(doc, failure, seconds)
    t0 = time.perf_counter()
    preview = encode_grid(doc.grid.image)
    return Rendered(doc, failure, seconds, preview, time.perf_counter() - t0)


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


def _address_space() -> int:
    """This process's current virtual size in bytes (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _limit_memory(limit: int | None) -> None:
    """Cap the address space at what the worker holds now plus ``limit`` bytes (imports map a
    machine-dependent amount of virtual memory, so the cap is on what rendering adds)."""
    if not limit:
        return
    try:
        import resource

        cap = _address_space() + limit
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError) as exc:  # not on this platform: rely on the time limit
        logger.debug("render worker memory limit not set: %s", exc)


def _worker_main(conn_in: Connection, conn_out: Connection) -> None:
    """A worker's loop: receive the job, then ``(path, doc id)`` tasks, send back :class:`Rendered`; ``None`` ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        job, memory_limit = conn_in.recv()
    except (EOFError, OSError):
        return
    _limit_memory(memory_limit)
    while True:
        try:
            task = conn_in.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        path, doc_id = task
        result = render_document(job, path, doc_id, memory_limit)
        try:
            conn_out.send(result)
        except MemoryError:
            failure = RenderFailure(str(path), "too_large", f"{path}: its pages are too large to hand back")
            conn_out.send(Rendered(None, failure, 0.0))


def serve(read_fd: int, write_fd: int) -> None:
    """Entry point of a worker process (``python -c``): talk to the pool over two inherited pipe ends."""
    _worker_main(Connection(read_fd, writable=False), Connection(write_fd, readable=False))


def _widen_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe buffer (a grid is 4 MB of pixels; the default 64 KiB costs a switch per chunk)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


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
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # rendering needs no BLAS threads
            env[name] = "1"
        code = f"from docpc_retrievers.documents.workers import serve; serve({to_child_r}, {from_child_w})"
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code], pass_fds=(to_child_r, from_child_w), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        _widen_pipe(from_child_r)
        self.sender = Connection(to_child_w, readable=False)
        self.conn = Connection(from_child_r, writable=False)
        self.sender.send((job, memory_limit))
        self.entry: _Entry[Any] | None = None
        self.started = 0.0

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def give(self, entry: _Entry[Any]) -> None:
        self.entry, self.started = entry, time.monotonic()
        try:
            self.sender.send(entry.task)
        except OSError:  # died while idle: the read end reports it
            pass

    def exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "no exit yet"
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"

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
        self._pool.remove(worker)
        self.replaced += 1

    def _receive(self, worker: _Worker) -> bool:
        """Take a finished result from ``worker``; False when its pipe broke (the worker died)."""
        try:
            result = worker.conn.recv()
        except (EOFError, OSError):
            return False
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
            timeout = max(0.0, min(w.started for w in busy) + self.render_timeout - time.monotonic())
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
            for w in [w for w in self._pool if w.entry is not None and now - w.started >= self.render_timeout]:
                path = str(w.entry.task[0]) if w.entry is not None and w.entry.task else "?"
                self._replace(
                    w,
                    RenderFailure(path, "render_timeout", f"{path}: rendering took longer than {self.render_timeout:g} s"),
                )

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
) -> InlineRenderer | RenderPool:
    """A :class:`RenderPool` of ``workers`` processes (None: :func:`default_workers`), or inline for 0.

    ``ahead``: documents planned and rendered before their turn (at least 4 per worker); indexing asks
    for two batches, so a whole batch is ready when the encoder finishes the previous one.
    """
    n = default_workers() if workers is None else workers
    if n < 0:
        raise ValueError("workers must be >= 0 (0 renders in this process)")
    if n == 0:
        return InlineRenderer(job)
    return RenderPool(job, n, render_timeout=render_timeout, memory_limit=memory_limit,
                      ahead=max(4 * n, ahead or 0))
