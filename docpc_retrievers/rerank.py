"""Grid-then-page reranking: rescore the top documents page by page at full resolution.

A 2x2 grid gives each page about a quarter of a page's usual visual tokens, so
small print and dense tables blur. After the grid search, the top N documents
are rescored from some of their pages encoded one by one, and reordered by

    fused = grid_weight * grid_score + (1 - grid_weight) * best_page_score.

Both terms are MaxSim sums over the same query tokens, so they share a scale
and a convex combination needs no normalisation. The default weight, 0.5,
keeps the grid's document-wide evidence (relevance spread over pages) while
letting a page that answers the query clearly win; it is a reasoned default,
not one tuned on labelled data (see the README).

Which pages to encode is chosen by cheap, query-aware signals, up to a
per-document budget (default 4): BM25 of the query against each page's text
layer, plus the grid evidence share of the pages that were in the grid.
Page embeddings are cached (page_cache.py), so a page is encoded at most once.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .encoders import Encoder
from .page_cache import PageEmbeddingCache
from .pdf import open_pdf
from .scoring import maxsim

__all__ = ["PageReranker", "RerankSettings", "choose_pages", "fuse", "page_bm25"]

logger = logging.getLogger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class RerankSettings:
    """``top_n`` documents are reranked, each from at most ``page_budget`` pages."""

    top_n: int = 20
    page_budget: int = 4
    grid_weight: float = 0.5

    def __post_init__(self) -> None:
        if self.top_n < 1 or self.page_budget < 1:
            raise ValueError("rerank top_n and page_budget must be >= 1")
        if not 0.0 <= self.grid_weight <= 1.0:
            raise ValueError("grid_weight must be within [0, 1]")


def fuse(grid_score: float, page_scores: Sequence[float], grid_weight: float) -> float:
    """The documented fusion of a document's grid score and its best page score."""
    if not page_scores:
        return grid_score
    return grid_weight * grid_score + (1.0 - grid_weight) * max(page_scores)


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _WORD.findall(text)]


def page_bm25(query: str, page_texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """BM25 of the query against each page of one document, with Lucene's always-positive idf.

    Within one document a query term often occurs on half the pages or more,
    where the classic Robertson idf is zero or negative; ``log(1 + (N - n +
    0.5) / (n + 0.5))`` keeps such terms counting.
    """
    q = set(_tokens(query))
    docs = [_tokens(t) for t in page_texts]
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


def choose_pages(
    total_pages: int,
    budget: int,
    query: str,
    page_texts: Sequence[str] | None = None,
    evidence: Mapping[int, float] | None = None,
) -> list[int]:
    """Pick at most ``budget`` 0-based pages of a document to encode for reranking, best first.

    Priority = BM25 score of the page text normalised by the document's best
    page + the page's grid evidence share. Pages with no signal come last, in
    page order (the first pages of a document are the usual fallback).
    """
    if total_pages <= 0 or budget <= 0:
        return []
    priority = np.zeros(total_pages, dtype=np.float64)
    if page_texts is not None and len(page_texts) == total_pages:
        scores = page_bm25(query, page_texts)
        if scores.max() > 0:
            priority += scores / scores.max()
    for page, share in (evidence or {}).items():
        if 0 <= page < total_pages:
            priority[page] += float(share)
    order = sorted(range(total_pages), key=lambda p: (-priority[p], p))
    return order[: min(budget, total_pages)]


class PageReranker:
    """Scores chosen pages of stored documents at full resolution, through the page cache."""

    def __init__(
        self,
        encoder: Encoder,
        cache: PageEmbeddingCache,
        page_size: tuple[int, int],
        *,
        text_cache_size: int = 256,
    ) -> None:
        self.encoder = encoder
        self.cache = cache
        self.page_size = page_size
        self.pages_encoded = 0
        self._texts: OrderedDict[str, list[str]] = OrderedDict()
        self._text_cache_size = text_cache_size

    def page_texts(self, doc_id: str, source: Path, password: str | None = None) -> list[str]:
        """Text layer of every page (cached per document; cheap next to encoding)."""
        if doc_id in self._texts:
            self._texts.move_to_end(doc_id)
            return self._texts[doc_id]
        with open_pdf(source, password=password) as doc:
            texts = doc.text(range(doc.page_count))
        self._texts[doc_id] = texts
        while len(self._texts) > self._text_cache_size:
            self._texts.popitem(last=False)
        return texts

    def page_scores(
        self,
        doc_id: str,
        source: Path,
        pages: Sequence[int],
        query: np.ndarray,
        password: str | None = None,
    ) -> dict[int, float]:
        """Exact MaxSim of ``query`` against each of ``pages`` (0-based) encoded alone; keys are 1-based."""
        numbers = [p + 1 for p in pages]
        have = self.cache.get(doc_id, numbers)
        missing = [n for n in numbers if n not in have]
        if missing:
            with open_pdf(source, password=password) as doc:
                images = doc.render([n - 1 for n in missing], fit=self.page_size)
            # Rounded to float16 as the cache stores them, so a page scores the
            # same on the first query as on every later (cached) one.
            encoded = [e.astype(np.float16).astype(np.float32) for e in self.encoder.encode_images(images)]
            self.pages_encoded += len(missing)
            fresh = dict(zip(missing, encoded))
            self.cache.put(doc_id, fresh)
            have.update(fresh)
        scores = maxsim([query], [have[n] for n in numbers])[0]
        return {n: float(s) for n, s in zip(numbers, scores)}
