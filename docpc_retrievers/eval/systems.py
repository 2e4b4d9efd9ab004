"""The systems an evaluation compares: visual indexes (grid, page, rerank), BM25 and a random floor."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docpc_retrievers.eval.corpus import LabelledCorpus, LabelledQuery
from docpc_retrievers.eval.metrics import evaluate_run, metric_name, rank_documents
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.eval.specs import SystemSpec
from docpc_retrievers.eval.timing import ACCUMULATED_STATS, IndexStats, TimedEncoder, load_stats, save_stats, timed_index_build
from docpc_retrievers.scoring.bm25 import tokenize

logger = logging.getLogger(__name__)

class DocumentMap:
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


class System:
    """Base of the runnable systems: build (or reuse) the index, then answer queries."""

    def __init__(self, spec: SystemSpec, docs: DocumentMap, workdir: Path) -> None:
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


class VisualSystem(System):
    def __init__(self, spec: SystemSpec, docs: DocumentMap, workdir: Path, encoder: TimedEncoder, batch_size: int) -> None:
        super().__init__(spec, docs, workdir)
        self.encoder = encoder
        self.batch_size = batch_size
        self.index: Any = None

    def _settings(self) -> Any:
        from docpc_retrievers.index import IndexSettings

        s = self.spec
        if s.kind == "page":
            return IndexSettings(mode="page", strategy=s.strategy or "first", pages=s.pages)  # type: ignore[call-arg]
        return IndexSettings(strategy=s.strategy or "first", pages=s.pages or 4, grid=s.grid)

    def build(self) -> IndexStats:
        stats_path = self.workdir.with_name(self.workdir.name + ".build.json")
        previous = load_stats(stats_path) if self.workdir.exists() else None
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
                for name in ACCUMULATED_STATS:
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
        save_stats(stats_path, stats)
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


class BM25System(System):
    """BM25Okapi over the text layer; the tokenised texts are cached per content id and reused."""

    def build(self) -> IndexStats:
        try:
            from rank_bm25 import BM25Okapi
        except ImportError as exc:
            raise ImportError('BM25 systems need the [eval] extra: pip install "docpc-retrievers[eval]"') from exc

        from docpc_retrievers.documents.pdf import open_pdf
        from docpc_retrievers.documents.selection import select_document_pages

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


class RandomSystem(System):
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
