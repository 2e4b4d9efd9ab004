"""Metrics: hand-checked values, and agreement with pytrec_eval (trec_eval) on randomised runs to 1e-9."""

from __future__ import annotations

import math
import random

import pytest

from docpc_retrievers.eval.metrics import (
    evaluate_run,
    mrr_at_k,
    ndcg_at_k,
    parse_metric_name,
    precision_at_k,
    rank_documents,
    recall_at_k,
)

pytrec_eval = pytest.importorskip("pytrec_eval")

KS = (1, 3, 5, 10)


def test_hand_computed_values() -> None:
    relevance = {"a": 2, "b": 1, "z": 0}
    ranking = ["x", "a", "z", "b"]
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(ranking, relevance, 5) == pytest.approx(dcg / idcg, abs=1e-12)
    assert ndcg_at_k(ranking, relevance, 1) == 0.0
    assert recall_at_k(ranking, relevance, 2) == 0.5
    assert precision_at_k(ranking, relevance, 10) == pytest.approx(0.2)
    assert mrr_at_k(ranking, relevance, 5) == 0.5
    assert mrr_at_k(ranking, relevance, 1) == 0.0
    assert ndcg_at_k(ranking, {"x": 0}, 5) == 0.0  # ideal DCG 0 -> 0
    assert recall_at_k(ranking, {}, 5) == 0.0


def test_ties_are_broken_by_doc_id_descending() -> None:
    assert rank_documents({"a": 1.0, "c": 1.0, "b": 1.0, "d": 2.0}) == ["d", "c", "b", "a"]


def test_missing_queries_count_as_zero_in_the_mean() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    result = evaluate_run(qrels, {"q1": {"a": 1.0}, "q3": {"b": 1.0}}, ks=(5,))
    assert result.missing == ["q2"]
    assert result.per_query["q2"]["ndcg@5"] == 0.0
    assert result.mean["ndcg@5"] == pytest.approx(0.5)
    assert "q3" not in result.per_query


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be"):
        ndcg_at_k(["a"], {"a": 1}, 0)
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate_run({"q": {"a": 1}}, {}, metrics=("map",))
    with pytest.raises(ValueError, match="twice"):
        evaluate_run({"q": {"a": 1}}, {"q": ["a", "a"]})
    assert parse_metric_name("recall@10") == ("recall", 10)
    with pytest.raises(ValueError):
        parse_metric_name("ndcg")


def _random_case(rng: random.Random, qid: str) -> tuple[dict[str, int], dict[str, float]]:
    """A random query: graded judgements (possibly none positive) and a run with frequent tied scores."""
    n_docs = rng.randint(1, 40)
    docs = [f"d{rng.randint(0, 60):02d}" for _ in range(n_docs)]
    docs = list(dict.fromkeys(docs))
    pool = docs + [f"u{i}" for i in range(rng.randint(0, 5))]  # some judged docs are never retrieved
    qrels: dict[str, int] = {}
    for doc in rng.sample(pool, rng.randint(0, min(len(pool), 8))):
        qrels[doc] = rng.choice((0, 0, 1, 1, 2, 3))
    if rng.random() < 0.1:
        qrels = {doc: 0 for doc in qrels} or {"nothing": 0}  # a query with no positives at all
    if not qrels:
        qrels = {"nothing": 0}
    tie_levels = rng.choice((2, 3, 5, 1000))
    run = {doc: float(rng.randint(0, tie_levels)) / rng.choice((1, 3, 7)) for doc in docs}
    return qrels, run


def test_matches_pytrec_eval_on_randomised_runs() -> None:
    rng = random.Random(20240605)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for i in range(1500):
        qid = f"q{i:04d}"
        qrels[qid], run[qid] = _random_case(rng, qid)
    measures = {f"ndcg_cut.{','.join(map(str, KS))}", f"recall.{','.join(map(str, KS))}", f"P.{','.join(map(str, KS))}"}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ours = evaluate_run(qrels, run, ks=KS)
    assert set(reference) == set(ours.per_query) and len(reference) == 1500
    n_checked = 0
    n_with_ties = sum(1 for r in run.values() if len(set(r.values())) < len(r))
    n_no_positive = sum(1 for q in qrels.values() if not any(g > 0 for g in q.values()))
    n_graded = sum(1 for q in qrels.values() if any(g > 1 for g in q.values()))
    assert n_with_ties > 500 and n_no_positive > 100 and n_graded > 500  # the cases the test is about
    for qid, ref in reference.items():
        for k in KS:
            assert ours.per_query[qid][f"ndcg@{k}"] == pytest.approx(ref[f"ndcg_cut_{k}"], abs=1e-9), (qid, k)
            assert ours.per_query[qid][f"recall@{k}"] == pytest.approx(ref[f"recall_{k}"], abs=1e-9), (qid, k)
            assert ours.per_query[qid][f"precision@{k}"] == pytest.approx(ref[f"P_{k}"], abs=1e-9), (qid, k)
            n_checked += 3
    assert n_checked == 1500 * len(KS) * 3
    for k in (5, 10):
        mean_ref = math.fsum(r[f"ndcg_cut_{k}"] for r in reference.values()) / len(reference)
        assert ours.mean[f"ndcg@{k}"] == pytest.approx(mean_ref, abs=1e-9)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_mrr_matches_pytrec_eval_recip_rank_on_the_cut_run(k: int) -> None:
    rng = random.Random(k)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    cut: dict[str, dict[str, float]] = {}
    for i in range(1000):
        qid = f"q{i}"
        qrels[qid], run[qid] = _random_case(rng, qid)
        cut[qid] = {d: run[qid][d] for d in rank_documents(run[qid])[:k]}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
    ours = evaluate_run(qrels, run, metrics=("mrr",), ks=(k,))
    assert len(reference) == 1000
    nonzero = 0
    for qid, ref in reference.items():
        assert ours.per_query[qid][f"mrr@{k}"] == pytest.approx(ref["recip_rank"], abs=1e-9), qid
        nonzero += ref["recip_rank"] > 0
    assert nonzero > 100  # enough queries with a hit in the top k to make the check mean something


def test_ranked_list_runs_are_used_in_the_order_given() -> None:
    qrels = {"q": {"b": 1}}
    assert evaluate_run(qrels, {"q": ["b", "a"]}, metrics=("mrr",), ks=(5,)).mean["mrr@5"] == 1.0
    assert evaluate_run(qrels, {"q": ["a", "b"]}, metrics=("mrr",), ks=(5,)).mean["mrr@5"] == 0.5
