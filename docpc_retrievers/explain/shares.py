"""Where a grid score went: the one definition of a hit's shares (pages, the query's prompt tokens, the image's
prompt rows, empty cells), for search results, explanations, reports and every front end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.scoring.maxsim import maxsim_matches

__all__ = ["EMPTY_CELLS", "IMAGE_PROMPT", "QUERY_PROMPT", "evidence_shares", "query_labels", "score_shares",
           "shares_text", "split_terms"]

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


def query_labels(encoder: object, query: str, rows: int) -> list[tuple[str, bool]] | None:
    """Per query row, its text and whether it is one of the query's own words (not its prompt), as the encoder
    names them; None when it does not, or names another number of rows (every row then counts as a word)."""
    tokens = getattr(encoder, "query_tokens", None)
    labels = tokens(query) if callable(tokens) else None
    return list(labels) if labels is not None and len(labels) == rows else None
