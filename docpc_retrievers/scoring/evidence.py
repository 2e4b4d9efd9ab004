"""Evidence pages from a grid embedding, without re-encoding anything.

A Qwen-family processor cuts the (resized) grid image into a ``rows x cols``
grid of merged patches, one visual token each, in row-major order. The
composition layout says which pixel belongs to which page. So each visual
token maps to a page (or to padding), and each query token's MaxSim match can
be credited to the page its best document token came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from docpc_retrievers.documents.composition import GridLayout
from docpc_retrievers.scoring.maxsim import maxsim_matches

__all__ = ["EMPTY_CELLS", "IMAGE_PROMPT", "QUERY_PROMPT", "TokenGrid", "evidence_shares", "score_shares", "shares_text", "split_terms",
           "token_pages"]


@dataclass(frozen=True)
class TokenGrid:
    """Where a grid's visual tokens sit among its stored vectors.

    ``start``: row of the first visual token in the stored ``[n, dim]`` matrix;
    the ``rows * cols`` visual tokens follow contiguously, row-major over the image.
    """

    start: int
    rows: int
    cols: int

    @property
    def count(self) -> int:
        return self.rows * self.cols

    def to_dict(self) -> dict[str, int]:
        return {"start": self.start, "rows": self.rows, "cols": self.cols}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenGrid:
        return cls(int(data["start"]), int(data["rows"]), int(data["cols"]))

    @classmethod
    def from_visual_mask(cls, visual_mask: np.ndarray, patch_grid: tuple[int, int] | None) -> TokenGrid | None:
        """Build from an encoder's visual-row mask; None when the visual rows are not one contiguous block."""
        if patch_grid is None:
            return None
        rows_idx = np.flatnonzero(np.asarray(visual_mask, dtype=bool))
        rows, cols = patch_grid
        if rows_idx.size != rows * cols or rows_idx.size == 0:
            return None
        if rows_idx[-1] - rows_idx[0] + 1 != rows_idx.size:
            return None
        return cls(int(rows_idx[0]), int(rows), int(cols))


def token_pages(layout: GridLayout, rows: int, cols: int) -> np.ndarray:
    """Page index (0-based) under the centre of each of ``rows x cols`` visual tokens, row-major; -1 for none.

    The processor resizes the whole grid image to a multiple of its patch size,
    so token ``(r, c)`` covers the same fraction of the original image:
    its centre is at ``((c + 0.5) * W / cols, (r + 0.5) * H / rows)``.
    """
    if rows < 1 or cols < 1:
        raise ValueError(f"token grid must be at least 1x1, got {rows}x{cols}")
    out = np.full(rows * cols, -1, dtype=np.int64)
    for r in range(rows):
        y = (r + 0.5) * layout.height / rows
        for c in range(cols):
            x = (c + 0.5) * layout.width / cols
            page = layout.page_at(x, y)
            if page is not None:
                out[r * cols + c] = page
    return out


#: The parts of a grid score that no page holds, named as every front end prints them.
QUERY_PROMPT, IMAGE_PROMPT, EMPTY_CELLS = "query prompt tokens", "image prompt rows", "empty cells"


def split_terms(values: Sequence[float], included: Sequence[bool], pages: Sequence[int | None],
                visual: Sequence[bool]) -> tuple[dict[int, float], dict[str, float]]:
    """The one definition of where a grid score went, as shares of its positive terms adding up to 1.

    Per query token: its term ``values[t]`` (the max it won), whether it is one of the query's own words
    (``included``), the page it was won on (``pages[t]``, None when none) and whether it was won by a visual token
    (``visual``). A prompt token's term is :data:`QUERY_PROMPT` wherever it was won; a word's term goes to its page,
    else to :data:`EMPTY_CELLS` (a patch outside every page) or :data:`IMAGE_PROMPT` (a non-visual row). Returns
    (page -> share, other part -> share); both empty when no term is positive.
    """
    page_credit: dict[int, float] = {}
    other: dict[str, float] = {}
    for value, word, page, patch in zip(values, included, pages, visual):
        if value <= 0:
            continue
        if not word:
            other[QUERY_PROMPT] = other.get(QUERY_PROMPT, 0.0) + float(value)
        elif page is not None:
            page_credit[page] = page_credit.get(page, 0.0) + float(value)
        else:
            key = EMPTY_CELLS if patch else IMAGE_PROMPT
            other[key] = other.get(key, 0.0) + float(value)
    total = sum(page_credit.values()) + sum(other.values())
    if total <= 0:
        return {}, {}
    return {p: v / total for p, v in page_credit.items()}, {k: v / total for k, v in other.items()}


def shares_text(pages: Mapping[int, float], other: Mapping[str, float], *, at_least: float = 0.005) -> str:
    """``page 1 22%, page 3 5%, query prompt tokens 53%, image prompt rows 15%``: pages (1-based) by share, then the
    parts no page holds, each shown from ``at_least``; what every front end prints for a hit."""
    parts = sorted(((f"page {p}", v) for p, v in pages.items()), key=lambda kv: -kv[1])
    parts += sorted(other.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {value:.0%}" for name, value in parts if value >= at_least)


def score_shares(
    query: np.ndarray,
    document: np.ndarray,
    grid: TokenGrid,
    pages_of_tokens: np.ndarray,
    anchors: np.ndarray | None = None,
    included: Sequence[bool] | None = None,
) -> tuple[dict[int, float], dict[str, float]]:
    """:func:`split_terms` of ``query [t, dim]`` against ``document [n, dim]``: each page's share (0-based) and the
    shares no page holds. ``included[t]``: whether query token ``t`` is one of the query's words (None: all are).
    ``anchors[r]`` (pooled stores) is the encoder row that stored row ``r`` stands for."""
    best_row, best = maxsim_matches(query, document)
    pages: list[int | None] = []
    visual: list[bool] = []
    for row in best_row:
        token = (int(anchors[row]) if anchors is not None else int(row)) - grid.start
        inside = 0 <= token < grid.count
        page = int(pages_of_tokens[token]) if inside else -1
        pages.append(page if page >= 0 else None)
        visual.append(inside)
    words = list(included) if included is not None else [True] * len(best_row)
    return split_terms(best.tolist(), words, pages, visual)


def evidence_shares(
    query: np.ndarray,
    document: np.ndarray,
    grid: TokenGrid,
    pages_of_tokens: np.ndarray,
    anchors: np.ndarray | None = None,
) -> dict[int, float]:
    """Each page's share (0-based) of the MaxSim score, every query token counted as a word (:func:`score_shares`
    without token labels)."""
    return score_shares(query, document, grid, pages_of_tokens, anchors)[0]
