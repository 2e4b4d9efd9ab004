"""The indexing pipeline: discover -> represent -> encode -> commit.

Each file is identified by the hash of its bytes: unchanged files are
skipped, a changed file replaces its old version, a file whose old path is
gone is moved (its source updated, nothing encoded), copies left in place are
skipped as duplicates, and a prune deletes documents whose source under the
given roots is gone. A file that cannot be used is reported with its path and
reason and the others go on. Images are encoded ``batch_size`` at a time
(``batch_size`` documents in grid mode); the documents whose images are all
encoded are committed together, in file order (vectors pooled and compacted,
grid previews as WebP, all written with the document's record), so an
interrupted run keeps what it committed and a re-run completes it without
duplicates. The stages after rendering (encoding, pooling, packing, committing)
are indexing_stages.py's.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from docpc_retrievers.config import DEFAULT_MAX_FILE_BYTES, ENCODE_IN, IndexSettings
from docpc_retrievers.documents.discovery import check_roots, document_id, require_pdfs, under_roots
from docpc_retrievers.documents.represent import checked_source
from docpc_retrievers.documents.user_metadata import UserMetadata, edited_metadata, resolve_user_metadata, user_part
from docpc_retrievers.documents.workers import (
    DEFAULT_RENDER_TIMEOUT,
    DEFAULT_WORKER_MEMORY,
    Rendered,
    RenderFailure,
    RenderJob,
    default_workers,
    make_renderer,
    render_document,
)
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.encoders.loader import EncoderRecipe
from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.results import IndexFailure, IndexReport
from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.grid_previews import GridImageStore
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.blas_threads import indexing_threads
from docpc_retrievers.progress import bars_drawn, progress_bar, shrink
from docpc_retrievers.indexing_stages import IndexingStages, PendingDocument, PreparedCommit
from docpc_retrievers.timeline import Timeline

__all__ = ["AUTO_PROCESS_FILES", "Indexer", "encode_with_tokens"]

AUTO_PROCESS_FILES = 256
"""Files a run needs before ``encode_in="auto"`` encodes in a process of its own on a GPU. The process loads the
model for the run alone, so a program that searches afterwards, or indexes again, loads it once more (about 10 s);
the most a run gains is the gap the lever closes, about 30 ms a document on an H200 (17.7 documents/s end to end
against 40.2 encoding alone), so a run needs a few hundred documents to come out ahead."""

logger = logging.getLogger(__name__)


@dataclass
class Indexer:
    """Adds PDFs to a store: one instance per open index, used by :meth:`DocPCIndex.add_pdfs`.

    ``encoder`` is a callable so the model loads only when the first batch
    is encoded (a re-run that skips everything never loads it).
    """

    store: MultiVectorStore
    grids: GridImageStore
    settings: IndexSettings
    encoder: Callable[[], Encoder]
    encode_in_background: bool = True
    """Encode on a thread of its own (encoders/stream.py), the model loading while the first documents render;
    False encodes in the indexing loop, loading the model at the first batch (the way it was: benchmarks compare)."""
    encoder_recipe: Callable[[], EncoderRecipe | None] | None = None
    """How to build the encoder in another process (None where it cannot be: an encoder given as an object)."""
    check_encoder: Callable[[Encoder], None] | None = None
    """Refuses an encoder built elsewhere whose settings differ from the store's."""
    encode_in: str = "auto"
    """Where images are encoded: ``process`` (a process of its own: encoders/process.py), ``thread`` (a thread of
    this process) or ``auto`` (its own process when the model is not loaded here yet and runs on a CUDA GPU,
    where launching kernels competes with this process's commits for Python's lock, and the run has at least
    :data:`AUTO_PROCESS_FILES` files)."""

    def add_pdfs(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        password: str | None = None,
        batch_size: int = 8,
        progress: bool = False,
        max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        on_file: Callable[[Path, str], None] | None = None,
        workers: int | None = None,
        render_timeout: float | None = DEFAULT_RENDER_TIMEOUT,
        worker_memory: int | None = DEFAULT_WORKER_MEMORY,
        prune: bool = False,
        metadata: UserMetadata = None,
        metadata_by_path: Mapping[str, Mapping[str, Any]] | None = None,
        sidecars: bool = True,
        timeline: Timeline | None = None,
        encode_in: str | None = None,
        check_model_first: bool = False,
    ) -> IndexReport:
        """Index PDF files and folders (recursively); ``on_file(path, outcome)`` sees each file's outcome.

        A stored file found at a new path (same bytes, old path gone) is *moved*: its source is
        updated, nothing is encoded. ``prune=True`` makes the store mirror ``paths``: documents whose
        source lies under them and no longer exists are deleted (nothing outside them; a path that
        does not exist or holds no PDF raises :class:`SourceRootError` before anything changes).
        ``metadata``: the user's keys for every file (a dict) or per file (``path -> dict``), merged
        over each PDF's ``<name>.pdf.json`` sidecar (when ``sidecars``) and ``metadata_by_path``;
        checked before anything is rendered; an unchanged file whose user metadata changed is
        updated without re-encoding, and a replaced file keeps its older version's keys.

        A path that does not exist fails on its own like a broken file, unless no given path exists: then
        FileNotFoundError (a mistyped path, which the command line refuses too) and nothing is done.
        Outcomes are ``indexed``, ``skipped``, ``moved`` or ``failed``; the report also
        carries the time spent per stage (``timings``: render, preview, encode,
        pool, commit, total; render and preview are summed over workers). ``workers`` render
        processes (None: one per spare core, 0: render in this process) feed
        the encoder; a document slower than ``render_timeout`` seconds, or
        one that crashes its worker or needs more than ``worker_memory``
        bytes, fails alone. Images are encoded on a thread of their own while the
        next documents render, and each batch is committed in the background
        while the next one is encoded, in order, so a re-run resumes cleanly.
        ``timeline``: a :class:`~docpc_retrievers.timeline.Timeline` that records
        every stage's spans and the queues' depths (for finding where time goes).
        ``encode_in``: ``auto``, ``process`` or ``thread`` (see :attr:`Indexer.encode_in`; None: the indexer's).
        ``check_model_first``: load the encoder and check it against the store before any file is looked at (a
        given model on a store that records one; :class:`DocPCIndex` asks for it when the run encodes in a
        process, which then loads the model once, for the check and the encoding).
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        encode_in = self.encode_in if encode_in is None else encode_in
        if encode_in not in ENCODE_IN:
            raise ValueError(f"encode_in must be one of {', '.join(ENCODE_IN)}, got {encode_in!r}")
        started = time.perf_counter()
        paths = list(paths)
        roots = check_roots(paths) if prune else [Path(p).expanduser().resolve() for p in paths if Path(p).is_dir()]
        if paths and not any(Path(p).expanduser().exists() for p in paths):  # a mistyped path: nothing to do at all
            raise FileNotFoundError(f"no such file or folder: {', '.join(map(str, paths))} (nothing was indexed)")
        files = require_pdfs(paths)
        user = resolve_user_metadata(
            [f for f in files if f.exists()], metadata, by_path=metadata_by_path, sidecars=sidecars
        )
        report = IndexReport()
        seen_ids: dict[str, str] = {}  # document id -> the first path of this run that held it
        rendered_bar = progress_bar(len(files), progress, "rendered", position=0)
        committed_bar = progress_bar(len(files), progress, "committed", position=1)
        n_workers = default_workers() if workers is None else workers
        # Two or more render workers also make the previews (40-60 ms of CPU per grid), so the encoder's process
        # stays free. A single worker would render and encode every preview in turn while the encoder waits (464
        # manuals on 2 cores: 53 s against 39 s in-process); then the previews are made on this process's threads.
        previews = self.grids.store_grids and self.settings.mode == "grid" and n_workers >= 2
        job = RenderJob(self.settings, password, max_file_bytes, previews=previews)
        renderer = make_renderer(
            job, workers=n_workers, render_timeout=render_timeout, memory_limit=worker_memory, ahead=2 * batch_size,
            timeline=timeline,
        )
        run = IndexingStages(self, report, batch_size, committed_bar, timeline, encode_in, len(files))
        with indexing_threads(), bars_drawn(progress):  # BLAS (and torch, on 2 cores) on one thread: blas_threads.py
            try:
                if check_model_first:
                    run.check_encoder()
                for path, rendered in run.waited(renderer.imap(files, run.plan)):
                    outcome = self._take_one(job, path, rendered, seen_ids, report, run.pending, user.get(path))
                    if outcome != "indexed":  # nothing to commit; unchanged or moved: nothing rendered either
                        shrink(committed_bar)
                    run.encode_ready(final=False)
                    if on_file is not None:
                        on_file(path, outcome)
                    if outcome in ("indexed", "failed"):
                        rendered_bar.update(1)
                    else:
                        shrink(rendered_bar)
                run.encode_ready(final=True)
                run.committer.wait()
                self._sources_gone(roots, report, delete=prune)
            finally:
                renderer.close()
                run.close()
                rendered_bar.close()
                committed_bar.close()
                report.timings["total_s"] = time.perf_counter() - started
                if timeline is not None:
                    timeline.end()
        logger.info("%s (%d files)", report.summary(), len(files))
        return report

    def process_recipe(self, encode_in: str | None = None, files: int | None = None) -> EncoderRecipe | None:
        """What a run encoding in a process of its own loads there, or None when it encodes in this process
        (``encode_in`` as :meth:`add_pdfs` takes it; see :attr:`encode_in`; ``files``: how many the run has)."""
        mode = self.encode_in if encode_in is None else encode_in
        if mode == "thread" or not self.encode_in_background or self.encoder_recipe is None:
            return None
        recipe = self.encoder_recipe()
        if recipe is None or mode == "process":
            return recipe
        if files is not None and files < AUTO_PROCESS_FILES:
            return None
        try:
            on_gpu = recipe.device().startswith("cuda")
        except ValueError:  # an unusable device: loading it here says why
            return None
        return recipe if on_gpu else None

    def _sources_gone(self, roots: Sequence[Path], report: IndexReport, *, delete: bool) -> None:
        """The documents whose source lies under ``roots`` and no longer exists (not touched by this run): deleted,
        or (``delete`` False) listed in ``report.missing`` for the hint."""
        if not roots:
            return
        touched = set(report.indexed) | set(report.skipped) | set(report.moved) | set(report.metadata_updated)
        gone = [
            doc.id
            for doc in self.store.iter_documents()
            if doc.id not in touched
            and under_roots(str(doc.metadata.get("source") or ""), roots)
            and not Path(str(doc.metadata.get("source"))).exists()
        ]
        if not delete:
            report.missing.extend(gone)
        elif gone:
            self.delete(gone)
            report.removed.extend(gone)
            logger.info("pruned %d documents whose source is gone", len(gone))

    def plan(self, path: Path) -> tuple[Path, str] | None:
        """Whether a file needs rendering: ``(path, doc id)``, or None (already stored, or unreadable).

        Runs ahead of :meth:`_take_one`; a copy of a file earlier in the same
        run is rendered too and skipped when its turn comes, as sequentially.
        """
        try:
            doc_id = document_id(path)
        except OSError:
            return None
        if self.store.known(doc_id):
            return None
        return path, doc_id

    def _take_one(
        self,
        job: RenderJob,
        path: Path,
        rendered: Rendered | None,
        seen_ids: dict[str, str],
        report: IndexReport,
        pending: list[PendingDocument],
        user: dict[str, Any] | None,
    ) -> str:
        """Decide one file's outcome, in file order, from its rendering (None when none was needed);
        ``user``: the file's user metadata, when the run gives it some."""
        try:
            doc_id = rendered.doc.doc_id if rendered is not None and rendered.doc is not None else document_id(path)
        except FileNotFoundError:
            report.failed.append(IndexFailure(str(path), f"{path}: file not found", "not_found"))
            return "failed"
        except OSError as exc:
            report.failed.append(IndexFailure(str(path), f"{path}: cannot read file: {exc}", "not_found"))
            return "failed"
        if doc_id in seen_ids or self.store.known(doc_id):
            # The bytes are indexed already. If this path used to hold other
            # content, that older record is stale now: drop it.
            at_path = self.store.ids(where={"source": str(path)})
            stale = [i for i in at_path if i != doc_id]
            if stale:
                self.delete(stale)
                report.replaced.extend(stale)
            if doc_id in seen_ids:  # a copy met earlier in this run
                if (seen_ids[doc_id], str(path)) in report.duplicates:  # that copy was reported as this file's
                    return "skipped"
                report.skipped.append(doc_id)
                report.duplicates.append((str(path), seen_ids[doc_id]))
                return "skipped"
            seen_ids[doc_id] = str(path)
            if doc_id in at_path and not user:  # stored from this path, nothing to update
                report.skipped.append(doc_id)
                return "skipped"
            return self._follow(path, doc_id, report, user)
        if rendered is None:  # stored when planned, gone now (deleted meanwhile): render it here
            rendered = render_document(job, path, doc_id)
        report.add_time("render_s", rendered.seconds)
        if rendered.preview is not None:
            report.add_time("preview_s", rendered.preview_seconds)
        if rendered.failure is not None or rendered.doc is None:
            failure = rendered.failure or RenderFailure(str(path), "error", f"{path}: not rendered")
            logger.warning("skipping %s", failure.message)
            report.failed.append(IndexFailure(failure.path, failure.message, failure.kind))
            return "failed"
        doc = rendered.doc
        seen_ids[doc_id] = str(path)
        item = PendingDocument(doc, str(path), user=user or {})
        if doc.grid is not None and self.grids.store_grids:
            item.grid_bytes = rendered.preview if rendered.preview is not None else self.grids.encode_later(doc.grid.image)
        pending.append(item)
        return "indexed"

    def _follow(self, path: Path, doc_id: str, report: IndexReport, wanted: dict[str, Any] | None) -> str:
        """A stored, unchanged file: record a move (its old path no longer holds these bytes) and user
        metadata that changed, without encoding anything; ``skipped``, or ``moved`` when its source changed."""
        found = self.store.get([doc_id])
        if not found:  # deleted by another writer meanwhile: nothing to follow
            report.skipped.append(doc_id)
            return "skipped"
        stored = found[0].metadata
        changes: dict[str, Any] = {}
        old_source = str(stored.get("source") or "")
        moved = old_source != str(path) and not _holds(doc_id, stored)
        if moved:
            stat = path.stat()
            changes.update(source=str(path), file_name=path.name, file_bytes=stat.st_size, file_mtime=stat.st_mtime)
        if wanted and any(stored.get(k) != v for k, v in wanted.items()):
            changes.update(wanted)
        if old_source != str(path) and not moved:  # the original still holds these bytes: a copy
            report.duplicates.append((str(path), old_source))
        if not changes:
            report.skipped.append(doc_id)
            return "skipped"
        self.store.update_metadata([doc_id], [{**stored, **changes}])
        if moved:
            logger.info("%s moved to %s", old_source, path)
            report.moved.append(doc_id)
            return "moved"
        report.metadata_updated.append(doc_id)
        report.skipped.append(doc_id)
        return "skipped"

    def prepare_commit(
        self,
        batch: Sequence[PendingDocument],
        encoded: Sequence[tuple[np.ndarray, TokenGrid | None]],
        model_id: str,
        report: IndexReport,
    ) -> PreparedCommit:
        """A commit's work before its write: the pooled vectors collected, the older versions of its paths found,
        its records built and payload packed. Runs while the commit before it writes (no store change here)."""
        t0 = time.perf_counter()
        vectors, parts, anchors = self._pool(batch, encoded, model_id)
        report.add_time("pool_s", time.perf_counter() - t0)
        t0 = time.perf_counter()
        # Older versions of these paths, found with one query per batch here (off the encoding thread).
        older = self.store.ids_by_source([p.source for p in batch])
        replaced = [old for p in batch for old in older.get(p.source, []) if old != p.doc.doc_id]
        kept = {d.id: user_part(d.metadata) for d in self.store.get(replaced)} if replaced else {}
        metadatas = []
        for p in batch:  # a replaced file keeps its older version's user keys, under this run's own
            carried = {k: v for old in older.get(p.source, []) for k, v in kept.get(old, {}).items()}
            metadatas.append({**p.doc.metadata, **carried, **p.user})
        ready = self.store.prepare_add(
            [p.doc.doc_id for p in batch],
            vectors,
            metadatas,
            texts=[p.doc.text for p in batch],
            parts=parts,
            anchors=anchors,
            grids=[p.grid_bytes.result() if isinstance(p.grid_bytes, Future) else p.grid_bytes for p in batch],
        )
        report.add_time("pack_s", time.perf_counter() - t0)
        return PreparedCommit(ready, replaced, older)

    def write_commit(self, batch: Sequence[PendingDocument], prepared: PreparedCommit, encoder: Encoder,
                     report: IndexReport, bar: Any) -> None:
        """Write a prepared commit: the store's only change per batch, in file order (one commit at a time)."""
        self.store.set_settings({"encoder": encoder.settings(), "index": self.settings.to_dict()})
        t0 = time.perf_counter()
        self.store.add_prepared(prepared.ready)
        replaced, older = prepared.replaced, prepared.older
        if replaced:
            self.delete(replaced)
            report.replaced.extend(replaced)
            report.updated.extend(p.doc.doc_id for p in batch if any(o != p.doc.doc_id for o in older.get(p.source, [])))
        report.add_time("commit_s", time.perf_counter() - t0)
        report.indexed.extend(p.doc.doc_id for p in batch)
        bar.update(len(batch))
        logger.info("committed %d documents (%d in this run)", len(batch), len(report.indexed))

    def _pool(
        self, batch: Sequence[PendingDocument], encoded: Sequence[tuple[np.ndarray, TokenGrid | None]], model_id: str
    ) -> tuple[list[np.ndarray], list[list[int] | None], list[np.ndarray | None]]:
        """Per document: its (pooled) vectors, its parts (page mode) and the anchors of pooled rows."""
        vectors: list[np.ndarray] = []
        parts: list[list[int] | None] = []
        anchors: list[np.ndarray | None] = []
        all_pooled = [f.result() for p in batch for f in p.pooled]
        start = 0
        for p in batch:
            mine = encoded[start : start + len(p.doc.images)]
            pooled = all_pooled[start : start + len(p.doc.images)]
            start += len(p.doc.images)
            p.doc.metadata["model"] = model_id
            if p.doc.grid is not None:
                token_grid = mine[0][1]
                if token_grid is not None:
                    p.doc.metadata["token_grid"] = json.dumps(token_grid.to_dict(), separators=(",", ":"))
                vectors.append(pooled[0][0])
                parts.append(None)
                anchors.append(pooled[0][1])
            else:
                vectors.append(np.concatenate([v for v, _ in pooled], axis=0))
                parts.append([len(v) for v, _ in pooled])
                anchors.append(None)
        return vectors, parts, anchors

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents (records, vectors and grid previews); returns how many existed."""
        return self.store.delete(ids)

    def edit_metadata(self, ids: Sequence[str], values: Mapping[str, Any], unset: Iterable[str]) -> int:
        """Set and remove user metadata keys of documents without encoding anything; how many changed."""
        unset = list(unset)
        changed = [(d.id, new) for d in self.store.get(ids)
                   if (new := edited_metadata(d.metadata, values, unset)) != dict(d.metadata)]
        if changed:
            self.store.update_metadata([i for i, _ in changed], [m for _, m in changed])
        return len(changed)


def _holds(doc_id: str, stored: Mapping[str, Any]) -> bool:
    """Whether the recorded source still holds the bytes of ``doc_id`` (a copy left in place, not a move)."""
    try:
        checked_source(doc_id, stored)  # size and mtime first; the content hash only when they changed
    except PDFLoadError:
        return False
    return True


def encode_with_tokens(encoder: Encoder, images: Sequence[Image.Image]) -> list[tuple[np.ndarray, TokenGrid | None]]:
    """Encode images ``-> [(embedding [n, dim], token grid or None)]``; the grid locates visual tokens for evidence."""
    if not images:
        return []
    return [
        (item.embeddings, TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid))
        for item in encoder.encode_images_with_info(list(images))
    ]
