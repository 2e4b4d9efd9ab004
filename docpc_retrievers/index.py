"""The DocPC index: PDFs in, one composed grid per document encoded once, ranked documents out.

``DocPCIndex`` ties the parts together: :mod:`pdf` opens and renders,
:mod:`selection` picks the K representative pages, :mod:`composition` lays
them out in one grid, :mod:`encoders` turns the grid into a multi-vector
embedding and :mod:`store` keeps it and searches it by MaxSim.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .composition import DEFAULT_CELL_SIZE, ComposedGrid, GridLayout, compose_grid, grid_shape
from .encoders import DEFAULT_MODEL, Encoder
from .errors import ModelMismatchError, PDFLoadError
from .evidence import EvidencePage, TokenGrid, evidence_shares, token_pages
from .page_cache import PageEmbeddingCache, cache_fingerprint
from .rerank import PageReranker, RerankSettings, choose_pages, fuse
from .pdf import open_pdf
from .results import IndexFailure, IndexReport, SearchResult
from .selection import STRATEGIES, select_document_pages
from .sources import discover_pdfs, document_id
from .store import MultiVectorStore, ScoredDocument

__all__ = ["DEFAULT_MAX_FILE_BYTES", "DEFAULT_PAGE_SIZE", "MODES", "DocPCIndex", "IndexSettings"]

logger = logging.getLogger(__name__)

#: PDFs larger than this are refused (each one fails on its own; the batch goes on).
DEFAULT_MAX_FILE_BYTES = 512 * 1024 * 1024

#: ``grid``: K pages composed into one image per document (DocPC); ``page``: every
#: selected page encoded on its own, the page-level baseline (MaxP/AvgP/SumP).
MODES = ("grid", "page")

#: Box each page is rendered into for page mode and reranking; the processor then
#: scales it to its own resolution (about 768 visual tokens for ColQwen2).
DEFAULT_PAGE_SIZE = (1024, 1324)


@dataclass(frozen=True)
class IndexSettings:
    """How documents become grids; recorded in the store so every document is built the same way.

    ``pages`` is K, the number of representative pages; ``grid`` overrides the
    ``rows x cols`` shape (default: the smallest near-square grid holding K);
    ``cell_size`` is each cell's (width, height) in pixels.
    """

    strategy: str = "first"
    pages: int | None = 4
    grid: tuple[int, int] | None = None
    cell_size: tuple[int, int] = DEFAULT_CELL_SIZE
    seed: int = 0
    mode: str = "grid"
    page_size: tuple[int, int] = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.pages is None:
            if self.mode == "grid":
                raise ValueError("grid mode needs a page count K (pages=...)")
        elif self.pages < 1:
            raise ValueError(f"pages (K) must be >= 1, got {self.pages}")
        if self.grid is not None and self.mode == "page":
            raise ValueError("grid= applies to grid mode only")
        if self.grid is not None and self.pages is not None:
            rows, cols = self.grid
            if rows < 1 or cols < 1 or rows * cols < self.pages:
                raise ValueError(f"a {rows}x{cols} grid cannot hold {self.pages} pages")

    @property
    def shape(self) -> tuple[int, int]:
        if self.grid is not None:
            return (int(self.grid[0]), int(self.grid[1]))
        return grid_shape(self.pages or 1)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "strategy": self.strategy, "pages": self.pages, "seed": self.seed}
        if self.mode == "grid":
            out["grid"] = list(self.shape)
            out["cell_size"] = list(self.cell_size)
        out["page_size"] = list(self.page_size)  # page mode, and full-resolution pages for reranking
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IndexSettings:
        grid = data.get("grid")
        pages = data.get("pages", 4)
        return cls(
            strategy=str(data.get("strategy", "first")),
            pages=None if pages is None else int(pages),
            grid=(int(grid[0]), int(grid[1])) if grid else None,
            cell_size=tuple(data.get("cell_size", DEFAULT_CELL_SIZE)),  # type: ignore[arg-type]
            seed=int(data.get("seed", 0)),
            mode=str(data.get("mode", "grid")),
            page_size=tuple(data.get("page_size", DEFAULT_PAGE_SIZE)),  # type: ignore[arg-type]
        )


@dataclass
class _Prepared:
    """A document rendered and composed, waiting to be encoded in a batch."""

    doc_id: str
    path: Path
    grid: ComposedGrid | None
    metadata: dict[str, Any]
    text: str
    replaces: list[str] = field(default_factory=list)
    pages: list[Image.Image] = field(default_factory=list)
    saved: Future[None] | None = None

    @property
    def images(self) -> list[Image.Image]:
        """What gets encoded: the grid (grid mode) or each page (page mode)."""
        return [self.grid.image] if self.grid is not None else self.pages


class DocPCIndex:
    """A persistent document-level visual index.

    Open an existing store with ``DocPCIndex(path)`` (read-only, for search)
    or ``DocPCIndex(path, writable=True)`` (one writer at a time), or build
    one with :meth:`from_pdfs`. The encoder is loaded lazily, from the model
    recorded in the store unless ``model``/``encoder`` is given; a different
    model than the store's raises :class:`ModelMismatchError`.

    Args:
        path: store directory; None makes a temporary one deleted on close.
        model: checkpoint id or local path (default: the store's, else
            ``vidore/colqwen2-v1.0``).
        encoder: an already-built :class:`Encoder` (takes precedence over ``model``).
        settings: page selection and grid settings for new stores.
        writable: take the writer lock (needed for add/delete).
        host, port: use a Chroma server for the records.
        encoder_kwargs: passed to :class:`ColPaliEncoder` (device, dtype, batch_size, ...).
    """

    #: PyMuPDF is not thread-safe, even across documents: every render in this process
    #: (indexing, reranking, on-demand page images) takes this lock.
    _render_lock = threading.Lock()

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        model: str | os.PathLike[str] | None = None,
        encoder: Encoder | None = None,
        settings: IndexSettings | None = None,
        writable: bool = False,
        host: str | None = None,
        port: int = 8000,
        collection: str = "docpc",
        encoder_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._temp_dir: str | None = None
        if path is None:
            self._temp_dir = tempfile.mkdtemp(prefix="docpc-index-")
            path = self._temp_dir
            writable = True
        self.path = Path(path).expanduser().resolve()
        if model is not None and encoder is not None:
            raise ValueError("pass either model or encoder, not both")
        self._store = MultiVectorStore(self.path, host=host, port=port, collection=collection, writable=writable)
        recorded = self._store.settings
        if settings is not None and recorded.get("index"):
            try:
                self._store.check_settings(settings.to_dict(), section="index")
            except ModelMismatchError:
                self._store.close()
                raise
        if settings is None:
            settings = IndexSettings.from_dict(recorded["index"]) if recorded.get("index") else IndexSettings()
        self.settings = settings
        self._encoder = encoder
        self._model = str(model) if model is not None else None
        self._encoder_kwargs = dict(encoder_kwargs or {})
        self._encoder_lock = threading.Lock()
        self.last_report = IndexReport()
        self._page_cache: PageEmbeddingCache | None = None
        self._grid_writer: ThreadPoolExecutor | None = None
        self._reranker: PageReranker | None = None
        if self._encoder is not None:
            self._check_encoder(self._encoder)

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_pdfs(
        cls,
        paths: Iterable[str | os.PathLike[str]],
        path: str | os.PathLike[str] | None = None,
        *,
        model: str | os.PathLike[str] | None = None,
        encoder: Encoder | None = None,
        settings: IndexSettings | None = None,
        strategy: str | None = None,
        pages: int | None = None,
        password: str | None = None,
        progress: bool = False,
        **kwargs: Any,
    ) -> DocPCIndex:
        """Build (or extend) an index from PDF files and folders; failures are logged, not raised.

        ``strategy`` and ``pages`` are shortcuts for ``settings``; the
        returned index stays writable. Check :attr:`last_report` for failures.
        """
        if settings is None and (strategy is not None or pages is not None):
            settings = IndexSettings(strategy=strategy or "first", pages=pages or 4)
        index = cls(path, model=model, encoder=encoder, settings=settings, writable=True, **kwargs)
        try:
            index.add_pdfs(paths, password=password, progress=progress)
        except BaseException:
            index.close()
            raise
        return index

    # ----------------------------------------------------------------- encoder
    @property
    def store(self) -> MultiVectorStore:
        return self._store

    @property
    def model(self) -> str:
        """The checkpoint this index encodes with."""
        if self._encoder is not None:
            return self._encoder.model_id
        if self._model is not None:
            return self._model
        recorded = (self._store.settings.get("encoder") or {}).get("model_id")
        return str(recorded) if recorded else DEFAULT_MODEL

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first use and checked against the store's model."""
        with self._encoder_lock:
            if self._encoder is None:
                from .encoders import ColPaliEncoder

                encoder = ColPaliEncoder(self.model, **self._encoder_kwargs)
                self._check_encoder(encoder)
                self._encoder = encoder
            return self._encoder

    def _check_encoder(self, encoder: Encoder) -> None:
        self._store.check_settings(encoder.settings(), section="encoder")

    # ------------------------------------------------------------------ writes
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
        """Index PDF files and folders (recursively); return what was indexed, skipped and failed.

        Each file is identified by the hash of its bytes: unchanged files are
        skipped, a changed file replaces its old version, renamed copies are
        skipped as duplicates. A file that cannot be used is reported with
        its path and reason and the others go on. Every ``batch_size``
        documents are committed together, so an interrupted run keeps what it
        committed and a re-run completes it without duplicates.
        ``on_file(path, outcome)`` is called per file with ``indexed``,
        ``skipped`` or ``failed``.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        files = discover_pdfs(paths)
        report = IndexReport()
        self.last_report = report
        pending: list[_Prepared] = []
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
        pending: list[_Prepared],
    ) -> str:
        try:
            doc_id = document_id(path)
        except FileNotFoundError:
            report.failed.append(IndexFailure(str(path), f"{path}: file not found", "not_found"))
            return "failed"
        except OSError as exc:
            report.failed.append(IndexFailure(str(path), f"{path}: cannot read file: {exc}", "not_found"))
            return "failed"
        if doc_id in seen_ids or doc_id in self._store:
            # The bytes are indexed already. If this path used to hold other
            # content, that older record is stale now: drop it.
            stale = [i for i in self._store.ids(where={"source": str(path)}) if i != doc_id]
            if stale:
                self._store.delete(stale)
                self._remove_grids(stale)
                report.replaced.extend(stale)
            report.skipped.append(doc_id)
            return "skipped"
        try:
            prepared = self._prepare(path, doc_id, password, max_file_bytes)
        except PDFLoadError as exc:
            logger.warning("skipping %s", exc)
            report.failed.append(IndexFailure(exc.path, str(exc), exc.kind))
            return "failed"
        except (OSError, ValueError, RuntimeError) as exc:  # a broken file must not stop the batch
            logger.warning("skipping %s: %s", path, exc)
            report.failed.append(IndexFailure(str(path), f"{path}: {exc}", "error"))
            return "failed"
        seen_ids.add(doc_id)
        self._start_grid_write(prepared)
        pending.append(prepared)
        return "indexed"

    def _prepare(self, path: Path, doc_id: str, password: str | None, max_file_bytes: int | None) -> _Prepared:
        with self._render_lock:
            grid, images, metadata, text = _render_document(path, self.settings, password, max_file_bytes)
        old = [i for i in self._store.ids(where={"source": str(path)}) if i != doc_id]
        return _Prepared(doc_id, path, grid, metadata, text, replaces=old, pages=[] if grid is not None else images)

    def _commit(self, batch: list[_Prepared], report: IndexReport) -> None:
        """Encode a batch of grids and write it to the store as one commit."""
        encoder = self.encoder
        self._store.set_settings({"encoder": encoder.settings(), "index": self.settings.to_dict()})
        images = [img for p in batch for img in p.images]
        encoded = _encode_with_tokens(encoder, images)
        vectors: list[np.ndarray] = []
        parts: list[list[int] | None] = []
        start = 0
        for p in batch:
            mine = encoded[start : start + len(p.images)]
            start += len(p.images)
            p.metadata["model"] = encoder.model_id
            if p.grid is not None:
                embedding, token_grid = mine[0]
                vectors.append(embedding)
                parts.append(None)
                if token_grid is not None:
                    p.metadata["token_grid"] = json.dumps(token_grid.to_dict(), separators=(",", ":"))
            else:
                vectors.append(np.concatenate([e for e, _ in mine], axis=0))
                parts.append([len(e) for e, _ in mine])
        # Grid images first: a record must never exist without its image. An
        # image left behind by a kill is harmless and rewritten by the re-run.
        self._save_grids(batch)
        self._store.add(
            [p.doc_id for p in batch],
            vectors,
            [p.metadata for p in batch],
            texts=[p.text for p in batch],
            parts=parts,
        )
        replaced = [old for p in batch for old in p.replaces]
        if replaced:
            self._store.delete(replaced)
            self._remove_grids(replaced)
            report.replaced.extend(replaced)
        report.indexed.extend(p.doc_id for p in batch)

    # ------------------------------------------------------------ grid images
    def _grid_path(self, doc_id: str) -> Path:
        return self.path / "grids" / f"{doc_id}.png"

    def _write_grid(self, doc_id: str, image: Image.Image) -> None:
        target = self._grid_path(doc_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{threading.get_ident()}.tmp")
        # Lossless (small text must stay legible) but fast: level 1 is ~1.4x quicker than 6.
        image.save(tmp, format="PNG", compress_level=1)
        os.replace(tmp, target)

    def _start_grid_write(self, prepared: _Prepared) -> None:
        """Write a grid image in the background, overlapping the next documents' rendering and encoding."""
        if prepared.grid is None:
            return
        if self._grid_writer is None:
            self._grid_writer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="docpc-grid")
        prepared.saved = self._grid_writer.submit(self._write_grid, prepared.doc_id, prepared.grid.image)

    def _save_grids(self, batch: Sequence[_Prepared]) -> None:
        """Make sure every grid image of the batch is on disk (called before its records are committed)."""
        for p in batch:
            if p.grid is None:
                continue
            if p.saved is not None:
                p.saved.result()  # re-raises a failed write
            else:
                self._write_grid(p.doc_id, p.grid.image)

    def _remove_grids(self, ids: Iterable[str]) -> None:
        for doc_id in ids:
            self._grid_path(doc_id).unlink(missing_ok=True)

    def grid_image(self, doc_id: str) -> Image.Image:
        """The composed grid image stored for a document."""
        path = self._grid_path(doc_id)
        if not path.exists():
            raise KeyError(f"no grid image for document {doc_id!r}")
        with Image.open(path) as img:
            return img.convert("RGB")

    def grid_layout(self, doc_id: str) -> GridLayout:
        """Which cell of a document's grid holds which page, in pixels."""
        doc = self._store.get([doc_id])
        if not doc:
            raise KeyError(f"no document {doc_id!r}")
        return GridLayout.from_dict(json.loads(doc[0].metadata["layout"]))

    def text(self, doc_id: str) -> str:
        """The text layer of the document's selected pages, as indexed."""
        return self._store.texts([doc_id]).get(doc_id, "")

    # ------------------------------------------------------------------ delete
    def resolve_ids(self, ids_or_paths: Iterable[str | os.PathLike[str]]) -> list[str]:
        """Map document ids or source paths to the ids stored for them (unknown ones are dropped)."""
        out: list[str] = []
        for item in ids_or_paths:
            key = str(item)
            if key in self._store:
                out.append(key)
                continue
            source = str(Path(key).expanduser().resolve())
            out.extend(self._store.ids(where={"source": source}))
        return list(dict.fromkeys(out))

    def delete(self, ids_or_paths: Iterable[str | os.PathLike[str]]) -> int:
        """Delete documents given by id or by source path; returns how many were deleted."""
        ids = self.resolve_ids(ids_or_paths)
        n = self._store.delete(ids)
        self._remove_grids(ids)
        return n

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        filters: Mapping[str, Any] | None = None,
        aggregate: str = "max",
        rerank: bool = False,
        rerank_top_n: int | None = None,
        page_budget: int | None = None,
        grid_weight: float | None = None,
        password: str | None = None,
    ) -> list[SearchResult]:
        """Rank documents for a text query; ``filters`` is a Chroma ``where`` dict.

        ``aggregate`` combines page scores in page mode: ``max`` (MaxP),
        ``mean`` (AvgP), ``sum`` (SumP). ``rerank=True`` rescoring the top
        ``rerank_top_n`` (default 20) documents from up to ``page_budget``
        (default 4) pages each, encoded one by one at full resolution (see
        rerank.py for the fusion, weighted by ``grid_weight``, default 0.5).
        ``password`` opens encrypted sources when reranking.
        """
        return self.search_batch(
            [query],
            top_k,
            filters=filters,
            aggregate=aggregate,
            rerank=rerank,
            rerank_top_n=rerank_top_n,
            page_budget=page_budget,
            grid_weight=grid_weight,
            password=password,
        )[0]

    def search_batch(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        filters: Mapping[str, Any] | None = None,
        aggregate: str = "max",
        rerank: bool = False,
        rerank_top_n: int | None = None,
        page_budget: int | None = None,
        grid_weight: float | None = None,
        password: str | None = None,
    ) -> list[list[SearchResult]]:
        """:meth:`search` for several queries, encoded together."""
        if isinstance(queries, str):
            raise TypeError("search_batch expects a list of queries")
        for q in queries:
            if not isinstance(q, str) or not q.strip():
                raise ValueError("query must be a non-empty string")
        if top_k < 0:
            raise ValueError("top_k must be >= 0")
        defaults = RerankSettings()
        rerank_settings = RerankSettings(
            top_n=rerank_top_n if rerank_top_n is not None else defaults.top_n,
            page_budget=page_budget if page_budget is not None else defaults.page_budget,
            grid_weight=grid_weight if grid_weight is not None else defaults.grid_weight,
        )
        if top_k == 0 or self._store.count() == 0:
            return [[] for _ in queries]
        vectors = self.encoder.encode_queries(list(queries))
        depth = max(top_k, rerank_settings.top_n) if rerank else top_k
        hits = self._store.search_batch(vectors, depth, where=filters, aggregate=aggregate)
        out = []
        for text, q, per_query in zip(queries, vectors, hits):
            results = [self._with_evidence(h, q) for h in per_query]
            if rerank:
                results = self._rerank(text, q, results, rerank_settings, password)
            out.append([replace(r, rank=rank) for rank, r in enumerate(results[:top_k], 1)])
        return out

    def _with_evidence(self, hit: ScoredDocument, query: np.ndarray) -> SearchResult:
        """A result with its evidence pages: grid attribution, or page-mode page scores."""
        result = SearchResult.from_metadata(hit.id, hit.score, 0, hit.metadata)
        meta = hit.metadata
        pages = result.selected_pages
        labels = list(meta.get("selected_labels") or [])
        label = dict(zip(pages, labels))
        if meta.get("mode", "grid") == "page":
            if len(hit.part_scores) == len(pages):
                ev = [EvidencePage(p, score=s, label=label.get(p)) for p, s in zip(pages, hit.part_scores)]
                ev.sort(key=lambda e: (-(e.score or 0.0), e.page))
                return replace(result, evidence_pages=ev)
            return result
        shares = self._grid_shares(hit.id, meta, query)
        if shares is None:
            return result
        ev = [EvidencePage(p, share=shares.get(p - 1, 0.0), label=label.get(p)) for p in pages]
        ev.sort(key=lambda e: (-(e.share or 0.0), e.page))
        return replace(result, evidence_pages=ev)

    def _grid_shares(self, doc_id: str, meta: Mapping[str, Any], query: np.ndarray) -> dict[int, float] | None:
        """Share of the grid MaxSim per page (0-based), or None when the token geometry is unknown."""
        raw_grid, raw_layout = meta.get("token_grid"), meta.get("layout")
        if not raw_grid or not raw_layout:
            return None
        grid = TokenGrid.from_dict(json.loads(str(raw_grid)))
        layout = GridLayout.from_dict(json.loads(str(raw_layout)))
        return evidence_shares(query, self._store.vectors(doc_id), grid, token_pages(layout, grid.rows, grid.cols))

    @property
    def page_cache(self) -> PageEmbeddingCache:
        """Full-resolution page embeddings made for reranking (``<store>/page_cache``)."""
        if self._page_cache is None:
            fingerprint = cache_fingerprint(self.encoder.settings(), self.settings.page_size)
            self._page_cache = PageEmbeddingCache(self.path / "page_cache", fingerprint)
        return self._page_cache

    @property
    def reranker(self) -> PageReranker:
        if self._reranker is None:
            self._reranker = PageReranker(self.encoder, self.page_cache, self.settings.page_size)
        return self._reranker

    def _rerank(
        self,
        text: str,
        query: np.ndarray,
        results: list[SearchResult],
        settings: RerankSettings,
        password: str | None,
    ) -> list[SearchResult]:
        """Grid-then-page: rescore the top ``settings.top_n`` results from their best pages."""
        with self._render_lock:  # PyMuPDF and the reranker's caches are not thread-safe
            return self._rerank_locked(text, query, results, settings, password)

    def _rerank_locked(
        self,
        text: str,
        query: np.ndarray,
        results: list[SearchResult],
        settings: RerankSettings,
        password: str | None,
    ) -> list[SearchResult]:
        head, tail = results[: settings.top_n], results[settings.top_n :]
        reranked: list[SearchResult] = []
        for r in head:
            source = Path(r.source or "")
            total = int(r.total_pages or 0)
            try:
                texts = self.reranker.page_texts(r.id, source, password)
                evidence = {e.page - 1: e.share or 0.0 for e in r.evidence_pages}
                chosen = choose_pages(total, settings.page_budget, text, texts, evidence)
                scores = self.reranker.page_scores(r.id, source, chosen, query, password)
            except (PDFLoadError, OSError) as exc:
                logger.warning("not reranking %s: %s", r.id, exc)
                reranked.append(r)
                continue
            fused = fuse(r.score, list(scores.values()), settings.grid_weight)
            ev = [EvidencePage(p, score=s) for p, s in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]
            reranked.append(replace(r, score=fused, grid_score=r.score, reranked=True, evidence_pages=ev))
        reranked.sort(key=lambda r: (-r.score, r.id))
        return reranked + tail

    def clear_page_cache(self) -> int:
        """Delete every cached page embedding; returns how many were removed."""
        cache = self._page_cache or PageEmbeddingCache(self.path / "page_cache", "")
        removed = cache.clear()
        self._page_cache = None
        self._reranker = None
        return removed

    # -------------------------------------------------------------------- info
    def __len__(self) -> int:
        return self._store.count()

    def get(self, ids: Sequence[str]) -> list[SearchResult]:
        """Stored documents by id, as results with score 0 (unknown ids are skipped)."""
        return [SearchResult.from_metadata(d.id, 0.0, 0, d.metadata) for d in self._store.get(ids)]

    def info(self) -> dict[str, Any]:
        """What the store holds and how it was built."""
        recorded = self._store.settings
        encoder = recorded.get("encoder") or {}
        index = recorded.get("index") or self.settings.to_dict()
        cache = (self._page_cache or PageEmbeddingCache(self.path / "page_cache", "")).stats()
        return {
            "path": str(self.path),
            "documents": self._store.count(),
            "images_encoded": sum(len(d.parts) for d in self._store.get()),
            "vectors": self._store.total_vectors(),
            "bytes_on_disk": self._store.bytes_on_disk(),
            "bytes_grid_images": _folder_bytes(self.path / "grids"),
            "model": encoder.get("model_id", self.model),
            "family": encoder.get("family"),
            "dim": self._store.dim,
            "max_num_visual_tokens": encoder.get("max_num_visual_tokens"),
            "mode": index.get("mode", "grid"),
            "strategy": index.get("strategy"),
            "pages": index.get("pages"),
            "grid": "x".join(str(v) for v in index.get("grid", [])) or None,
            "cell_size": index.get("cell_size"),
            "page_size": index.get("page_size"),
            "page_cache_pages": cache["pages"],
            "page_cache_bytes": cache["bytes"],
        }

    # ---------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Release the store (and its writer lock); delete it if it was temporary."""
        if self._page_cache is not None:
            self._page_cache.close()
        if self._grid_writer is not None:
            self._grid_writer.shutdown(wait=True)
            self._grid_writer = None
        self._store.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> DocPCIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    # For the framework integrations: stored grid bytes, page rendering, composing without storing.

    def grid_image_bytes(self, doc_id: str) -> bytes:
        """The stored grid PNG exactly as written at index time.

        Why: framework results carry the grid base64-encoded; handing over the
        file's bytes avoids a decode and re-encode per result and decodes to the
        very pixels that were encoded.
        """
        try:
            return self._grid_path(doc_id).read_bytes()
        except FileNotFoundError:
            raise KeyError(f"no grid image for document {doc_id!r}") from None

    def render_pages(
        self,
        doc_id: str,
        *,
        dpi: float | None = None,
        password: str | None = None,
    ) -> list[tuple[int, Image.Image, str]]:
        """Render a stored document's selected pages from its source PDF: ``(page number, image, text)``.

        Why: a grid cell is small; a multimodal LLM may read the full pages
        better. Page numbers are 1-based, in grid order. ``password`` opens an
        encrypted source. The source must still be the file that was indexed:
        when its size or mtime changed its content hash is checked, and a
        different file raises :class:`PDFLoadError` with kind ``changed``.
        """
        found = self._store.get([doc_id])
        if not found:
            raise KeyError(f"no document {doc_id!r}")
        meta = found[0].metadata
        source = Path(str(meta.get("source")))
        numbers = [int(p) for p in meta.get("selected_pages") or []]
        try:
            stat = source.stat()
        except OSError as exc:
            raise PDFLoadError(
                source,
                "not_found",
                f"the source PDF of indexed document {doc_id} cannot be read ({exc}); restore it or re-index",
            ) from None
        unchanged = stat.st_size == meta.get("file_bytes") and stat.st_mtime == meta.get("file_mtime")
        if not unchanged and document_id(source) != doc_id:
            raise PDFLoadError(
                source,
                "changed",
                f"the file changed since it was indexed as {doc_id}; re-index it to see its current pages",
            )
        indices = [n - 1 for n in numbers]
        with self._render_lock, open_pdf(source, password=password) as doc:
            images = doc.render(indices, dpi=dpi)
            texts = doc.text(indices)
        return list(zip(numbers, images, texts))

    @classmethod
    def compose_pdf(
        cls,
        path: str | os.PathLike[str],
        *,
        settings: IndexSettings | None = None,
        password: str | None = None,
        max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    ) -> tuple[str, ComposedGrid, dict[str, Any], str]:
        """Compose one PDF's grid the way the index does, without encoding or storing it.

        Returns ``(document id, grid, metadata, text of the selected pages)``;
        the metadata has the same keys as stored documents, less ``model`` and
        ``token_grid`` (both come from the encoder).
        Why: document loaders for users who keep their own vector store need
        the same grid and metadata as the index. Raises :class:`PDFLoadError`
        for a file that cannot be used.
        """
        s = settings or IndexSettings()
        if s.mode != "grid" or s.pages is None:
            raise ValueError("compose_pdf composes grids: it needs grid mode settings with a page count K")
        file_path = Path(path).expanduser().resolve()
        try:
            doc_id = document_id(file_path)
        except OSError as exc:
            raise PDFLoadError(file_path, "not_found", f"file cannot be read: {exc}") from None
        with cls._render_lock:
            grid, _images, metadata, text = _render_document(file_path, s, password, max_file_bytes)
        assert grid is not None
        return doc_id, grid, metadata, text


