"""The indexing pipeline: discover -> represent -> encode -> commit.

Each file is identified by the hash of its bytes: unchanged files are
skipped, a changed file replaces its old version, renamed copies are skipped
as duplicates. A file that cannot be used is reported with its path and
reason and the others go on. Every ``batch_size`` documents are encoded and
committed together (vectors pooled and compacted, grid previews encoded
as WebP, all written with the document's record), so an interrupted run
keeps what it committed and a re-run completes it without duplicates.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from docpc_retrievers.config import DEFAULT_MAX_FILE_BYTES, IndexSettings
from docpc_retrievers.documents.discovery import discover_pdfs, document_id
from docpc_retrievers.documents.represent import RepresentedDocument, represent_pdf
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.results import IndexFailure, IndexReport
from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.store.grids import GridImageStore
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.pooling import pool_vectors

__all__ = ["Indexer", "encode_with_tokens"]

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A document represented and waiting to be encoded in a batch."""

    doc: RepresentedDocument
    replaces: list[str]
    grid_bytes: Future[bytes] | None = None


class Indexer:
    """Adds PDFs to a store: one instance per open index, used by :meth:`DocPCIndex.add_pdfs`.

    ``encoder`` is a callable so the model loads only when the first batch
    is encoded (a re-run that skips everything never loads it).
    """

    def __init__(
        self,
        store: MultiVectorStore,
        grids: GridImageStore,
        settings: IndexSettings,
        encoder: Callable[[], Encoder],
    ) -> None:
        self.store = store
        self.grids = grids
        self.settings = settings
        self._encoder = encoder

    def add_pdfs(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        password: str | None = None,
        batch_size: int = 8,
        progress: bool = False,
        max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        on_file: Callable[[Path, str], None] | None = None,
    ) -> IndexReport:
        """Index PDF files and folders (recursively); ``on_file(path, outcome)`` sees each file's outcome.

        Outcomes are ``indexed``, ``skipped`` or ``failed``; the report also
        carries the time spent per stage (``timings``: render, encode, pool, commit, total).
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        started = time.perf_counter()
        files = discover_pdfs(paths)
        report = IndexReport()
        pending: list[_Pending] = []
        seen_ids: set[str] = set()
        bar = _progress(len(files), progress, "indexing")
        try:
            for path in files:
                outcome = self._prepare_one(path, password, max_file_bytes, seen_ids, report, pending)
                if len(pending) >= batch_size:
                    self._commit(pending, report)
                    pending = []
                if on_file is not None:
                    on_file(path, outcome)
                bar.update(1)
            if pending:
                self._commit(pending, report)
        finally:
            bar.close()
            report.timings["total_s"] = time.perf_counter() - started
        logger.info(
            "indexed %d, skipped %d, failed %d of %d files",
            len(report.indexed),
            len(report.skipped),
            len(report.failed),
            len(files),
        )
        return report

    def _prepare_one(
        self,
        path: Path,
        password: str | None,
        max_file_bytes: int | None,
        seen_ids: set[str],
        report: IndexReport,
        pending: list[_Pending],
    ) -> str:
        """Represent one file and queue it; returns its outcome."""
        try:
            doc_id = document_id(path)
        except FileNotFoundError:
            report.failed.append(IndexFailure(str(path), f"{path}: file not found", "not_found"))
            return "failed"
        except OSError as exc:
            report.failed.append(IndexFailure(str(path), f"{path}: cannot read file: {exc}", "not_found"))
            return "failed"
        if doc_id in seen_ids or doc_id in self.store:
            # The bytes are indexed already. If this path used to hold other
            # content, that older record is stale now: drop it.
            stale = self._older_versions(path, doc_id)
            if stale:
                self.delete(stale)
                report.replaced.extend(stale)
            report.skipped.append(doc_id)
            return "skipped"
        t0 = time.perf_counter()
        try:
            doc = represent_pdf(path, self.settings, password=password, max_file_bytes=max_file_bytes, doc_id=doc_id)
        except PDFLoadError as exc:
            logger.warning("skipping %s", exc)
            report.failed.append(IndexFailure(exc.path, str(exc), exc.kind))
            return "failed"
        except (OSError, ValueError, RuntimeError) as exc:  # a broken file must not stop the batch
            logger.warning("skipping %s: %s", path, exc)
            report.failed.append(IndexFailure(str(path), f"{path}: {exc}", "error"))
            return "failed"
        finally:
            report.add_time("render_s", time.perf_counter() - t0)
        seen_ids.add(doc_id)
        item = _Pending(doc, self._older_versions(path, doc_id))
        if doc.grid is not None and self.grids.store_grids:
            item.grid_bytes = self.grids.encode_later(doc.grid.image)
        pending.append(item)
        return "indexed"

    def _older_versions(self, path: Path, doc_id: str) -> list[str]:
        return [i for i in self.store.ids(where={"source": str(path)}) if i != doc_id]

    def _commit(self, batch: Sequence[_Pending], report: IndexReport) -> None:
        """Encode a batch and write it to the store as one commit."""
        encoder = self._encoder()
        self.store.set_settings({"encoder": encoder.settings(), "index": self.settings.to_dict()})
        images = [img for p in batch for img in p.doc.images]
        t0 = time.perf_counter()
        encoded = encode_with_tokens(encoder, images)
        report.add_time("encode_s", time.perf_counter() - t0)
        report.images_encoded += len(images)
        t0 = time.perf_counter()
        vectors, parts, anchors = self._pool(batch, encoded, encoder.model_id)
        report.add_time("pool_s", time.perf_counter() - t0)
        t0 = time.perf_counter()
        self.store.add(
            [p.doc.doc_id for p in batch],
            vectors,
            [p.doc.metadata for p in batch],
            texts=[p.doc.text for p in batch],
            parts=parts,
            anchors=anchors,
            grids=[p.grid_bytes.result() if p.grid_bytes is not None else None for p in batch],
        )
        replaced = [old for p in batch for old in p.replaces]
        if replaced:
            self.delete(replaced)
            report.replaced.extend(replaced)
        report.add_time("commit_s", time.perf_counter() - t0)
        report.indexed.extend(p.doc.doc_id for p in batch)
        logger.info("committed %d documents (%d in this run)", len(batch), len(report.indexed))

    def _pool(
        self, batch: Sequence[_Pending], encoded: Sequence[tuple[np.ndarray, TokenGrid | None]], model_id: str
    ) -> tuple[list[np.ndarray], list[list[int] | None], list[np.ndarray | None]]:
        """Per document: its (pooled) vectors, its parts (page mode) and the anchors of pooled rows."""
        factor = self.settings.pool_factor
        vectors: list[np.ndarray] = []
        parts: list[list[int] | None] = []
        anchors: list[np.ndarray | None] = []
        start = 0
        for p in batch:
            mine = encoded[start : start + len(p.doc.images)]
            start += len(p.doc.images)
            p.doc.metadata["model"] = model_id
            pooled = [pool_vectors(e, factor) for e, _ in mine]
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


def encode_with_tokens(encoder: Encoder, images: Sequence[Image.Image]) -> list[tuple[np.ndarray, TokenGrid | None]]:
    """Encode images ``-> [(embedding [n, dim], token grid or None)]``; the grid locates visual tokens for evidence."""
    if not images:
        return []
    return [
        (item.embeddings, TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid))
        for item in encoder.encode_images_with_info(list(images))
    ]


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar on stderr when enabled and stderr is a terminal, else a no-op."""
    if not enabled or not sys.stderr.isatty():
        return _NullBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="pdf", file=sys.stderr)
