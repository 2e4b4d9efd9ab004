"""Ranking metrics with graded, multi-positive judgements, following trec_eval's conventions.

Why: the method's claims are NDCG@5 tables; the numbers must match what
``trec_eval`` / ``pytrec_eval`` would print for the same run, so results are
comparable with published ones. Conventions (identical to trec_eval 9.x):

* **Ranking of a scored run**: score descending, ties broken by document id
  descending (trec_eval sorts docnos in reverse ``strcmp`` order on ties).
  A run given as a ranked list of ids is used in the order given.
* **Relevance**: a grade > 0 is relevant; grades <= 0 (judged non-relevant)
  and unjudged documents have gain 0.
* **NDCG@k** (trec_eval ``ndcg_cut_k``): linear gain (the grade itself),
  discount ``1 / log2(rank + 1)`` with 1-based rank; the ideal DCG sorts all
  judged grades > 0 descending and cuts at k; an ideal DCG of 0 (a query with
  no positives) gives 0.
* **Recall@k** (``recall_k``): relevant in the top k / all relevant; 0 when
  the query has no relevant document.
* **Precision@k** (``P_k``): relevant in the top k / k (always k, even when
  fewer than k documents were returned).
* **MRR@k**: 1 / rank of the first relevant document within the top k, else 0
  (trec_eval ``recip_rank`` computed on the run cut at k).
* **Queries missing from a run count as 0** on every metric and stay in the
  mean (unlike BEIR/MTEB, which drop them and so inflate the mean; trec_eval
  without ``-c`` also drops them). Queries in a run but not in the qrels are
  ignored. The mean is over all queries of the qrels, including those with no
  positives (they score 0, as trec_eval counts them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "METRICS",
    "EvaluationResult",
    "evaluate_run",
    "metric_name",
    "mrr_at_k",
    "ndcg_at_k",
    "parse_metric_name",
    "precision_at_k",
    "rank_documents",
    "recall_at_k",
]

#: Metric families understood by :func:`evaluate_run` (names used in results: ``ndcg@5``, ...).
METRICS: tuple[str, ...] = ("ndcg", "recall", "mrr", "precision")

#: A run for one query: doc id -> score (ranked trec_eval's way) or doc ids already ranked.
QueryRun = Mapping[str, float] | Sequence[str]


def rank_documents(scores: Mapping[str, float]) -> list[str]:
    """Doc ids of a scored run in trec_eval order: score descending, then doc id descending."""
    return sorted(scores, key=lambda d: (scores[d], d), reverse=True)


def _ranking(run: QueryRun) -> list[str]:
    if isinstance(run, Mapping):
        return rank_documents(run)
    if isinstance(run, str):
        raise TypeError("a query's run must be a mapping doc id -> score or a sequence of doc ids, not a string")
    ranked = list(run)
    if len(set(ranked)) != len(ranked):
        raise ValueError("a ranked run lists the same document twice")
    return ranked


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """NDCG@k of ranked doc ids (trec_eval ``ndcg_cut``: linear gain, 1/log2(rank+1), ideal 0 -> 0)."""
    _check_k(k)
    dcg = 0.0
    for i, doc in enumerate(ranking[:k]):
        gain = relevance.get(doc, 0)
        if gain > 0:
            dcg += gain / math.log2(i + 2)
    ideal = sorted((g for g in relevance.values() if g > 0), reverse=True)[:k]
    idcg = 0.0
    for i, gain in enumerate(ideal):
        idcg += gain / math.log2(i + 2)
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """Relevant documents in the top k over all relevant ones (0 when there are none)."""
    _check_k(k)
    n_rel = sum(1 for g in relevance.values() if g > 0)
    if n_rel == 0:
        return 0.0
    return sum(1 for doc in ranking[:k] if relevance.get(doc, 0) > 0) / n_rel


def precision_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """Relevant documents in the top k over k (trec_eval ``P_k``: always divided by k)."""
    _check_k(k)
    return sum(1 for doc in ranking[:k] if relevance.get(doc, 0) > 0) / k


def mrr_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top k, else 0."""
    _check_k(k)
    for i, doc in enumerate(ranking[:k]):
        if relevance.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


_FUNCTIONS = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k, "precision": precision_at_k}


def metric_name(metric: str, k: int) -> str:
    """The result key of a metric at a cut-off, e.g. ``ndcg@5``."""
    return f"{metric}@{k}"


def parse_metric_name(name: str) -> tuple[str, int]:
    """``"ndcg@5"`` -> ``("ndcg", 5)``; raises ValueError for unknown metrics."""
    metric, sep, cut = name.partition("@")
    if not sep or metric not in _FUNCTIONS or not cut.isdigit() or int(cut) < 1:
        raise ValueError(f"unknown metric {name!r}; expected one of {', '.join(METRICS)} followed by @k, e.g. ndcg@5")
    return metric, int(cut)


@dataclass(frozen=True)
class EvaluationResult:
    """Per-query values (query id -> {"ndcg@5": ...}), their means, and which queries the run lacked."""

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]
    missing: list[str] = field(default_factory=list)

    def mean_over(self, query_ids: Iterable[str], name: str) -> float:
        """Mean of one metric over a subset of queries (e.g. one domain); 0 for an empty subset."""
        values = [self.per_query[q][name] for q in query_ids]
        return math.fsum(values) / len(values) if values else 0.0


def evaluate_run(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, QueryRun],
    metrics: Sequence[str] = METRICS,
    ks: Sequence[int] = (5, 10),
) -> EvaluationResult:
    """Evaluate a run against graded qrels: per-query values and their means.

    ``qrels``: query id -> {doc id: grade}; ``run``: query id -> {doc id:
    score} (ranked score-descending, ties by doc id descending) or a ranked
    list of doc ids. Every query of ``qrels`` is evaluated; **a query missing
    from the run scores 0 on every metric and counts in the mean** (listed in
    ``missing``). Queries of the run absent from ``qrels`` are ignored.
    """
    unknown = [m for m in metrics if m not in _FUNCTIONS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(METRICS)}")
    for k in ks:
        _check_k(k)
    names = [(m, k, metric_name(m, k)) for m in metrics for k in ks]
    per_query: dict[str, dict[str, float]] = {}
    missing: list[str] = []
    for qid, relevance in qrels.items():
        if qid in run:
            ranking = _ranking(run[qid])
        else:
            ranking = []
            missing.append(qid)
        per_query[qid] = {name: _FUNCTIONS[m](ranking, relevance, k) for m, k, name in names}
    n = len(per_query)
    mean = {name: (math.fsum(v[name] for v in per_query.values()) / n if n else 0.0) for _, _, name in names}
    return EvaluationResult(per_query=per_query, mean=mean, missing=missing)
