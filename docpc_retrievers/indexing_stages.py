"""The stages an indexing run overlaps once a document is rendered: encoding, pooling, packing and committing.

The indexing loop (indexing.py) decides each file's outcome and adds rendered documents here; an
:class:`IndexingStages` hands their images to the encoder (a thread, or a process of its own) ``batch_size`` at a
time, pools each image as it comes back, packs each commit while the one before it writes, and commits the
documents whose images are all encoded, in file order, on one thread.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from docpc_retrievers.commit_queue import CommitQueue
from docpc_retrievers.documents.represent import RepresentedDocument
from docpc_retrievers.encoders.pooling import pool_vectors
from docpc_retrievers.encoders.process import EncoderProcess
from docpc_retrievers.encoders.protocol import EncodedImage
from docpc_retrievers.encoders.stream import EncodeStream
from docpc_retrievers.progress import PROGRESS
from docpc_retrievers.results import IndexReport
from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.timeline import Timeline

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.workers import Rendered
    from docpc_retrievers.encoders.loader import EncoderRecipe
    from docpc_retrievers.encoders.protocol import Encoder

__all__ = ["IndexingStages", "PendingDocument", "PreparedCommit", "StagesOwner"]


@dataclass
class PendingDocument:
    """A document represented and waiting to be encoded in a batch."""

    doc: RepresentedDocument
    source: str
    """The path as given to the run: older records with this ``source`` are replaced when this one is committed."""
    grid_bytes: bytes | Future[bytes] | None = None
    """The preview: made by the render worker, or being made in a background thread (rendering in-process)."""
    submitted: int = 0
    """Its images handed to the encoder so far."""
    encoded: list[tuple[np.ndarray, TokenGrid | None]] = field(default_factory=list)
    """Its images encoded so far (page mode: a document's pages may span two encoder calls)."""
    pooled: list[Future[tuple[np.ndarray, np.ndarray | None]]] = field(default_factory=list)
    """Each encoded image's pooling, started as soon as it was encoded (the commit collects them)."""
    user: dict[str, Any] = field(default_factory=dict)
    """The user's metadata for this file (checked)."""

    @property
    def complete(self) -> bool:
        return len(self.encoded) == len(self.doc.images)


@dataclass
class PreparedCommit:
    """A commit ready to write: the store's prepared add, the older documents it replaces, the ids at its paths."""

    ready: Any
    replaced: list[str]
    older: Mapping[str, list[str]]


class StagesOwner(Protocol):
    """What the stages need from the indexer that runs them (indexing.py's ``Indexer``)."""

    settings: IndexSettings
    encoder: Callable[[], Encoder]
    encode_in_background: bool
    check_encoder: Callable[[Encoder], None] | None

    def plan(self, path: Path) -> tuple[Path, str] | None: ...

    def process_recipe(self, encode_in: str | None = None, files: int | None = None) -> EncoderRecipe | None: ...

    def prepare_commit(self, batch: list[PendingDocument], encoded: list[tuple[np.ndarray, TokenGrid | None]],
                       model_id: str, report: IndexReport) -> PreparedCommit: ...

    def write_commit(self, batch: list[PendingDocument], prepared: PreparedCommit, encoder: Encoder,
                     report: IndexReport, bar: Any) -> None: ...


class IndexingStages:
    """One ``add_pdfs`` call's moving parts: the documents waiting for the encoder, the encoder (a thread or a
    process of its own, started when the first document is planned, so the model loads while workers render), the
    poolers, the packers and the committer.

    The loop (this thread) adds rendered documents and hands their images over ``batch_size`` at a time; the
    thread that hears the encoder's results attaches them, starts each image's pooling and hands the documents
    whose images are all encoded to be packed and committed, in file order.
    """

    def __init__(self, indexer: StagesOwner, report: IndexReport, batch_size: int, bar: Any,
                 timeline: Timeline | None, encode_in: str = "auto", files: int | None = None) -> None:
        self.indexer = indexer
        self.encode_in = encode_in
        self.files = files
        self.report = report
        self.batch_size = batch_size
        self.bar = bar
        self.timeline = timeline
        self.pending: list[PendingDocument] = []
        self._lock = threading.Lock()  # pending: appended here, completed documents removed by the stream's thread
        self.stream: EncodeStream | EncoderProcess | None = None
        self.committer = CommitQueue(timeline)
        # Pooling is CPU work (Ward clustering, ~14 ms for 760 vectors) mostly outside the GIL: each image is pooled
        # on these threads as soon as it is encoded, so a long document's pages are not all pooled at its commit.
        self.pooler = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="docpc-pool")
        # A commit's records are built and its payload packed (compression, base85: outside the GIL) while the
        # commit before it writes, so the one thread that writes (Chroma holds the GIL as it writes) only writes.
        self.packer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="docpc-pack")

    def plan(self, path: Path) -> tuple[Path, str] | None:
        """The indexer's plan; the first document that needs rendering starts the stream (and the model's load)."""
        task = self.indexer.plan(path)
        if task is not None and self.stream is None and self.indexer.encode_in_background:
            self._start()
        return task

    def _start(self) -> EncodeStream | EncoderProcess:
        if self.stream is None:
            on_span = None
            if self.timeline is not None:
                timeline = self.timeline
                on_span = lambda stage, a, b: timeline.span(f"encode.{stage}", a, b)  # noqa: E731
            recipe = self.indexer.process_recipe(self.encode_in, self.files)
            if recipe is not None:
                PROGRESS.info("loading the model %s in an encoding process", recipe.name or recipe.model)
                self.stream = EncoderProcess(recipe, check=self.indexer.check_encoder, on_span=on_span)
            else:
                self.stream = EncodeStream(self.indexer.encoder, background=self.indexer.encode_in_background,
                                           on_span=on_span)
        return self.stream

    def check_encoder(self) -> None:
        """Start encoding now and wait for the encoder, which raises when it does not match the store."""
        _ = self._start().encoder

    def waited(self, results: Iterator[tuple[Path, Rendered | None]]) -> Iterator[tuple[Path, Rendered | None]]:
        """The render results, the loop's waits for them recorded in the timeline."""
        if self.timeline is None:
            yield from results
            return
        while True:
            started = time.perf_counter()
            try:
                item = next(results)
            except StopIteration:
                return
            self.timeline.span("loop.wait_render", started, time.perf_counter())
            yield item

    def encode_ready(self, *, final: bool) -> None:
        """Hand waiting images to the stream ``batch_size`` at a time (all that are left when ``final``, then wait
        for them). Grid mode: a chunk is ``batch_size`` documents, committed together. Page mode: the encoder
        still gets full chunks of pages, not a document's worth, and a commit holds the documents a chunk finished.
        """
        while True:
            with self._lock:
                waiting = [(p, i) for p in self.pending for i in range(p.submitted, len(p.doc.images))]
            if not waiting or (len(waiting) < self.batch_size and not final):
                break
            take = waiting[: self.batch_size]
            for p, _ in take:
                p.submitted += 1
            stream = self._start()
            if self.timeline is not None:
                self.timeline.depth("encode_queue", stream.waiting)
            stream.submit([p.doc.images[i] for p, i in take], lambda encoded, t=take: self._encoded(t, encoded))
        if final:
            if self.stream is not None:
                self.stream.drain()
            self._commit_complete()

    def _encoded(self, take: list[tuple[PendingDocument, int]], encoded: list[EncodedImage]) -> None:
        """A chunk's results (on the stream's thread): attach, pool, commit the documents now complete."""
        self.report.images_encoded += len(take)
        factor = self.indexer.settings.pool_factor
        for (p, _), item in zip(take, encoded):
            p.encoded.append((item.embeddings, TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid)))
            p.pooled.append(self.pooler.submit(pool_vectors, item.embeddings, factor))
        self._commit_complete()

    def _commit_complete(self) -> None:
        with self._lock:
            done = 0
            while done < len(self.pending) and self.pending[done].complete:
                done += 1
            batch, self.pending[:done] = self.pending[:done], []
        if batch:
            assert self.stream is not None
            encoder = self.stream.encoder
            indexer, report, bar, timeline = self.indexer, self.report, self.bar, self.timeline
            encoded = [x for p in batch for x in p.encoded]

            def prepare() -> PreparedCommit:
                if timeline is None:
                    return indexer.prepare_commit(batch, encoded, encoder.model_id, report)
                with timeline.busy("commit.prepare"):
                    return indexer.prepare_commit(batch, encoded, encoder.model_id, report)

            prepared = self.packer.submit(prepare)
            self.committer.submit(lambda: indexer.write_commit(batch, prepared.result(), encoder, report, bar))

    def close(self) -> None:
        """Stop the stream (a batch in flight finishes), let a commit in flight finish, stop the poolers."""
        try:
            if self.stream is not None:
                self.stream.close()
                spent = self.stream.busy_s
                if spent:
                    self.report.add_time("encode_s", spent)
        finally:
            self.committer.close()
            self.packer.shutdown(wait=True)
            self.pooler.shutdown(wait=True)
