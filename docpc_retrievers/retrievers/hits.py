"""What a caller gets for a query: hits with text, metadata and pictures, after the score thresholds.

Both framework retrievers stand on :func:`retrieve`; the store's one read
(``store/view.py``) has already replaced any document deleted during the
search, so nothing here searches again: a picture that can no longer be read
leaves its hit without a picture, and the search still answers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from docpc_retrievers.errors import DocumentNotFoundError
from docpc_retrievers.grid_previews import GRID_MIME_TYPE
from docpc_retrievers.image_bytes import MIME_TYPES, convert_image, png_bytes
from docpc_retrievers.results import Hit, SearchResult
from docpc_retrievers.retrievers.options import RetrieverOptions

if TYPE_CHECKING:
    from docpc_retrievers.index import DocPCIndex

__all__ = ["DROPPED_METADATA_KEYS", "IMAGE_MIME_TYPE", "above_thresholds", "clean_metadata", "result_metadata",
           "retrieve"]

logger = logging.getLogger(__name__)

#: Images made here (rendered pages, evidence pictures) and by the loaders; stored grids are ``GRID_MIME_TYPE``.
IMAGE_MIME_TYPE = "image/png"

#: Stored keys left out of results: the visual-token geometry only the core's evidence code reads.
DROPPED_METADATA_KEYS: frozenset[str] = frozenset({"token_grid"})


def retrieve(index: DocPCIndex, query: object, options: RetrieverOptions) -> list[Hit]:
    """Search ``index`` and return hits with text, metadata and the pictures ``options`` ask for, best first."""
    # Text and grid read with each hit, so a document deleted meanwhile is replaced in the store, not failed here.
    search = options.search_options().reading(texts=True, grids=options.return_images == "grid")
    results = above_thresholds(index.search_with([query], search)[0], options)  # type: ignore[list-item]
    logger.debug("DocPC retrieved %d documents for %r", len(results), query)
    return [_hit(index, r, r.text or "", options) for r in results]


def above_thresholds(results: list[SearchResult], options: RetrieverOptions) -> list[SearchResult]:
    """The results at or above ``score_threshold`` and at or above ``min_score_ratio`` of the top score."""
    if options.score_threshold is not None:
        results = [r for r in results if r.score >= options.score_threshold]
    if options.min_score_ratio is not None and results and results[0].score > 0:
        results = [r for r in results if r.score >= options.min_score_ratio * results[0].score]
    return results


def clean_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Stored metadata without None values (frameworks would print them as 'None') or internal keys."""
    return {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in metadata.items()
        if v is not None and k not in DROPPED_METADATA_KEYS
    }


def result_metadata(result: SearchResult) -> dict[str, Any]:
    """A search result's metadata: stored keys plus score, rank, evidence pages and rerank details.

    ``evidence_pages`` lists 1-based page numbers, the page behind most of the
    score first; after reranking ``grid_score`` is the score before fusion.
    """
    metadata = clean_metadata(result.metadata)
    metadata.update(score=result.score, rank=result.rank)
    if result.evidence_pages:
        metadata["evidence_pages"] = [e.page for e in result.evidence_pages]
    if result.reranked:
        metadata["reranked"] = True
        metadata["grid_score"] = result.grid_score
    elif result.rerank_error:
        metadata["reranked"] = False
        metadata["rerank_error"] = result.rerank_error
    return metadata


class _PageModeWarning:
    """Warns once per index that a page-mode store has no grid images."""

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def __call__(self, index: DocPCIndex) -> None:
        if id(index) not in self._warned:
            self._warned.add(id(index))
            logger.warning("store %s is page-mode: it has no grid images; use return_images='pages'", index.path)


_warn_page_mode = _PageModeWarning()


def _hit(index: DocPCIndex, result: SearchResult, text: str, options: RetrieverOptions) -> Hit:
    try:
        hit = _pictured_hit(index, result, text, options)
    except DocumentNotFoundError as exc:  # deleted by another writer since the search answered
        logger.info("no picture for %s: %s", result.id, exc)
        hit = Hit(result, text, result_metadata(result))
    if options.image_format is None or (hit.image is None and not hit.pages):
        return hit
    image, mime = (None, hit.image_mime_type) if hit.image is None else convert_image(hit.image, options.image_format)
    pages = [(n, convert_image(data, options.image_format)[0], t) for n, data, t in hit.pages]
    return replace(hit, image=image, pages=pages, image_mime_type=MIME_TYPES[options.image_format])


def _pictured_hit(index: DocPCIndex, result: SearchResult, text: str, options: RetrieverOptions) -> Hit:
    metadata = result_metadata(result)
    if options.return_images == "pages":
        # One result per document either way: its image is the page behind most of the score, and every
        # selected page comes along (``pages``), so top-k counts documents in both integrations.
        pages = index.render_pages(result.id, dpi=options.page_dpi, password=options.password)
        rendered = [(n, png_bytes(image), t) for n, image, t in pages]
        best = result.evidence_pages[0].page if result.evidence_pages else (rendered[0][0] if rendered else None)
        image = next((data for n, data, _ in rendered if n == best), None)
        metadata.update(page_numbers=[n for n, _, _ in rendered], image_page=best)
        return Hit(result, text, metadata, image=image, pages=rendered, image_mime_type=IMAGE_MIME_TYPE)
    if options.return_images == "evidence":
        page_mode = result.metadata.get("mode") == "page"  # page pictures need a page; a grid's overlay needs none
        explanation = result.explain(password=options.password, top_pages=1 if page_mode else 0)
        picture = explanation.overlay or next((p.overlay for p in explanation.pages), None)
        if picture is not None:
            return Hit(result, text, metadata, image=png_bytes(picture), image_mime_type=IMAGE_MIME_TYPE)
        return Hit(result, text, metadata)
    if options.return_images == "grid":
        if result.metadata.get("mode") == "page":
            _warn_page_mode(index)
        else:
            grid = result.grid_image if result.grid_image is not None else index.grid_image_bytes(result.id)
            return Hit(result, text, metadata, image=grid, image_mime_type=GRID_MIME_TYPE)
    return Hit(result, text, metadata)
