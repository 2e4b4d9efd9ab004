"""Search: encode the query -> store (MaxSim) -> evidence pages -> optional grid-then-page rerank.

A result's evidence pages say which pages carry the score: each page's share
of the grid's MaxSim (grid mode, from the stored token geometry), or each
page's own score (page mode, and after reranking).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from dataclasses import replace

import numpy as np

from docpc_retrievers.queries import check_query
from docpc_retrievers.catalog import ids_under
from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.composition import GridLayout
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.explain.explainer import Explainer
from docpc_retrievers.rerank import PageReranker, RerankSettings, rerank_results
from docpc_retrievers.results import EvidencePage, SearchResult
from docpc_retrievers.explain.shares import query_labels, score_shares
from docpc_retrievers.scoring.evidence import TokenGrid, token_pages
from docpc_retrievers.store.layout import StoreLayout
from docpc_retrievers.store.multivector import MultiVectorStore, ScoredDocument
from docpc_retrievers.store.page_cache import PageEmbeddingCache, cache_fingerprint

__all__ = ["SearchChoices", "Searcher", "check_queries"]

logger = logging.getLogger(__name__)


def check_queries(queries: Sequence[str]) -> list[str]:
    """The queries as a list, or a clear error for a bare string, a non-string or a blank query."""
    if isinstance(queries, str):
        raise TypeError("search_batch expects a list of queries")
    return [check_query(q) for q in queries]


class SearchChoices(Protocol):
    """What a search reads of its options: the retriever layer's checked ``SearchOptions`` (built from the option
    schema where the search starts) satisfies it; the searcher takes it as it is."""

    top_k: int
    filters: Mapping[str, Any] | None
    under: tuple[str, ...]
    aggregate: str
    candidates: int | None
    exhaustive: bool
    partial: bool
    rerank: bool
    password: str | None
    texts: bool
    grids: bool

    @property
    def depth(self) -> int: ...

    @property
    def rerank_settings(self) -> RerankSettings: ...


class Searcher:
    """Answers queries against one store; owns the rerank page cache of that store."""

    def __init__(
        self,
        store: MultiVectorStore,
        layout: StoreLayout,
        settings: IndexSettings,
        encoder: Callable[[], Encoder],
        explainer: Explainer | None = None,
    ) -> None:
        self.store = store
        self.explainer = explainer
        self.layout = layout
        self.settings = settings
        self._encoder = encoder
        self._page_cache: PageEmbeddingCache | None = None
        self._reranker: PageReranker | None = None
        self._rerank_lock = threading.Lock()  # the reranker's caches are not thread-safe

    def search_batch(self, texts: list[str], options: SearchChoices) -> list[list[SearchResult]]:
        """Ranked results per query (checked by the caller: :func:`check_queries`), best first, at most
        ``options.top_k`` each; ``options`` were checked when built and are taken as they are."""
        if options.top_k == 0 or self.store.count() == 0:
            return [[] for _ in texts]
        within = ids_under(self.store, options.under) if options.under else None
        if within is not None and not within:
            return [[] for _ in texts]
        vectors = self._encoder().encode_queries(texts)
        depth = options.depth
        # Each hit comes with its vectors (and text, grid) from the store's one read: a document deleted by another writer
        # meanwhile has already given its slot to the next one there, so nothing below fails on it.
        hits = self.store.search_batch(
            vectors, depth, where=options.filters, ids=within, aggregate=options.aggregate,
            n_candidates=options.candidates, exhaustive=options.exhaustive, with_text=options.texts, with_vectors=True,
            with_grid=options.grids, partial=options.partial,
        )
        out = []
        for text, q, per_query in zip(texts, vectors, hits):
            words = self._query_words(text, len(q)) if per_query else None
            results = [self.with_evidence(hit, q, words) for hit in per_query]
            if options.rerank:
                with self._rerank_lock:
                    results = rerank_results(
                        self.reranker, text, q, results, options.rerank_settings, options.password
                    )
            ranked = [replace(r, rank=rank) for rank, r in enumerate(results[: options.top_k], 1)]
            if self.explainer is not None:  # hits explain themselves and show their grid in notebooks
                ranked = [r.attach(text, self.explainer.explain, self.explainer.grids.read_bytes) for r in ranked]
            out.append(ranked)
        return out

    def _query_words(self, text: str, rows: int) -> list[bool] | None:
        """Per query row, whether it is one of the query's own words (not its prompt); None when the encoder does
        not say (every row then counts as a word)."""
        labels = query_labels(self._encoder(), text, rows)
        return None if labels is None else [bool(word) for _, word in labels]

    def with_evidence(self, hit: ScoredDocument, query: np.ndarray, words: list[bool] | None = None) -> SearchResult:
        """A result with its evidence pages: grid attribution (each page's share, and the shares no page holds, by
        the one definition in explain/shares.py), or page-mode page scores. ``words``: as :meth:`_query_words`."""
        result = replace(SearchResult.from_metadata(hit.id, hit.score, 0, hit.metadata, text=hit.text),
                         grid_image=hit.grid)
        meta = hit.metadata
        pages = result.selected_pages
        label = dict(zip(pages, list(meta.get("selected_labels") or [])))
        if meta.get("mode", "grid") == "page":
            if len(hit.part_scores) == len(pages):
                ev = [EvidencePage(p, score=s, label=label.get(p)) for p, s in zip(pages, hit.part_scores)]
                ev.sort(key=lambda e: (-(e.score or 0.0), e.page))
                return replace(result, evidence_pages=ev)
            return result
        split = self._grid_shares(hit, query, words)
        if split is None:
            return result
        shares, other = split
        ev = [EvidencePage(p, share=shares.get(p - 1, 0.0), label=label.get(p)) for p in pages]
        ev.sort(key=lambda e: (-(e.share or 0.0), e.page))
        return replace(result, evidence_pages=ev, other_shares=other)

    def _grid_shares(self, hit: ScoredDocument, query: np.ndarray,
                     words: list[bool] | None) -> tuple[dict[int, float], dict[str, float]] | None:
        """Shares of the grid MaxSim per page (0-based) and not on a page, or None when the token geometry is
        unknown."""
        raw_grid, raw_layout = hit.metadata.get("token_grid"), hit.metadata.get("layout")
        if not raw_grid or not raw_layout:
            return None
        grid = TokenGrid.from_dict(json.loads(str(raw_grid)))
        layout = GridLayout.from_dict(json.loads(str(raw_layout)))
        assert hit.vectors is not None  # the search reads every hit's vectors with it
        return score_shares(query, hit.vectors, grid, token_pages(layout, grid.rows, grid.cols), hit.anchors, words)

    @property
    def page_cache(self) -> PageEmbeddingCache:
        """Full-resolution page embeddings made for reranking."""
        if self._page_cache is None:
            fingerprint = cache_fingerprint(self._encoder().settings(), self.settings.page_size)
            self._page_cache = PageEmbeddingCache(self.layout.page_cache, fingerprint)
        return self._page_cache

    @property
    def reranker(self) -> PageReranker:
        """The grid-then-page reranker (built on first use)."""
        if self._reranker is None:
            self._reranker = PageReranker(self._encoder(), self.page_cache, self.settings.page_size)
        return self._reranker

    def page_cache_stats(self) -> dict[str, int]:
        """Cached pages and their bytes, without loading the encoder."""
        return (self._page_cache or PageEmbeddingCache(self.layout.page_cache, "")).stats()

    def clear_page_cache(self) -> int:
        """Delete every cached page embedding; returns how many were removed."""
        cache = self._page_cache or PageEmbeddingCache(self.layout.page_cache, "")
        removed = cache.clear()
        self._page_cache = None
        self._reranker = None
        return removed

    def close(self) -> None:
        """Release the page cache."""
        if self._page_cache is not None:
            self._page_cache.close()