def _render_document(
    path: Path, s: IndexSettings, password: str | None, max_file_bytes: int | None
) -> tuple[ComposedGrid | None, list[Image.Image], dict[str, Any], str]:
    """Open a PDF, select and render its pages, compose the grid (grid mode) and describe it.

    Returns ``(grid or None, rendered pages, stored metadata, text of the
    selected pages)``. Callers hold the PyMuPDF lock.
    """
    with open_pdf(path, password=password, max_file_bytes=max_file_bytes) as doc:
        info = doc.info()
        if s.pages is None:
            selected = list(range(doc.page_count))
        else:
            selected = select_document_pages(doc, s.pages, s.strategy, seed=s.seed)
        images = doc.render(selected, fit=s.cell_size if s.mode == "grid" else s.page_size)
        texts = doc.text(selected)
        labels = info.page_labels
    grid = compose_grid(images, selected, shape=s.shape, cell_size=s.cell_size) if s.mode == "grid" else None
    stat = path.stat()
    metadata: dict[str, Any] = {
        "source": str(path),
        "file_name": path.name,
        "title": info.title,
        "author": info.author,
        "total_pages": info.page_count,
        "selected_pages": [i + 1 for i in selected],
        "selected_labels": [labels[i] for i in selected],
        "mode": s.mode,
        "strategy": s.strategy,
        "k": s.pages,
        "layout": json.dumps(grid.layout.to_dict(), separators=(",", ":")) if grid is not None else None,
        "file_bytes": stat.st_size,
        "file_mtime": stat.st_mtime,
        "indexed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    text = "\n\n".join(t.strip() for t in texts if t and t.strip())
    return grid, images, metadata, text


def _encode_with_tokens(encoder: Encoder, images: Sequence[Image.Image]) -> list[tuple[np.ndarray, TokenGrid | None]]:
    """Encode images; keep where the visual tokens are when the encoder can tell (for evidence pages)."""
    with_info = getattr(encoder, "encode_images_with_info", None)
    if with_info is None or not images:
        return [(e, None) for e in encoder.encode_images(list(images))]
    return [(item.embeddings, TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid)) for item in with_info(list(images))]


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file()) if folder.exists() else 0


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
