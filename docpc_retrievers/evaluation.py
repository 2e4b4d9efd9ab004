"""Evaluate retrieval systems on a labelled corpus: quality, efficiency and per-query outcome tables.

Why: the method's claims are two tables, quality (NDCG@5 per domain) and
efficiency (images, vectors, bytes, time). :func:`run_evaluation` produces
both, in the same form, for any labelled corpus (see :mod:`labels`), so the
claims can be reproduced or refuted with one command (``docpc eval``).

System specs (strings; see :func:`parse_system`):

* ``grid:STRATEGY:K[:ROWSxCOLS]``: DocPC, K selected pages composed into one grid per document.
* ``page:all[:AGG]`` / ``page:STRATEGY:K[:AGG]``: page-level baseline, each page encoded on
  its own, page scores aggregated by ``max`` (MaxP), ``mean`` or ``sum``. Needs the core's
  page mode; refused with :class:`UnsupportedSystemError` when the core lacks it.
* ``rerank:STRATEGY:K[:TOPN]``: grid first stage, then the top N (default 20) reranked from
  full-resolution pages. Needs the core's reranking; refused likewise when absent.
* ``bm25:all`` / ``bm25:selected:STRATEGY:K``: BM25 (rank-bm25 ``BM25Okapi``) over the PDF text
  layer of every page, or of the pages the strategy selects.
* ``random[:SEED]``: a seeded random ranking (a sanity floor).

Every system sees the same documents and queries. Visual indexes live in
``OUT/indexes/<settings>--<model>`` and are reused by later runs with the
same settings and model (unchanged PDFs are skipped; documents no longer in
the corpus are deleted from the index). Index doc ids (content hashes) are
mapped back to dataset ids through the result's source path, and to every
dataset id whose PDF has the same bytes.

Timing: encode seconds are measured around ``encoder.encode_images`` (a thin
proxy encoder), insert seconds around ``store.add``; total indexing seconds
is the wall time of ``add_pdfs`` (render + compose + encode + insert + grid
previews). A reused index reports the timings recorded when it was built.
Bytes on disk exclude the grid preview PNGs and the rerank page cache (kept
for display and reranking; reported separately in the JSON).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import math
import os
import random
import re
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .labels import LabelledCorpus, LabelledQuery
from .metrics import METRICS, EvaluationResult, evaluate_run, metric_name, rank_documents
from .selection import STRATEGIES
from .sources import document_id

__all__ = [
    "AGGREGATIONS",
    "EvaluationReport",
    "IndexStats",
    "SystemResult",
    "SystemSpec",
    "SystemSpecError",
    "TimedEncoder",
    "UnsupportedSystemError",
    "core_supports",
    "expected_random_metric",
    "parse_system",
    "run_evaluation",
    "timed_index_build",
    "tokenize",
]

logger = logging.getLogger(__name__)

#: Page-score aggregations of page-level systems.
AGGREGATIONS: tuple[str, ...] = ("max", "mean", "sum")

_GRID_RE = re.compile(r"^(\d+)x(\d+)$")


class SystemSpecError(ValueError):
    """A system spec string that cannot be parsed."""


class UnsupportedSystemError(SystemSpecError):
    """A valid system spec that this installation's core cannot run (e.g. page mode before issue 4)."""


# ------------------------------------------------------------------------------------ specs


def core_supports(feature: str) -> bool:
    """Whether the installed core has ``page`` mode or ``rerank`` search (detected, never assumed)."""
    from . import index as index_module

    if feature == "page":
        names = {f.name for f in dataclasses.fields(index_module.IndexSettings)}
        return "mode" in names and "page" in getattr(index_module, "MODES", ())
    if feature == "rerank":
        return "rerank" in inspect.signature(index_module.DocPCIndex.search).parameters
    raise ValueError(f"unknown feature {feature!r}")


