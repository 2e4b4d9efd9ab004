"""Run an evaluation: every system over the same corpus and queries (``docpc eval``).

Why: the method's claims are two tables, quality (NDCG@5 per domain) and
efficiency (images, vectors, bytes, time). :func:`run_evaluation` produces
both, in the same form, for any labelled corpus (see :mod:`docpc_retrievers.eval.corpus`), so the
claims can be reproduced or refuted with one command (``docpc eval``).

System specs (strings; see :func:`parse_system`):

* ``grid:STRATEGY:K[:ROWSxCOLS]``: DocPC, K selected pages composed into one grid per document.
* ``page:all[:AGG]`` / ``page:STRATEGY:K[:AGG]``: page-level baseline, each page encoded on
  its own, page scores aggregated by ``max`` (MaxP), ``mean`` or ``sum``.
* ``rerank:STRATEGY:K[:TOPN]``: grid first stage, then the top N (default 20) reranked from
  full-resolution pages.
* ``bm25:all`` / ``bm25:selected:STRATEGY:K``: BM25 (rank-bm25 ``BM25Okapi``) over the PDF text
  layer of every page, or of the pages the strategy selects.
* ``random[:SEED]``: a seeded random ranking (a sanity floor).

Every system sees the same documents and queries. Visual indexes live in
``OUT/indexes/<settings>--<model>`` and are reused by later runs with the
same settings and model (unchanged PDFs are skipped; documents no longer in
the corpus are deleted from the index). Index doc ids (content hashes) are
mapped back to dataset ids through the result's source path, and to every
dataset id whose PDF has the same bytes.

Timing comes from the indexing report (``IndexReport.timings``): encode
seconds, commit seconds (store writes and grid previews) and the wall time of
``add_pdfs`` (render + compose + encode + commit). A reused index reports the timings recorded when it was built.
Bytes on disk exclude the grid preview PNGs and the rerank page cache (kept
for display and reranking; reported separately in the JSON).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docpc_retrievers.eval.corpus import LabelledCorpus
from docpc_retrievers.eval.metrics import METRICS, evaluate_run, metric_name
from docpc_retrievers.eval.report import EvaluationReport, SystemResult
from docpc_retrievers.eval.specs import SystemSpec, SystemSpecError, parse_system
from docpc_retrievers.eval.systems import BM25System, DocumentMap, RandomSystem, System, VisualSystem
from docpc_retrievers.eval.timing import TimedEncoder

logger = logging.getLogger(__name__)

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
    docs = DocumentMap(corpus)
    depth = max([*ks, success_k])
    qrels = corpus.qrels()
    timed: TimedEncoder | None = None
    if any(s.visual for s in specs):
        if encoder is None:
            if model is None:
                raise SystemSpecError("visual systems (grid/page/rerank) need a model (--model ID|PATH)")
            from docpc_retrievers.encoders import ColPaliEncoder

            encoder = ColPaliEncoder(model, **dict(encoder_kwargs or {}))
        timed = encoder if isinstance(encoder, TimedEncoder) else TimedEncoder(encoder)
    results: list[SystemResult] = []
    for spec in specs:
        if spec.visual:
            assert timed is not None
            workdir = out / "indexes" / f"{spec.index_key()}--{_model_tag(timed)}"
            system: System = VisualSystem(spec, docs, workdir, timed, batch_size)
        elif spec.kind == "bm25":
            system = BM25System(spec, docs, out / "indexes" / spec.index_key())
        else:
            system = RandomSystem(spec, docs, out / "indexes" / spec.index_key())
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
