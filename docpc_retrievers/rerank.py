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
Page embeddings are cached (store/page_cache.py), so a page is encoded at most once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from docpc_retrievers.config import RerankSettings
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.scoring.bm25 import page_bm25
from docpc_retrievers.store.codec import dequantize, quantize
from docpc_retrievers.store.page_cache import PageEmbeddingCache
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.results import EvidencePage, SearchResult
from docpc_retrievers.scoring.maxsim import maxsim

__all__ = ["PageReranker", "RerankSettings", "choose_pages", "fuse", "page_bm25", "rerank_results"]

logger = logging.getLogger(__name__)

def fuse(grid_score: float, page_scores: Sequence[float], grid_weight: float) -> float:
    """The documented fusion of a document's grid score and its best page score."""
    if not page_scores:
        return grid_score
    return grid_weight * grid_score + (1.0 - grid_weight) * max(page_scores)


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
            # Rounded to int8 as the cache stores them, so a page scores the
            # same on the first query as on every later (cached) one.
            encoded = [dequantize(*quantize(e)) for e in self.encoder.encode_images(images)]
            self.pages_encoded += len(missing)
            fresh = dict(zip(missing, encoded))
            self.cache.put(doc_id, fresh)
            have.update(fresh)
        scores = maxsim([query], [have[n] for n in numbers])[0]
        return {n: float(s) for n, s in zip(numbers, scores)}


def rerank_results(
    reranker: PageReranker,
    text: str,
    query: np.ndarray,
    results: list[SearchResult],
    settings: RerankSettings,
    password: str | None = None,
) -> list[SearchResult]:
    """Grid-then-page: rescore the top ``settings.top_n`` results from their best pages, fused with the grid score.

    ``query`` is the encoded query ``[n_tokens, dim]``. A document whose
    source cannot be read keeps its grid score and says why (``rerank_error``).
    """
    head, tail = results[: settings.top_n], results[settings.top_n :]
    reranked: list[SearchResult] = []
    for r in head:
        source = Path(r.source or "")
        total = int(r.total_pages or 0)
        try:
            texts = reranker.page_texts(r.id, source, password)
            evidence = {e.page - 1: e.share or 0.0 for e in r.evidence_pages}
            chosen = choose_pages(total, settings.page_budget, text, texts, evidence)
            scores = reranker.page_scores(r.id, source, chosen, query, password)
        except (PDFLoadError, OSError) as exc:
            logger.warning("not reranking %s: %s", r.id, exc)
            reranked.append(replace(r, rerank_error=str(exc)))
            continue
        fused = fuse(r.score, list(scores.values()), settings.grid_weight)
        ev = [EvidencePage(p, score=s) for p, s in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]
        reranked.append(replace(r, score=fused, grid_score=r.score, reranked=True, evidence_pages=ev))
    reranked.sort(key=lambda r: (-r.score, r.id))
    return reranked + tail