@dataclass(frozen=True)
class SystemSpec:
    """A parsed system: ``kind`` (grid, page, rerank, bm25, random) and its parameters."""

    text: str
    kind: str
    strategy: str | None = None
    pages: int | None = None
    grid: tuple[int, int] | None = None
    aggregate: str = "max"
    scope: str = "all"  # bm25: all pages or the selected ones
    top_n: int = 20
    seed: int = 0

    @property
    def slug(self) -> str:
        """A file-name-safe name of the spec (``grid:first:4`` -> ``grid-first-4``)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.text).strip("-")

    @property
    def visual(self) -> bool:
        return self.kind in ("grid", "page", "rerank")

    def index_key(self) -> str:
        """What the index depends on (search-time options such as aggregation or rerank excluded)."""
        if self.kind in ("grid", "rerank"):
            shape = f"-{self.grid[0]}x{self.grid[1]}" if self.grid else ""
            return f"grid-{self.strategy}-{self.pages}{shape}"
        if self.kind == "page":
            return "page-all" if self.pages is None else f"page-{self.strategy}-{self.pages}"
        if self.kind == "bm25":
            return "bm25-all" if self.scope == "all" else f"bm25-{self.strategy}-{self.pages}"
        return self.slug


def _positive(text: str, what: str, spec: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise SystemSpecError(f"system {spec!r}: {what} must be a positive integer, got {text!r}")
    return int(text)


def _strategy(text: str, spec: str) -> str:
    if text not in STRATEGIES:
        raise SystemSpecError(f"system {spec!r}: unknown strategy {text!r}; choose one of {', '.join(STRATEGIES)}")
    return text


def parse_system(text: str) -> SystemSpec:
    """Parse a system spec string (module docstring lists the forms); raises SystemSpecError.

    ``page`` and ``rerank`` specs raise :class:`UnsupportedSystemError` when the
    installed core has no page mode / reranking (:func:`core_supports`).
    """
    spec = text.strip()
    parts = spec.split(":")
    kind = parts[0].lower()
    if kind == "grid":
        if len(parts) not in (3, 4):
            raise SystemSpecError(f"system {spec!r}: expected grid:STRATEGY:K[:ROWSxCOLS], e.g. grid:first:4")
        strategy, pages = _strategy(parts[1], spec), _positive(parts[2], "K", spec)
        grid = None
        if len(parts) == 4:
            m = _GRID_RE.match(parts[3])
            if not m or int(m[1]) < 1 or int(m[2]) < 1:
                raise SystemSpecError(f"system {spec!r}: grid shape must look like 2x2, got {parts[3]!r}")
            grid = (int(m[1]), int(m[2]))
            if grid[0] * grid[1] < pages:
                raise SystemSpecError(f"system {spec!r}: a {parts[3]} grid cannot hold {pages} pages")
        return SystemSpec(spec, "grid", strategy=strategy, pages=pages, grid=grid)
    if kind == "page":
        rest = parts[1:]
        aggregate = "max"
        if rest and rest[-1] in AGGREGATIONS:
            aggregate = rest.pop()
        if rest == ["all"]:
            parsed = SystemSpec(spec, "page", strategy="first", pages=None, aggregate=aggregate)
        elif len(rest) == 2:
            parsed = SystemSpec(
                spec, "page", strategy=_strategy(rest[0], spec), pages=_positive(rest[1], "K", spec), aggregate=aggregate
            )
        else:
            raise SystemSpecError(
                f"system {spec!r}: expected page:all[:AGG] or page:STRATEGY:K[:AGG] with AGG one of {', '.join(AGGREGATIONS)}"
            )
        if not core_supports("page"):
            raise UnsupportedSystemError(
                f"system {spec!r}: page-level systems need the core's page mode (issue 4), which this "
                "installation of docpc-retrievers does not have yet"
            )
        return parsed
    if kind == "rerank":
        if len(parts) not in (3, 4):
            raise SystemSpecError(f"system {spec!r}: expected rerank:STRATEGY:K[:TOPN], e.g. rerank:first:4:20")
        strategy, pages = _strategy(parts[1], spec), _positive(parts[2], "K", spec)
        top_n = _positive(parts[3], "TOPN", spec) if len(parts) == 4 else 20
        if not core_supports("rerank"):
            raise UnsupportedSystemError(
                f"system {spec!r}: grid-then-page reranking needs the core's rerank search (issue 4), which this "
                "installation of docpc-retrievers does not have yet"
            )
        return SystemSpec(spec, "rerank", strategy=strategy, pages=pages, top_n=top_n)
    if kind == "bm25":
        if parts[1:] == ["all"]:
            return SystemSpec(spec, "bm25", scope="all")
        if len(parts) == 4 and parts[1] == "selected":
            return SystemSpec(
                spec, "bm25", scope="selected", strategy=_strategy(parts[2], spec), pages=_positive(parts[3], "K", spec)
            )
        raise SystemSpecError(f"system {spec!r}: expected bm25:all or bm25:selected:STRATEGY:K")
    if kind == "random":
        if len(parts) == 1:
            return SystemSpec(spec, "random")
        if len(parts) == 2 and parts[1].isdigit():
            return SystemSpec(spec, "random", seed=int(parts[1]))
        raise SystemSpecError(f"system {spec!r}: expected random or random:SEED")
    raise SystemSpecError(
        f"unknown system {spec!r}; expected grid:STRATEGY:K, page:all, page:STRATEGY:K, rerank:STRATEGY:K, "
        "bm25:all, bm25:selected:STRATEGY:K or random"
    )


# ------------------------------------------------------------------------------------ timing


class TimedEncoder:
    """A thin proxy around an encoder that times and counts image and query encoding.

    Why: the efficiency table separates encode seconds from insert seconds
    without touching the index code; pass it as ``DocPCIndex(encoder=...)``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.images = 0
        self.encode_s = 0.0
        self.queries = 0
        self.query_s = 0.0

    def encode_images(self, images: Sequence[Any], *, batch_size: int | None = None) -> list[Any]:
        start = time.perf_counter()
        try:
            return self.inner.encode_images(images, batch_size=batch_size)
        finally:
            self.encode_s += time.perf_counter() - start
            self.images += len(images)

    def encode_images_with_info(self, images: Sequence[Any], *, batch_size: int | None = None) -> list[Any]:
        start = time.perf_counter()
        try:
            return self.inner.encode_images_with_info(images, batch_size=batch_size)
        finally:
            self.encode_s += time.perf_counter() - start
            self.images += len(images)

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[Any]:
        start = time.perf_counter()
        try:
            return self.inner.encode_queries(queries, batch_size=batch_size)
        finally:
            self.query_s += time.perf_counter() - start
            self.queries += len(queries)

    def settings(self) -> dict[str, Any]:
        return self.inner.settings()

    def reset(self) -> None:
        self.images, self.encode_s, self.queries, self.query_s = 0, 0.0, 0, 0.0

    def __getattr__(self, name: str) -> Any:  # everything else (image_patch_grid, family, ...) passes through
        return getattr(self.inner, name)


