"""Evidence pages from a grid embedding, without re-encoding anything.

A Qwen-family processor cuts the (resized) grid image into a ``rows x cols``
grid of merged patches, one visual token each, in row-major order. The
composition layout says which pixel belongs to which page. So each visual
token maps to a page (or to padding), and each query token's MaxSim match can
be credited to the page its best document token came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from docpc_retrievers.documents.composition import GridLayout

__all__ = ["TokenGrid", "token_pages"]


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
