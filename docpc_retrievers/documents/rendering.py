"""One document rendered for indexing, in whichever process does it, and a render worker's own loop.

:func:`render_document` represents a PDF (open, select, render, compose) and,
when the job asks, makes the grid's preview; every failure becomes a
:class:`RenderFailure` with a stable kind, never an exception. :func:`serve`
is what a render worker process runs (see :mod:`docpc_retrievers.documents.workers`
for the pool that starts them): it caps its own address space, then renders
the documents it is sent, one at a time.
"""

from __future__ import annotations

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

__all__ = ["DEFAULT_WORKER_MEMORY", "RenderFailure", "RenderJob", "Rendered", "render_document", "serve"]

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