@dataclass
class IndexStats:
    """One system's efficiency row: what indexing cost and what it stored (time in seconds)."""

    documents: int = 0
    images_encoded: int = 0
    vectors_stored: int = 0
    bytes_on_disk: int = 0
    encode_s: float = 0.0
    insert_s: float = 0.0
    total_index_s: float = 0.0
    query_p50_ms: float | None = None
    query_images_encoded: int = 0
    pages_total: int = 0
    bytes_excluded: int = 0
    reused: bool = False
    failures: list[dict[str, str]] = field(default_factory=list)

    @property
    def render_s(self) -> float:
        """Indexing time not spent encoding or inserting: opening, rendering, composing, previews."""
        return max(0.0, self.total_index_s - self.encode_s - self.insert_s)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["render_s"] = self.render_s
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IndexStats:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


_ACCUMULATED = ("documents", "images_encoded", "encode_s", "insert_s", "total_index_s", "pages_total")


def _load_stats(path: Path) -> IndexStats | None:
    try:
        return IndexStats.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def _save_stats(path: Path, stats: IndexStats) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stats.to_dict(), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def timed_index_build(
    paths: Sequence[Path],
    index_dir: Path,
    encoder: Any,
    settings: Any,
    *,
    batch_size: int = 8,
) -> tuple[Any, IndexStats]:
    """Index ``paths`` into ``index_dir`` (creating or extending it) and time encode vs insert.

    Returns the open, writable :class:`~docpc_retrievers.index.DocPCIndex` and
    the stats of *this* call (documents indexed now, their images, seconds).
    ``encoder`` is wrapped in a :class:`TimedEncoder` unless it already is one;
    ``store.add`` is timed through an instance-level wrapper.
    """
    from .index import DocPCIndex

    timed = encoder if isinstance(encoder, TimedEncoder) else TimedEncoder(encoder)
    timed.reset()
    index = DocPCIndex(index_dir, encoder=timed, settings=settings, writable=True)
    store = index.store
    original_add = store.add
    insert_s = 0.0

    def add(*args: Any, **kwargs: Any) -> Any:
        nonlocal insert_s
        start = time.perf_counter()
        try:
            return original_add(*args, **kwargs)
        finally:
            insert_s += time.perf_counter() - start

    store.add = add  # instance attribute shadows the method for this store only
    try:
        start = time.perf_counter()
        report = index.add_pdfs(paths, batch_size=batch_size)
        total = time.perf_counter() - start
    except BaseException:
        index.close()
        raise
    finally:
        del store.add
    stats = IndexStats(
        documents=len(report.indexed),
        images_encoded=timed.images,
        encode_s=timed.encode_s,
        insert_s=insert_s,
        total_index_s=total,
        failures=[f.to_dict() for f in report.failed],
    )
    timed.reset()
    return index, stats


