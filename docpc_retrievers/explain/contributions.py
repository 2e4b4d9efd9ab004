"""Per query token: which image patch won its MaxSim, by how much, and where that patch is in pixels.

MaxSim is ``sum_t max_r <q_t, d_r>``: every query token contributes exactly
one term, the similarity of its best document row. Laid back onto the image
through the encoder's token grid (Qwen families cut the resized image into a
``rows x cols`` grid of merged patches, one visual token each, row-major),
the terms say which region of the grid carried the score. The terms of the
included tokens plus those of the excluded ones (prompt, augmentation) sum to
the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from docpc_retrievers.documents.composition import GridLayout
from docpc_retrievers.explain.shares import split_terms
from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.scoring.maxsim import maxsim_matches

__all__ = ["TokenContribution", "contribution_shares", "token_box", "token_contributions"]

Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class TokenContribution:
    """One query token's MaxSim term.

    ``value``: the similarity of its best document row (its share of the score);
    ``included``: False for prompt or augmentation tokens (left out of pictures);
    ``patch``: ``(row, col)`` of the winning visual token in the token grid, None
    when a non-visual row (a prompt token of the image) won; ``box``: that patch
    in image pixels ``(x0, y0, x1, y1)``; ``page``: 1-based page under it, if any.
    """

    index: int
    text: str
    value: float
    included: bool
    patch: tuple[int, int] | None
    box: Box | None
    page: int | None


def token_box(grid: TokenGrid, row: int, col: int, width: int, height: int) -> Box:
    """Pixel box of visual token ``(row, col)`` in a ``width x height`` image (the processor resizes the whole image)."""
    return (
        int(round(col * width / grid.cols)),
        int(round(row * height / grid.rows)),
        int(round((col + 1) * width / grid.cols)),
        int(round((row + 1) * height / grid.rows)),
    )


def token_contributions(
    query: np.ndarray,
    document: np.ndarray,
    grid: TokenGrid,
    image_size: tuple[int, int],
    *,
    anchors: np.ndarray | None = None,
    labels: Sequence[tuple[str, bool]] | None = None,
    layout: GridLayout | None = None,
    page: int | None = None,
) -> list[TokenContribution]:
    """Every query token's term of the MaxSim of ``query [t, dim]`` against ``document [n, dim]``.

    ``anchors[r]`` (pooled stores): the encoder row stored row ``r`` stands for.
    ``labels``: per query row, its text and whether it is one of the query's own
    words (from the encoder; without them every token is included). ``layout``
    (a grid, whose pixels the image has) names the page under each patch; a page
    image passes its 1-based ``page`` number instead.
    """
    rows, values = maxsim_matches(query, document)
    if labels is not None and len(labels) != len(rows):
        raise ValueError(f"{len(labels)} query token labels for {len(rows)} query vectors")
    width, height = image_size
    page_number = page
    out: list[TokenContribution] = []
    for t, (row, value) in enumerate(zip(rows, values)):
        text, included = labels[t] if labels is not None else (f"#{t}", True)
        token = (int(anchors[row]) if anchors is not None else int(row)) - grid.start
        patch: tuple[int, int] | None = None
        box: Box | None = None
        page = None
        if 0 <= token < grid.count:
            r, c = divmod(token, grid.cols)
            patch = (r, c)
            box = token_box(grid, r, c, width, height)
            page = _page_under(box, layout) if layout is not None else page_number
        out.append(TokenContribution(t, text, float(value), bool(included), patch, box, page))
    return out


def _page_under(box: Box, layout: GridLayout) -> int | None:
    """1-based page under the centre of ``box`` (grid pixels), None over padding or a blank cell."""
    index = layout.page_at((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    return None if index is None else int(index) + 1


def contribution_shares(contributions: Sequence[TokenContribution]) -> tuple[dict[int, float], dict[str, float]]:
    """Matched terms split by the one definition (:func:`~docpc_retrievers.explain.shares.split_terms`): each page's
    share (1-based) and the shares no page holds."""
    return split_terms([c.value for c in contributions], [c.included for c in contributions],
                       [c.page for c in contributions], [c.patch is not None for c in contributions])
