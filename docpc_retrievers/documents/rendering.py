"""One document rendered for indexing, in whichever process does it, and a render worker's own loop.

:func:`render_document` represents a PDF (open, select, render, compose) and,
when the job asks, makes the grid's preview; every failure becomes a
:class:`RenderFailure` with a stable kind, never an exception. :func:`serve`
is what a render worker process runs (see :mod:`docpc_retrievers.documents.workers`
for the pool that starts them): it caps its own address space, then renders
the documents it is sent, one at a time. A result's pixels go back through a
file in shared memory (``/dev/shm``), not pickled through the pipe: a
117-page document is 454 MB of pixels, whose pickle took 1.3 s to write and
1.6 s to read, the reading in the process that encodes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.preview import encode_grid
from docpc_retrievers.documents.represent import RepresentedDocument, represent_pdf
from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.pixel_files import SHARED_MEMORY as SPOOL_DIR
from docpc_retrievers.pixel_files import PixelEntry, read_images, spool_dir, write_images

__all__ = [
    "DEFAULT_WORKER_MEMORY",
    "Pixels",
    "RenderFailure",
    "RenderJob",
    "Rendered",
    "SPOOL_DIR",
    "attach_pixels",
    "detach_pixels",
    "render_document",
    "serve",
    "spool_prefix",
]

logger = logging.getLogger(__name__)

DEFAULT_WORKER_MEMORY = 4 * 1024**3
"""Address space a render worker may add to what it holds after start-up (bytes) before its document fails
with ``too_large``."""


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
        failure = RenderFailure(str(path), "too_large", f"{path}: rendering needed more than {_memory(memory_limit)}")
    except (OSError, ValueError, RuntimeError) as exc:  # a broken file must not stop the batch
        failure = RenderFailure(str(path), "error", f"{path}: {exc}")
    seconds = time.perf_counter() - t0
    if not job.previews or doc is None or doc.grid is None:
        return Rendered(doc, failure, seconds)
    t0 = time.perf_counter()
    preview = encode_grid(doc.grid.image)
    return Rendered(doc, failure, seconds, preview, time.perf_counter() - t0)


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
    import pymupdf  # noqa: F401 - imported before the cap: its import maps memory and starts threads of its own

    try:
        import resource

        cap = _address_space() + limit
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError) as exc:  # not on this platform: rely on the time limit
        logger.debug("render worker memory limit not set: %s", exc)


@dataclass(frozen=True)
class Pixels:
    """Where a result's images wait: a file of raw pixels and, per image, ``(mode, (width, height), offset, bytes)``."""

    path: str
    images: tuple[PixelEntry, ...]


def spool_prefix(pool_pid: int, worker_pid: int | None = None) -> str:
    """File-name prefix of the pixel files of one pool's workers (or of one of them)."""
    return f"docpc-pixels-{pool_pid}-" + ("" if worker_pid is None else f"{worker_pid}-")


def _memory(memory_limit: int | None) -> str:
    return f"the worker memory limit of {memory_limit // 2**20} MiB" if memory_limit else "the memory available"


def detach_pixels(result: Rendered, spool: str | None, name: str) -> tuple[Rendered, Pixels | None]:
    """Write the result's images to ``spool/name`` and return the result without them, plus where they are.

    Returns the result unchanged and None when there is nothing to detach or
    the file cannot be written (no or full spool): the pixels then travel with it.
    A MemoryError is raised with no half-written file left behind (the caller reports the document too large).
    """
    doc = result.doc
    if doc is None or spool is None or not doc.images:
        return result, None
    path = os.path.join(spool, name)
    try:
        entries = write_images(doc.images, path)
    except OSError:
        return result, None
    if doc.grid is not None:
        light = dataclasses.replace(doc, grid=dataclasses.replace(doc.grid, image=None))  # type: ignore[arg-type]
    else:
        light = dataclasses.replace(doc, pages=[])
    return dataclasses.replace(result, doc=light), Pixels(path, entries)


def attach_pixels(result: Rendered, pixels: Pixels | None) -> Rendered:
    """Put a detached result's images back (reading and removing their file); raises OSError if it is gone."""
    if pixels is None or result.doc is None:
        return result
    images = read_images(pixels.path, pixels.images)
    doc = result.doc
    if doc.grid is not None:
        doc = dataclasses.replace(doc, grid=dataclasses.replace(doc.grid, image=images[0]))
    else:
        doc = dataclasses.replace(doc, pages=images)
    return dataclasses.replace(result, doc=doc)


WORKER_READY = "ready"
"""A worker's first message: its interpreter and imports are up, so its documents' render time can start."""


def _worker_main(conn_in: Connection, conn_out: Connection) -> None:
    """A worker's loop: receive the job, then ``(path, doc id)`` tasks, send back ``(Rendered, Pixels | None)``;
    ``None`` ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        job, memory_limit = conn_in.recv()
    except (EOFError, OSError):
        return
    _limit_memory(memory_limit)
    conn_out.send(WORKER_READY)  # the pool's render clock starts here, not at the interpreter's start
    spool = spool_dir()  # without shared memory the pixels go through the pipe
    prefix, sent = spool_prefix(os.getppid(), os.getpid()), 0
    while True:
        try:
            task = conn_in.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        path, doc_id = task
        result = render_document(job, path, doc_id, memory_limit)
        sent += 1
        try:  # copying the pixels out can pass the memory limit that rendering kept within
            conn_out.send(detach_pixels(result, spool, f"{prefix}{sent}.raw"))
            continue
        except MemoryError:
            pass  # reported below, once the error's frames (holding the pixels) are gone with this block
        del result
        message = f"{path}: handing its pages back needed more than {_memory(memory_limit)}"
        conn_out.send((Rendered(None, RenderFailure(str(path), "too_large", message), 0.0), None))


def serve(read_fd: int, write_fd: int) -> None:
    """Entry point of a worker process (``python -c``): talk to the pool over two inherited pipe ends."""
    _worker_main(Connection(read_fd, writable=False), Connection(write_fd, readable=False))