# ------------------------------------------------------------------------------------ systems

_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in into is it its of on or that the their "
    "them these this those to was were what when where which who why with about".split()
)


def tokenize(text: str) -> list[str]:
    """BM25 tokens: lower-cased alphanumeric runs, English stopwords removed, no stemming."""
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOPWORDS]


class _DocMap:
    """Dataset documents grouped by content id, and result sources mapped back to dataset ids."""

    def __init__(self, corpus: LabelledCorpus) -> None:
        self.by_content: dict[str, list[str]] = {}
        self.by_path: dict[str, str] = {}
        self.path_of: dict[str, Path] = {}
        for dataset_id, path in sorted(corpus.documents.items()):
            content = document_id(path)
            self.by_content.setdefault(content, []).append(dataset_id)
            self.by_path[str(Path(path).resolve())] = dataset_id
            self.path_of[content] = self.path_of.get(content, Path(path).resolve())
        dupes = {c: ids for c, ids in self.by_content.items() if len(ids) > 1}
        if dupes:
            logger.warning(
                "%d groups of dataset documents have identical bytes; each group is indexed once and "
                "every member gets the group's score (e.g. %s)", len(dupes), ", ".join(next(iter(dupes.values()))),
            )

    @property
    def unique_paths(self) -> list[Path]:
        return [self.path_of[c] for c in sorted(self.path_of)]

    def dataset_ids(self, content_id: str, source: str | None) -> list[str]:
        ids = list(self.by_content.get(content_id, []))
        if source is not None:
            by_source = self.by_path.get(str(Path(source).resolve()))
            if by_source is not None and by_source not in ids:
                ids.insert(0, by_source)
        return ids


