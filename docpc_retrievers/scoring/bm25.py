"""BM25 for PDF text layers: one tokenizer for every BM25 in the package.

Used to pick which pages to rerank (:func:`page_bm25`) and by the BM25
baselines of the evaluation (which score with rank-bm25 over :func:`tokenize`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["STOPWORDS", "page_bm25", "tokenize"]

_WORD = re.compile(r"[a-z0-9]+")

#: English function words that carry no topic; dropped by :func:`tokenize`.
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in into is it its of on or that the their "
    "them these this those to was were what when where which who why with about".split()
)


def tokenize(text: str) -> list[str]:
    """BM25 tokens: lower-cased alphanumeric runs, English stopwords removed, no stemming."""
    return [t for t in _WORD.findall(text.lower()) if t not in STOPWORDS]


def page_bm25(query: str, page_texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """BM25 ``[n_pages]`` of the query against each page of one document, with Lucene's always-positive idf.

    Within one document a query term often occurs on half the pages or more,
    where the classic Robertson idf is zero or negative; ``log(1 + (N - n +
    0.5) / (n + 0.5))`` keeps such terms counting.
    """
    q = set(tokenize(query))
    docs = [tokenize(t) for t in page_texts]
    scores = np.zeros(len(docs), dtype=np.float64)
    if not q or not docs:
        return scores
    lengths = np.array([len(d) for d in docs], dtype=np.float64)
    avg = max(float(lengths.mean()), 1.0)
    counts = [Counter(d) for d in docs]
    for term in q:
        tf = np.array([c.get(term, 0) for c in counts], dtype=np.float64)
        n = int((tf > 0).sum())
        if n == 0:
            continue
        idf = np.log(1.0 + (len(docs) - n + 0.5) / (n + 0.5))
        scores += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / avg))
    return scores
