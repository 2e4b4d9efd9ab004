"""Evaluation, installed with the ``[eval]`` extra: labelled corpora, metrics, systems, reports, synthetic data.

``corpus`` loads labelled corpora (BEIR or simple layouts); ``metrics`` computes
NDCG/Recall/MRR/precision like trec_eval; ``specs`` parses the system strings
``docpc eval`` compares; ``systems`` runs them (visual indexes, BM25, random);
``timing`` turns indexing reports into the efficiency table; ``report``
writes the tables; ``runner`` ties it together; ``synthetic`` generates a
labelled PDF corpus.
"""

from __future__ import annotations

from docpc_retrievers.eval.corpus import LabelError, LabelledCorpus, LabelledQuery, load_labelled_corpus
from docpc_retrievers.eval.metrics import METRICS, EvaluationResult, evaluate_run
from docpc_retrievers.eval.report import EvaluationReport, SystemResult
from docpc_retrievers.eval.runner import run_evaluation
from docpc_retrievers.eval.specs import AGGREGATIONS, SystemSpec, SystemSpecError, parse_system
from docpc_retrievers.eval.systems import expected_random_metric
from docpc_retrievers.eval.timing import IndexStats, TimedEncoder, timed_index_build
from docpc_retrievers.scoring.bm25 import tokenize

__all__ = [
    "AGGREGATIONS",
    "METRICS",
    "EvaluationReport",
    "EvaluationResult",
    "IndexStats",
    "LabelError",
    "LabelledCorpus",
    "LabelledQuery",
    "SystemResult",
    "SystemSpec",
    "SystemSpecError",
    "TimedEncoder",
    "evaluate_run",
    "expected_random_metric",
    "load_labelled_corpus",
    "parse_system",
    "run_evaluation",
    "timed_index_build",
    "tokenize",
]