class _System:
    """Base of the runnable systems: build (or reuse) the index, then answer queries."""

    def __init__(self, spec: SystemSpec, docs: _DocMap, workdir: Path) -> None:
        self.spec = spec
        self.docs = docs
        self.workdir = workdir

    def build(self) -> IndexStats:
        raise NotImplementedError

    def search(self, queries: Sequence[LabelledQuery], depth: int) -> tuple[dict[str, dict[str, float]], list[float]]:
        """Run per query id (dataset doc id -> score) and the per-query latencies in seconds."""
        run: dict[str, dict[str, float]] = {}
        latencies: list[float] = []
        for q in queries:
            start = time.perf_counter()
            hits = self._search_one(q.text, depth)
            latencies.append(time.perf_counter() - start)
            scores: dict[str, float] = {}
            for content_id, source, score in hits:
                for dataset_id in self.docs.dataset_ids(content_id, source):
                    scores.setdefault(dataset_id, score)
            run[q.query_id] = scores
        return run, latencies

    def _search_one(self, text: str, depth: int) -> list[tuple[str, str | None, float]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _VisualSystem(_System):
    def __init__(self, spec: SystemSpec, docs: _DocMap, workdir: Path, encoder: TimedEncoder, batch_size: int) -> None:
        super().__init__(spec, docs, workdir)
        self.encoder = encoder
        self.batch_size = batch_size
        self.index: Any = None

    def _settings(self) -> Any:
        from .index import IndexSettings

        s = self.spec
        if s.kind == "page":
            return IndexSettings(mode="page", strategy=s.strategy or "first", pages=s.pages)  # type: ignore[call-arg]
        return IndexSettings(strategy=s.strategy or "first", pages=s.pages or 4, grid=s.grid)

    def build(self) -> IndexStats:
        stats_path = self.workdir.with_name(self.workdir.name + ".build.json")
        previous = _load_stats(stats_path) if self.workdir.exists() else None
        self.index, now = timed_index_build(
            self.docs.unique_paths, self.workdir, self.encoder, self._settings(), batch_size=self.batch_size
        )
        wanted = set(self.docs.by_content)
        stale = [i for i in self.index.store.ids() if i not in wanted]
        if stale:
            logger.info("%s: deleting %d indexed documents that are no longer in the corpus", self.spec.text, len(stale))
            self.index.delete(stale)
        if previous is not None:
            stats = previous
            stats.reused = now.documents == 0
            if not stats.reused:  # documents were added: their cost adds to the recorded build
                for name in _ACCUMULATED:
                    setattr(stats, name, getattr(previous, name) + getattr(now, name))
        else:
            stats = now
        stats.failures = now.failures
        info = self.index.info()
        excluded = int(info.get("bytes_grid_images") or 0) + int(info.get("page_cache_bytes") or 0)
        stats.vectors_stored = int(info["vectors"])
        stats.bytes_on_disk = int(info["bytes_on_disk"]) - excluded
        stats.bytes_excluded = excluded
        stats.documents = int(info["documents"])
        _save_stats(stats_path, stats)
        return stats

    def _search_one(self, text: str, depth: int) -> list[tuple[str, str | None, float]]:
        kwargs: dict[str, Any] = {}
        if self.spec.kind == "page":
            kwargs["aggregate"] = self.spec.aggregate
        if self.spec.kind == "rerank":
            kwargs.update(rerank=True, rerank_top_n=self.spec.top_n)
        results = self.index.search(text, depth, **kwargs)
        return [(r.id, r.metadata.get("source", r.source), float(r.score)) for r in results]

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None


class _BM25System(_System):
    """BM25Okapi over the text layer; the tokenised texts are cached per content id and reused."""

    def build(self) -> IndexStats:
        from rank_bm25 import BM25Okapi

        from .pdf import open_pdf
        from .selection import select_document_pages

        cache_path = self.workdir / "tokens.json"
        cached: dict[str, list[str]] = {}
        recorded: dict[str, Any] = {}
        if cache_path.exists():
            try:
                payload = json.loads(cache_path.read_text(encoding="utf-8"))
                cached, recorded = payload["tokens"], payload.get("stats", {})
            except (OSError, ValueError, KeyError):
                logger.warning("%s: unreadable BM25 cache, rebuilding it", cache_path)
        stats = IndexStats.from_dict(recorded) if recorded else IndexStats()
        new_docs = 0
        extract_s = 0.0
        failures: list[dict[str, str]] = []
        tokens: dict[str, list[str]] = {}
        for content_id in sorted(self.docs.path_of):
            if content_id in cached:
                tokens[content_id] = cached[content_id]
                continue
            path = self.docs.path_of[content_id]
            start = time.perf_counter()
            try:
                with open_pdf(path) as doc:
                    if self.spec.scope == "all":
                        pages = list(range(doc.page_count))
                    else:
                        pages = select_document_pages(doc, self.spec.pages or 4, self.spec.strategy or "first")
                    tokens[content_id] = tokenize("\n".join(doc.text(pages)))
                    stats.pages_total += doc.page_count
            except Exception as exc:  # a broken PDF must not stop the evaluation
                logger.warning("%s: cannot read %s: %s", self.spec.text, path, exc)
                failures.append({"path": str(path), "reason": str(exc), "kind": "error"})
                continue
            finally:
                extract_s += time.perf_counter() - start
            new_docs += 1
        start = time.perf_counter()
        self.ids = sorted(tokens)
        self.bm25 = BM25Okapi([tokens[i] or ["\u0000"] for i in self.ids]) if self.ids else None
        build_s = time.perf_counter() - start
        if new_docs or not recorded:
            stats.encode_s += extract_s
            stats.insert_s += build_s
            stats.total_index_s += extract_s + build_s
            stats.documents = len(self.ids)
            self.workdir.mkdir(parents=True, exist_ok=True)
            payload = {"tokens": tokens, "stats": stats.to_dict()}
            tmp = cache_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(payload, sort_keys=True), encoding="utf-8")
            os.replace(tmp, cache_path)
        stats.reused = new_docs == 0 and bool(recorded)
        stats.failures = failures
        stats.bytes_on_disk = cache_path.stat().st_size if cache_path.exists() else 0
        return stats

    def _search_one(self, text: str, depth: int) -> list[tuple[str, str | None, float]]:
        if self.bm25 is None:
            return []
        scores = self.bm25.get_scores(tokenize(text))
        by_id = {cid: float(s) for cid, s in zip(self.ids, scores)}
        return [(cid, None, by_id[cid]) for cid in rank_documents(by_id)[:depth]]


