"""Held-out evaluation during and after training: exhaustive MaxSim over a dataset's grids, trec_eval metrics."""

from __future__ import annotations

from typing import Any

from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import DocPCError
from docpc_retrievers.scoring.maxsim import maxsim_reference
from docpc_retrievers.training.data import GridDataset

__all__ = ["evaluate_ndcg"]


def evaluate_ndcg(
    encoder: ColPaliEncoder,
    dataset: GridDataset,
    *,
    k: int = 5,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """NDCG@k (and recall@10) of ``encoder`` ranking every document of ``dataset`` for each of its queries.

    Documents are the dataset's grids (exhaustive MaxSim, no index); metrics follow trec_eval
    (:func:`docpc_retrievers.eval.metrics.evaluate_run`: linear gains, ties by doc id descending,
    mean over all labelled queries). Returns ``{"ndcg@k": mean, "recall@10": mean (the share of
    each query's positives in its top 10), "per_query": {qid: NDCG@k}, "queries": n, "documents": n}``.
    """
    from docpc_retrievers.eval.metrics import evaluate_run

    doc_ids = dataset.doc_ids
    queries = dataset.queries
    if not queries:
        raise DocPCError("the evaluation set has no query with a positive document")
    doc_embeddings = encoder.encode_images(dataset.grids(doc_ids), batch_size=batch_size)
    query_embeddings = encoder.encode_queries([q.text for q in queries], batch_size=batch_size)
    run = {
        q.query_id: {d: maxsim_reference(qe, de) for d, de in zip(doc_ids, doc_embeddings)}
        for q, qe in zip(queries, query_embeddings)
    }
    name = f"ndcg@{k}"
    result = evaluate_run(dataset.qrels(), run, metrics=("ndcg", "recall"), ks=tuple(sorted({k, 10})))
    return {
        name: result.mean[name],
        "recall@10": result.mean["recall@10"],
        "per_query": {qid: values[name] for qid, values in result.per_query.items()},
        "queries": len(queries),
        "documents": len(doc_ids),
    }
