"""Training data for ``docpc train``: labelled PDFs -> cached grid images -> multi-positive batches.

Why this module exists: the losses need, per batch, a set of queries, a set of document
grids and the *labelled* relevance between every query and every document of the batch
(not "document i belongs to query i"). :class:`GridDataset` turns a labelled corpus
(:class:`docpc_retrievers.eval.corpus.LabelledCorpus`, or anything with the same
``documents``/``queries`` attributes) into grid images composed exactly as the index
composes them (page selection strategy, K, grid shape, cell size), cached in memory and
optionally on disk. :class:`MultiPositiveBatchSampler` packs queries into batches so that
every positive of every query is in the query's batch, and builds the relevance matrix
from the labels: a document relevant to two queries of the batch is positive for both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PIL import Image

from docpc_retrievers.config import GridSpec
from docpc_retrievers.documents.composition import compose_grid
from docpc_retrievers.errors import DocPCError, PDFLoadError

if TYPE_CHECKING:
    import torch

__all__ = [
    "GridDataset",
    "GridSpec",
    "LabelledCorpusLike",
    "MultiPositiveBatchSampler",
    "TrainingBatch",
    "TrainingQuery",
]

logger = logging.getLogger(__name__)

_CACHE_FORMAT = 1


class LabelledCorpusLike(Protocol):
    """What the training code reads from a labelled corpus (:class:`~docpc_retrievers.eval.corpus.LabelledCorpus` has it)."""

    documents: Mapping[str, Path]
    queries: Sequence[Any]


@dataclass(frozen=True)
class TrainingQuery:
    """A query usable for training: text and graded positives restricted to documents that are available."""

    query_id: str
    text: str
    relevance: dict[str, int]

    @property
    def positives(self) -> list[str]:
        """Positive doc ids, highest grade first, then by id (a stable order for pairing)."""
        return sorted(self.relevance, key=lambda d: (-self.relevance[d], d))


class GridDataset:
    """Documents of a labelled corpus as grid images, plus the queries that have positives among them.

    ``corpus``: a :class:`~docpc_retrievers.eval.corpus.LabelledCorpus` (or the same attributes).
    ``spec``: how grids are built. ``cache_dir``: optional folder for PNG copies of the grids
    (keyed by spec and file size/mtime, so a changed PDF or spec is re-rendered); grids are
    always kept in memory once built. ``password``: for encrypted PDFs.
    Documents that cannot be opened are skipped with a warning (and dropped from the labels);
    queries left without a positive are dropped from training.
    """

    def __init__(
        self,
        corpus: LabelledCorpusLike,
        spec: GridSpec | None = None,
        *,
        cache_dir: str | Path | None = None,
        password: str | None = None,
    ) -> None:
        self.spec = spec or GridSpec()
        self.password = password
        self._paths: dict[str, Path] = {str(k): Path(v) for k, v in corpus.documents.items()}
        self._memory: dict[str, Image.Image] = {}
        self._failed: dict[str, str] = {}
        self.cache_dir: Path | None = None
        if cache_dir is not None:
            digest = hashlib.sha256(
                json.dumps({"format": _CACHE_FORMAT, **self.spec.to_dict()}, sort_keys=True).encode()
            ).hexdigest()[:16]
            self.cache_dir = Path(cache_dir) / f"grids-{digest}"
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._all_queries: list[TrainingQuery] = []
        for query in corpus.queries:
            relevance = {str(d): int(g) for d, g in query.relevance.items() if int(g) > 0 and str(d) in self._paths}
            self._all_queries.append(TrainingQuery(str(query.query_id), str(query.text), relevance))
        dropped = [q.query_id for q in self._all_queries if not q.relevance]
        if dropped:
            logger.warning(
                "%d of %d queries have no positive document available and are not used for training, e.g. %s",
                len(dropped), len(self._all_queries), ", ".join(dropped[:5]),
            )

    # ------------------------------------------------------------- contents

    @property
    def doc_ids(self) -> list[str]:
        """Ids of the documents that can be used (sorted; failed documents excluded)."""
        return sorted(d for d in self._paths if d not in self._failed)

    @property
    def queries(self) -> list[TrainingQuery]:
        """Queries with at least one usable positive (labels on failed documents removed)."""
        out = []
        for q in self._all_queries:
            rel = {d: g for d, g in q.relevance.items() if d not in self._failed}
            if rel:
                out.append(TrainingQuery(q.query_id, q.text, rel))
        return out

    @property
    def failed(self) -> dict[str, str]:
        """Documents that could not be rendered: doc id -> reason."""
        return dict(self._failed)

    def qrels(self) -> dict[str, dict[str, int]]:
        """Relevance of the usable queries, in the ``metrics.evaluate_run`` shape: qid -> {doc id: grade}."""
        return {q.query_id: dict(q.relevance) for q in self.queries}

    def __len__(self) -> int:
        return len(self.doc_ids)

    # ------------------------------------------------------------- grids

    def _cache_file(self, doc_id: str) -> Path | None:
        if self.cache_dir is None:
            return None
        path = self._paths[doc_id]
        try:
            stat = path.stat()
        except OSError:
            return None
        key = f"{doc_id}\0{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
        return self.cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.png"

    def _render(self, doc_id: str) -> Image.Image:
        from docpc_retrievers.documents.pdf import open_pdf
        from docpc_retrievers.documents.selection import select_document_pages

        spec = self.spec
        with open_pdf(self._paths[doc_id], password=self.password) as doc:
            selected = select_document_pages(doc, spec.pages, spec.strategy, seed=spec.seed)
            images = doc.render(selected, fit=spec.cell_size)
        return compose_grid(images, selected, shape=spec.shape, cell_size=spec.cell_size).image

    def grid(self, doc_id: str) -> Image.Image:
        """The grid image of one document (built once, then served from memory or the disk cache).

        Raises ``KeyError`` for an unknown id and :class:`PDFLoadError` for a document that
        cannot be rendered.
        """
        if doc_id not in self._paths:
            raise KeyError(f"unknown document id {doc_id!r}")
        cached = self._memory.get(doc_id)
        if cached is not None:
            return cached
        if doc_id in self._failed:
            raise PDFLoadError(self._paths[doc_id], "render_failed", self._failed[doc_id])
        cache_file = self._cache_file(doc_id)
        image: Image.Image | None = None
        if cache_file is not None and cache_file.is_file():
            try:
                with Image.open(cache_file) as stored:
                    image = stored.convert("RGB")
            except OSError as exc:
                logger.warning("ignoring unreadable grid cache file %s: %s", cache_file, exc)
        if image is None or image.size != self.spec.image_size:
            image = self._render(doc_id)
            if cache_file is not None:
                tmp = cache_file.with_suffix(".tmp")
                image.save(tmp, format="PNG")
                tmp.replace(cache_file)
        self._memory[doc_id] = image
        return image

    def grids(self, doc_ids: Iterable[str]) -> list[Image.Image]:
        """Grid images of several documents, in the order given."""
        return [self.grid(d) for d in doc_ids]

    def prepare(self, *, progress: bool = False) -> list[str]:
        """Build every grid now (so failures show before training); returns the ids that failed."""
        ids = sorted(self._paths)
        bar: Any = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(ids), desc="grids", unit="doc")
        newly_failed: list[str] = []
        for doc_id in ids:
            if doc_id not in self._failed:
                try:
                    self.grid(doc_id)
                except PDFLoadError as exc:
                    self._failed[doc_id] = exc.reason
                    newly_failed.append(doc_id)
                    logger.warning("skipping document %s: %s", doc_id, exc)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        if not self.doc_ids:
            raise DocPCError("no document of the training set could be rendered")
        return newly_failed


@dataclass(frozen=True)
class TrainingBatch:
    """One micro-batch: queries, documents and their labelled relevance.

    ``relevance``: int64 ``[nq, nd]``, the grade of document j for query i (0 = not relevant;
    built from the labels for *every* pair, so shared positives count for every query).
    ``targets``: int64 ``[nq]``, the column of each query's paired positive, used only by the
    single-positive InfoNCE baseline (it treats every other column as a negative).
    """

    query_ids: tuple[str, ...]
    query_texts: tuple[str, ...]
    doc_ids: tuple[str, ...]
    relevance: torch.Tensor
    targets: torch.Tensor
    truncated: tuple[str, ...] = field(default=())

    @property
    def positive_mask(self) -> torch.Tensor:
        """Bool ``[nq, nd]``: True where the document is labelled relevant to the query."""
        return self.relevance > 0


class MultiPositiveBatchSampler:
    """Packs queries into batches that contain every positive of every query of the batch.

    ``queries``: training queries (with positives); ``doc_ids``: every usable document (the
    pool random negatives are drawn from). ``queries_per_batch``: at most this many queries
    per batch. ``max_docs_per_batch``: a batch is closed before adding a query whose positives
    would push the document count past this cap (a query with more positives than the cap on
    its own gets a rotating subset of them, with a warning). ``negatives_per_batch``: extra
    random documents that are not positive for any query of the batch. ``seed``: the order of
    queries and negatives depends only on (seed, epoch), so a resumed run replays the same batches.
    """

    def __init__(
        self,
        queries: Sequence[TrainingQuery],
        doc_ids: Sequence[str],
        *,
        queries_per_batch: int,
        max_docs_per_batch: int | None = None,
        negatives_per_batch: int = 0,
        seed: int = 0,
    ) -> None:
        if queries_per_batch < 1:
            raise ValueError(f"queries_per_batch must be >= 1, got {queries_per_batch}")
        if max_docs_per_batch is not None and max_docs_per_batch < 1:
            raise ValueError(f"max_docs_per_batch must be >= 1, got {max_docs_per_batch}")
        if negatives_per_batch < 0:
            raise ValueError(f"negatives_per_batch must be >= 0, got {negatives_per_batch}")
        self.doc_ids = sorted(set(doc_ids))
        known = set(self.doc_ids)
        self.queries = [q for q in queries if any(d in known for d in q.relevance)]
        if not self.queries:
            raise DocPCError("no training query has a positive document in the training set")
        self._relevance = {q.query_id: {d: g for d, g in q.relevance.items() if d in known} for q in self.queries}
        self.queries_per_batch = int(queries_per_batch)
        self.max_docs_per_batch = max_docs_per_batch
        self.negatives_per_batch = int(negatives_per_batch)
        self.seed = int(seed)
        self._warned_truncation = False

    def __len__(self) -> int:
        """Batches per epoch (packing can depend on the epoch's order; this is epoch 0's count)."""
        return len(self.batches(0))

    def batches(self, epoch: int) -> list[TrainingBatch]:
        """The batches of one epoch, deterministic in (seed, epoch)."""
        import torch

        rng = random.Random(f"{self.seed}:{epoch}")
        order = list(self.queries)
        rng.shuffle(order)
        groups: list[list[TrainingQuery]] = []
        current: list[TrainingQuery] = []
        current_docs: set[str] = set()
        cap = self.max_docs_per_batch
        for query in order:
            positives = set(self._relevance[query.query_id])
            union = current_docs | positives
            if current and (len(current) >= self.queries_per_batch or (cap is not None and len(union) > cap)):
                groups.append(current)
                current, current_docs = [], set()
                union = set(positives)
            current.append(query)
            current_docs = union
        if current:
            groups.append(current)

        out: list[TrainingBatch] = []
        for group in groups:
            doc_order: list[str] = []
            seen: set[str] = set()
            truncated: list[str] = []
            for query in group:
                positives = [d for d in query.positives if d in self._relevance[query.query_id]]
                if cap is not None and len(positives) > cap:
                    start = (epoch * cap) % len(positives)
                    positives = (positives[start:] + positives[:start])[:cap]
                    truncated.append(query.query_id)
                for d in positives:
                    if d not in seen:
                        seen.add(d)
                        doc_order.append(d)
            if truncated and not self._warned_truncation:
                logger.warning(
                    "queries %s have more positives than max_docs_per_batch=%s; each epoch uses a rotating subset",
                    ", ".join(truncated[:5]), cap,
                )
                self._warned_truncation = True
            pool = [d for d in self.doc_ids if d not in seen]
            room = self.negatives_per_batch
            if cap is not None:
                room = min(room, max(0, cap - len(doc_order)))
            negatives = sorted(rng.sample(pool, min(room, len(pool)))) if room and pool else []
            doc_order.extend(negatives)
            column = {d: j for j, d in enumerate(doc_order)}
            relevance = torch.zeros((len(group), len(doc_order)), dtype=torch.long)
            targets = torch.full((len(group),), -100, dtype=torch.long)
            for i, query in enumerate(group):
                labels = self._relevance[query.query_id]
                for d, grade in labels.items():
                    if d in column:
                        relevance[i, column[d]] = grade
                # Pair each query with one positive for the single-positive baseline; rotate by epoch.
                present = [d for d in query.positives if d in column and d in labels]
                if present:
                    targets[i] = column[present[epoch % len(present)]]
            out.append(
                TrainingBatch(
                    query_ids=tuple(q.query_id for q in group),
                    query_texts=tuple(q.text for q in group),
                    doc_ids=tuple(doc_order),
                    relevance=relevance,
                    targets=targets,
                    truncated=tuple(truncated),
                )
            )
        return out

    def steps_per_epoch(self, epoch: int, accumulation: int = 1) -> int:
        """Optimiser steps in ``epoch`` with ``accumulation`` micro-batches per step (the last may be short)."""
        if accumulation < 1:
            raise ValueError(f"accumulation must be >= 1, got {accumulation}")
        return math.ceil(len(self.batches(epoch)) / accumulation)