class _RandomSystem(_System):
    """A seeded random ranking of every document: the floor any real system must clear."""

    def build(self) -> IndexStats:
        return IndexStats(documents=len(self.docs.by_content))

    def _search_one(self, text: str, depth: int) -> list[tuple[str, str | None, float]]:
        rng = random.Random(f"{self.spec.seed}:{text}")
        ids = sorted(self.docs.by_content)
        rng.shuffle(ids)
        return [(cid, None, float(len(ids) - i)) for i, cid in enumerate(ids[:depth])]


def expected_random_metric(
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    metric: str = "ndcg",
    k: int = 5,
    *,
    trials: int = 200,
    seed: int = 0,
) -> float:
    """Expected mean ``metric@k`` of a uniformly random ranking, estimated by ``trials`` shuffles."""
    rng = random.Random(seed)
    ids = list(doc_ids)
    total = 0.0
    for _ in range(trials):
        run = {}
        for qid in qrels:
            rng.shuffle(ids)
            run[qid] = list(ids)
        total += evaluate_run(qrels, run, metrics=(metric,), ks=(k,)).mean[metric_name(metric, k)]
    return total / trials


# ------------------------------------------------------------------------------------ report


@dataclass
class SystemResult:
    """One system's outcome: its spec, efficiency stats, run and metric values."""

    spec: SystemSpec
    stats: IndexStats
    run: dict[str, dict[str, float]]
    metrics: EvaluationResult

    def successes(self, qrels: Mapping[str, Mapping[str, int]], k: int) -> set[str]:
        """Queries with at least one positive in this system's top k."""
        out = set()
        for qid, rel in qrels.items():
            ranked = rank_documents(self.run.get(qid, {}))[:k]
            if any(rel.get(d, 0) > 0 for d in ranked):
                out.add(qid)
        return out


