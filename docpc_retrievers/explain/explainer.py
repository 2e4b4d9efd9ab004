"""Explainer: lays one query's MaxSim match with one stored document back onto pictures of it.

Grid mode reads the stored vectors, token grid and layout, so the terms it
shows add up to the score search gave (nothing is re-encoded but the query).
Page mode, and the pages of a reranked hit, re-render the pages from the
source PDF and encode them alone, because page vectors are stored without
their patch positions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from docpc_retrievers.queries import check_query
from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.composition import GridLayout, compose_grid
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.documents.represent import checked_source, render_source_pages
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.errors import DocumentNotFoundError, ExplainUnavailableError, PDFLoadError
from docpc_retrievers.explain.contributions import Box, TokenContribution, contribution_shares, token_contributions
from docpc_retrievers.explain.shares import query_labels
from docpc_retrievers.explain.explanation import Explanation, PageCrop, PagePicture
from docpc_retrievers.explain.pictures import (
    MIN_CROP_SIDE,
    crop_fraction,
    enlarge,
    heat_overlay,
    hot_region,
    outline_pages,
)
from docpc_retrievers.results import SearchResult
from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.grid_previews import GridImageStore
from docpc_retrievers.store.multivector import MultiVectorStore

__all__ = ["DEFAULT_EXPLAIN_DPI", "Explainer"]

#: A tiny page is re-rendered for its crop only while the whole page stays under this many pixels.
_MAX_CROP_RENDER_PIXELS = 40_000_000
#: Resolution of the page crops rendered from the source PDF.
DEFAULT_EXPLAIN_DPI = 144.0


@dataclass
class Explainer:
    """Builds :class:`Explanation` objects for one store (the index and its search results share one)."""

    store: MultiVectorStore
    grids: GridImageStore
    settings: IndexSettings
    encoder: Callable[[], Encoder]

    def explain(
        self,
        query: str,
        doc_id: str,
        *,
        result: SearchResult | None = None,
        top_pages: int = 2,
        dpi: float = DEFAULT_EXPLAIN_DPI,
        password: str | None = None,
    ) -> Explanation:
        """Why ``doc_id`` matched ``query``: token terms, page shares, an overlay and full-resolution crops.

        ``result`` (a hit of this query) adds the pages its reranking scored;
        ``top_pages`` pages get crops (and page pictures); ``password`` opens an
        encrypted source. Unknown id: :class:`DocumentNotFoundError`; an encoder
        or record without patch positions: :class:`ExplainUnavailableError`.
        """
        check_query(query)
        if top_pages < 0:
            raise ValueError(f"top_pages must be >= 0, got {top_pages}")
        found = self.store.get([doc_id])
        if not found:
            raise DocumentNotFoundError(doc_id, self.store.path)
        doc = found[0]
        meta = doc.metadata
        encoder = self.encoder()
        if not getattr(encoder, "has_patch_grid", False):
            raise ExplainUnavailableError(
                f"the {getattr(encoder, 'family', type(encoder).__name__)} encoder does not say where its image "
                "patches sit, so a match cannot be drawn on the image (Qwen-family models, such as the default "
                "ColQwen2, and ColPali do)"
            )
        q = encoder.encode_queries([query])[0]
        notes: list[str] = []
        labels = _query_labels(encoder, query, len(q), notes)
        page_labels = _page_labels(meta)
        common: dict[str, Any] = {
            "doc_id": doc_id, "query": query, "title": meta.get("title") or meta.get("file_name"),
            "source": meta.get("source"), "notes": notes,
        }
        if meta.get("mode", "grid") == "page":
            numbers = list(meta.get("selected_pages") or [])
            [hit] = self.store.search(q, 1, ids=[doc_id])  # exact MaxSim of every stored page, as search scores them
            stored = dict(zip(numbers, hit.part_scores)) if len(hit.part_scores) == len(numbers) else {}
            order = sorted(stored, key=lambda p: (-stored[p], p))[:top_pages]
            pictures, crops = self._page_pictures(
                doc_id, meta, order, q, labels, page_labels, canvas=self.settings.page_canvas, dpi=dpi,
                password=password, notes=notes,
            )
            score = result.score if result is not None else max(stored.values(), default=0.0)
            contributions = pictures[0].contributions if pictures else []
            total = sum(max(s, 0.0) for s in stored.values())
            shares = {p: max(s, 0.0) / total for p, s in stored.items()} if total > 0 else {}
            notes.append("page mode: each page picture is the page encoded alone again; scores are its own MaxSim")
            return Explanation(score=score, mode="page", shares=shares, contributions=contributions,
                               crops=crops, pages=pictures, **common)
        return self._grid(doc_id, meta, q, labels, page_labels, result, top_pages, dpi, password, common)

    # ------------------------------------------------------------------ grid mode

    def _grid(
        self,
        doc_id: str,
        meta: Mapping[str, Any],
        q: np.ndarray,
        labels: list[tuple[str, bool]] | None,
        page_labels: dict[int, str],
        result: SearchResult | None,
        top_pages: int,
        dpi: float,
        password: str | None,
        common: dict[str, Any],
    ) -> Explanation:
        notes: list[str] = common["notes"]
        raw_grid, raw_layout = meta.get("token_grid"), meta.get("layout")
        if not raw_grid or not raw_layout:
            raise ExplainUnavailableError(
                f"document {doc_id} was stored without its token grid (indexed by an encoder without patch "
                "positions, or by docpc-retrievers 0.1): re-index it to explain its matches"
            )
        grid = TokenGrid.from_dict(json.loads(str(raw_grid)))
        layout = GridLayout.from_dict(json.loads(str(raw_layout)))
        vectors, anchors = self.store.vectors_with_anchors(doc_id)
        contributions = token_contributions(
            q, vectors, grid, (layout.width, layout.height), anchors=anchors, labels=labels, layout=layout
        )
        shares = _page_shares(contributions)
        try:
            image = self.grids.image(doc_id)
        except (DocumentNotFoundError, PDFLoadError, OSError) as exc:
            notes.append(f"the grid preview is not stored and could not be composed again ({exc}): a blank grid stands in")
            image = Image.new("RGB", (layout.width, layout.height), "white")
        if image.size != (layout.width, layout.height):
            image = image.resize((layout.width, layout.height))
        overlay = outline_pages(heat_overlay(image, contributions), layout, shares, page_labels)
        boxes = {c.page_index + 1: c.page_box for c in layout.cells if c.page_index is not None and c.page_box}
        top = sorted((p for p in boxes if shares.get(p, 0.0) > 0), key=lambda p: (-shares[p], p))[:top_pages]
        crops = self._grid_crops(doc_id, meta, image, boxes, top, contributions, page_labels, dpi, password, notes)
        pictures: list[PagePicture] = []
        if result is not None and result.reranked:
            reranked = [e.page for e in result.evidence_pages][:top_pages]
            pictures, _ = self._page_pictures(
                doc_id, meta, reranked, q, labels, page_labels, canvas=False, dpi=dpi, password=password, notes=notes,
                crops=False,
            )
            notes.append(
                f"reranked: the hit's score {result.score:.4f} fuses the grid's {self.grid_score(contributions):.4f} "
                "with the page scores below"
            )
        grid_score = self.grid_score(contributions)
        return Explanation(
            score=result.score if result is not None else grid_score, grid_score=grid_score, mode="grid",
            shares=shares, contributions=contributions,
            overlay=overlay, crops=crops, pages=pictures, **common,
        )

    @staticmethod
    def grid_score(contributions: Sequence[TokenContribution]) -> float:
        """MaxSim as the sum of every token's term (included and excluded)."""
        return float(sum(c.value for c in contributions))

    def _grid_crops(
        self,
        doc_id: str,
        meta: Mapping[str, Any],
        grid_image: Image.Image,
        boxes: Mapping[int, Box],
        top: Sequence[int],
        contributions: Sequence[TokenContribution],
        page_labels: Mapping[int, str],
        dpi: float,
        password: str | None,
        notes: list[str],
    ) -> list[PageCrop]:
        """Crops of the hottest region of each ``top`` page: from the source PDF, else cut from the grid."""
        if not top:
            return []
        regions = {p: hot_region(contributions, p, boxes[p]) for p in top}
        note: str | None = None
        try:
            rendered = {n: img for n, img, _ in render_source_pages(doc_id, meta, dpi=dpi, password=password, pages=top)}
            source = "pdf"
        except (PDFLoadError, OSError) as exc:
            note = f"cut from the stored grid: {exc}"
            notes.append(f"crops are cut from the stored grid (at grid resolution) because the source cannot be read: {exc}")
            rendered = {p: grid_image.crop(boxes[p]) for p in top}
            source = "grid"
        crops = []
        for p in top:
            image = crop_fraction(rendered[p], regions[p])
            if source == "pdf" and min(image.size) < MIN_CROP_SIDE:  # a tiny page or region: render it larger
                factor = MIN_CROP_SIDE / max(min(image.size), 1) * 1.05
                if rendered[p].width * rendered[p].height * factor**2 <= _MAX_CROP_RENDER_PIXELS:
                    again = render_source_pages(doc_id, meta, dpi=dpi * factor, password=password, pages=[p])
                    image = crop_fraction(again[0][1], regions[p])
            crops.append(PageCrop(p, page_labels.get(p, str(p)), enlarge(image), source,  # type: ignore[arg-type]
                                  regions[p], note))
        return crops

    # ------------------------------------------------------------------ page images

    def _page_pictures(
        self,
        doc_id: str,
        meta: Mapping[str, Any],
        pages: Sequence[int],
        q: np.ndarray,
        labels: list[tuple[str, bool]] | None,
        page_labels: Mapping[int, str],
        *,
        canvas: bool,
        dpi: float,
        password: str | None,
        notes: list[str],
        crops: bool = True,
    ) -> tuple[list[PagePicture], list[PageCrop]]:
        """Each page (1-based) encoded alone as the index or reranker did, its overlay, and its crop at ``dpi``."""
        if not pages:
            return [], []
        size = self.settings.page_size
        try:
            source: Path = checked_source(doc_id, meta)
            with open_pdf(source, password=password) as pdf:
                images = pdf.render([p - 1 for p in pages], fit=size)
                full = pdf.render([p - 1 for p in pages], dpi=dpi) if crops else []
        except (PDFLoadError, OSError) as exc:
            notes.append(f"page pictures need the source PDF, which cannot be read: {exc}")
            return [], []
        layouts: list[GridLayout | None] = [None] * len(images)
        if canvas:  # page mode since 0.2 encodes each page centred on a page_size canvas
            composed = [compose_grid([img], [p - 1], shape=(1, 1), cell_size=size) for img, p in zip(images, pages)]
            images = [c.image for c in composed]
            layouts = [c.layout for c in composed]
        encoded = self.encoder().encode_images_with_info(images)
        pictures: list[PagePicture] = []
        page_crops: list[PageCrop] = []
        for i, (page, image, item) in enumerate(zip(pages, images, encoded)):
            grid = TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid)
            if grid is None:
                raise ExplainUnavailableError(f"the encoder gave no patch grid for page {page} of {doc_id}")
            layout = layouts[i]
            terms = token_contributions(
                q, item.embeddings, grid, image.size, labels=labels, layout=layout, page=None if layout else page
            )
            label = page_labels.get(page, str(page))
            overlay = heat_overlay(image, terms)
            pictures.append(PagePicture(page, label, self.grid_score(terms), terms, overlay))
            if crops:
                frame = layout.cells[0].page_box if layout is not None and layout.cells[0].page_box else (0, 0, *image.size)
                region = hot_region(terms, page, frame)
                page_crops.append(PageCrop(page, label, enlarge(crop_fraction(full[i], region)), "pdf", region))
        return pictures, page_crops


def _query_labels(encoder: Encoder, query: str, rows: int, notes: list[str]) -> list[tuple[str, bool]] | None:
    """Per query row, its text and whether it is one of the query's words; None (all shown) when unknown."""
    labels = query_labels(encoder, query, rows)
    if labels is None:
        notes.append("the encoder does not name its query tokens: every token is drawn, prompt ones included")
    return labels


def _page_shares(contributions: Sequence[TokenContribution]) -> dict[int, float]:
    """Each page's share of the grid score (1-based), by the definition search results use."""
    return contribution_shares(contributions)[0]


def _page_labels(meta: Mapping[str, Any]) -> dict[int, str]:
    """1-based page number -> the PDF's own page label (roman numerals, ...), as indexed."""
    numbers = list(meta.get("selected_pages") or [])
    labels = list(meta.get("selected_labels") or [])
    return {int(n): str(label) for n, label in zip(numbers, labels) if label}