_EFFICIENCY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("images_encoded", "images encoded"),
    ("vectors_stored", "vectors stored"),
    ("bytes_on_disk", "bytes on disk"),
    ("encode_s", "encode s"),
    ("insert_s", "insert s"),
    ("total_index_s", "indexing s"),
    ("query_p50_ms", "query p50 ms"),
)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if key == "bytes_on_disk":
        return _human_bytes(float(value))
    if isinstance(value, float):
        return f"{value:.3f}" if key.endswith("_s") else f"{value:.1f}"
    return f"{value:,}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class EvaluationReport:
    """Everything ``docpc eval`` writes: per-system results plus the settings of the run."""

    dataset: str
    split: str
    model: str | None
    ks: tuple[int, ...]
    metric: str
    success_k: int
    queries: list[LabelledQuery]
    systems: list[SystemResult]

    @property
    def main_metric(self) -> str:
        return metric_name(self.metric, self.ks[0])

    def domains(self) -> list[str]:
        """Quality-table columns: the query domains (``other`` for untagged queries when some are tagged)."""
        tagged = sorted({q.domain for q in self.queries if q.domain})
        if not tagged:
            return ["all"]
        return tagged + (["other"] if any(q.domain is None for q in self.queries) else [])

    def _domain_queries(self, domain: str) -> list[str]:
        if domain == "all":
            return [q.query_id for q in self.queries]
        if domain == "other":
            return [q.query_id for q in self.queries if q.domain is None]
        return [q.query_id for q in self.queries if q.domain == domain]

    def quality(self) -> list[dict[str, Any]]:
        """Rows: system, main metric per domain, macro average over domains, mean over all queries."""
        rows = []
        for r in self.systems:
            per_domain = {d: r.metrics.mean_over(self._domain_queries(d), self.main_metric) for d in self.domains()}
            rows.append(
                {
                    "system": r.spec.text,
                    "domains": per_domain,
                    "average": math.fsum(per_domain.values()) / len(per_domain),
                    "all_queries": r.metrics.mean[self.main_metric],
                }
            )
        return rows

    def reference(self) -> SystemResult:
        """The system ratios are relative to: the first page-level one, else the first system."""
        return next((r for r in self.systems if r.spec.kind == "page"), self.systems[0])

    def efficiency(self) -> list[dict[str, Any]]:
        ref = self.reference().stats
        rows = []
        for r in self.systems:
            values = {key: getattr(r.stats, key) for key, _ in _EFFICIENCY_COLUMNS}
            ratios: dict[str, float | None] = {}
            for key, _ in _EFFICIENCY_COLUMNS:
                base = getattr(ref, key)
                ratios[key] = values[key] / base if (values[key] is not None and base) else None
            rows.append({"system": r.spec.text, **values, "ratio": ratios, "reused": r.stats.reused})
        return rows

    def breakdown(self) -> dict[str, Any] | None:
        """Per-query outcomes of the first two systems: both / only A / only B / neither succeed."""
        if len(self.systems) < 2:
            return None
        a, b = self.systems[0], self.systems[1]
        qrels = {q.query_id: q.relevance for q in self.queries}
        sa, sb = a.successes(qrels, self.success_k), b.successes(qrels, self.success_k)
        everyone = [q.query_id for q in self.queries]
        groups = {
            "both": [q for q in everyone if q in sa and q in sb],
            "only_a": [q for q in everyone if q in sa and q not in sb],
            "only_b": [q for q in everyone if q in sb and q not in sa],
            "neither": [q for q in everyone if q not in sa and q not in sb],
        }
        return {
            "a": a.spec.text,
            "b": b.spec.text,
            "success": f"a positive in the top {self.success_k}",
            "counts": {k: len(v) for k, v in groups.items()},
            "queries": groups,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "model": self.model,
            "queries": len(self.queries),
            "metric": self.main_metric,
            "ks": list(self.ks),
            "conventions": {
                "missing_queries": "count as 0 and stay in the mean",
                "average": "macro mean over the domain columns",
                "ties": "score descending, then document id descending (trec_eval)",
                "bytes_on_disk": "index storage; grid preview PNGs and rerank page cache excluded",
            },
            "quality": self.quality(),
            "metrics": {r.spec.text: r.metrics.mean for r in self.systems},
            "efficiency": self.efficiency(),
            "efficiency_reference": self.reference().spec.text,
            "breakdown": self.breakdown(),
            "systems": [
                {"spec": r.spec.text, "stats": r.stats.to_dict(), "per_query": r.metrics.per_query} for r in self.systems
            ],
        }

    def to_markdown(self) -> str:
        domains = self.domains()
        out = [
            f"# Evaluation: {self.dataset} ({self.split})",
            "",
            f"{len(self.queries)} queries; model: {self.model or 'n/a'}. Missing results count as 0; "
            "ties are broken by document id descending (trec_eval).",
            "",
            f"## Quality ({self.main_metric})",
            "",
            _table(
                ["system", *domains, "average"],
                [[row["system"], *(f"{row['domains'][d]:.3f}" for d in domains), f"{row['average']:.3f}"] for row in self.quality()],
            ),
            "",
            "Average: mean of the domain columns.",
            "",
            "## All metrics (mean over queries)",
            "",
        ]
        names = [metric_name(m, k) for m in METRICS for k in self.ks]
        out.append(_table(["system", *names], [[r.spec.text, *(f"{r.metrics.mean[n]:.3f}" for n in names)] for r in self.systems]))
        ref = self.reference().spec.text
        eff = self.efficiency()
        out += ["", "## Efficiency", ""]
        out.append(
            _table(
                ["system", *(label for _, label in _EFFICIENCY_COLUMNS)],
                [[row["system"] + (" (reused)" if row["reused"] else ""), *(_fmt(k, row[k]) for k, _ in _EFFICIENCY_COLUMNS)] for row in eff],
            )
        )
        out += ["", f"Relative to `{ref}`:", ""]
        out.append(
            _table(
                ["system", *(label for _, label in _EFFICIENCY_COLUMNS)],
                [
                    [row["system"], *("n/a" if row["ratio"][k] is None else f"{row['ratio'][k]:.3f}x" for k, _ in _EFFICIENCY_COLUMNS)]
                    for row in eff
                ],
            )
        )
        out += [
            "",
            "Bytes exclude grid preview PNGs and the rerank page cache. A reused index reports the timings "
            "recorded when it was built.",
        ]
        b = self.breakdown()
        if b is not None:
            c = b["counts"]
            out += [
                "",
                f"## Per-query outcomes: A = `{b['a']}`, B = `{b['b']}` (success: {b['success']})",
                "",
                _table(["outcome", "queries"], [["both succeed", str(c["both"])], ["only A", str(c["only_a"])],
                                                ["only B", str(c["only_b"])], ["both fail", str(c["neither"])]]),
            ]
        failed = [(r.spec.text, f) for r in self.systems for f in r.stats.failures]
        if failed:
            out += ["", "## Documents that could not be indexed", ""]
            out += [f"- `{spec}`: {f['reason']}" for spec, f in failed]
        return "\n".join(out) + "\n"

    def write(self, out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write ``report.md``, ``report.json`` and ``runs/<system>.trec`` (TREC run format)."""
        out = Path(out_dir)
        (out / "runs").mkdir(parents=True, exist_ok=True)
        md, js = out / "report.md", out / "report.json"
        md.write_text(self.to_markdown(), encoding="utf-8")
        js.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for r in self.systems:
            lines = []
            for q in self.queries:
                scores = r.run.get(q.query_id, {})
                for rank, doc in enumerate(rank_documents(scores), 1):
                    lines.append(f"{q.query_id} Q0 {doc} {rank} {scores[doc]:.6f} {r.spec.slug}")
            (out / "runs" / f"{r.spec.slug}.trec").write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
        return md, js


# ------------------------------------------------------------------------------------ runner


def _model_tag(encoder: Any) -> str:
    """A short, stable folder suffix naming the encoder and everything that changes its embeddings."""
    settings = json.dumps(encoder.settings(), sort_keys=True, default=str)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(encoder.model_id)).name).strip("-")[:40] or "model"
    return f"{name}-{hashlib.sha256(settings.encode()).hexdigest()[:8]}"


def run_evaluation(
    corpus: LabelledCorpus,
    systems: Sequence[str | SystemSpec],
    *,
    out_dir: str | os.PathLike[str],
    model: str | os.PathLike[str] | None = None,
    encoder: Any = None,
    encoder_kwargs: Mapping[str, Any] | None = None,
    ks: Sequence[int] = (5, 10),
    metric: str = "ndcg",
    success_k: int = 5,
    split: str = "test",
    batch_size: int = 8,
    write: bool = True,
) -> EvaluationReport:
    """Run every system over the same corpus and queries; write and return the report.

    Visual systems need ``encoder`` (any :class:`~docpc_retrievers.encoders.Encoder`)
    or ``model`` (a checkpoint id or path, loaded once with ``encoder_kwargs``).
    Results are retrieved to depth ``max(ks + [success_k])``.
    """
    specs = [s if isinstance(s, SystemSpec) else parse_system(s) for s in systems]
    if not specs:
        raise SystemSpecError("no systems to evaluate")
    if len({s.text for s in specs}) != len(specs):
        raise SystemSpecError("the same system is listed twice")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    ks = tuple(ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError("ks must be positive integers")
    out = Path(out_dir)
    docs = _DocMap(corpus)
    depth = max([*ks, success_k])
    qrels = corpus.qrels()
    timed: TimedEncoder | None = None
    if any(s.visual for s in specs):
        if encoder is None:
            if model is None:
                raise SystemSpecError("visual systems (grid/page/rerank) need a model (--model ID|PATH)")
            from .encoders import ColPaliEncoder

            encoder = ColPaliEncoder(model, **dict(encoder_kwargs or {}))
        timed = encoder if isinstance(encoder, TimedEncoder) else TimedEncoder(encoder)
    results: list[SystemResult] = []
    for spec in specs:
        if spec.visual:
            assert timed is not None
            workdir = out / "indexes" / f"{spec.index_key()}--{_model_tag(timed)}"
            system: _System = _VisualSystem(spec, docs, workdir, timed, batch_size)
        elif spec.kind == "bm25":
            system = _BM25System(spec, docs, out / "indexes" / spec.index_key())
        else:
            system = _RandomSystem(spec, docs, out / "indexes" / spec.index_key())
        logger.info("%s: indexing %d documents", spec.text, len(docs.unique_paths))
        try:
            stats = system.build()
            if timed is not None:
                timed.reset()
            run, latencies = system.search(corpus.queries, depth)
            if timed is not None:
                stats.query_images_encoded = timed.images
                timed.reset()
        finally:
            system.close()
        stats.query_p50_ms = statistics.median(latencies) * 1000 if latencies else None
        evaluation = evaluate_run(qrels, run, ks=ks)
        logger.info("%s: %s = %.4f", spec.text, metric_name(metric, ks[0]), evaluation.mean[metric_name(metric, ks[0])])
        results.append(SystemResult(spec, stats, run, evaluation))
    model_name = None if timed is None else str(timed.model_id)
    report = EvaluationReport(
        dataset=str(corpus.root),
        split=split,
        model=model_name,
        ks=ks,
        metric=metric,
        success_k=success_k,
        queries=list(corpus.queries),
        systems=results,
    )
    if write:
        report.write(out)
    return report
