"""Compose a document's selected page images into one grid image, and describe its layout.

The :class:`GridLayout` records where each page sits in the grid so that a region of the
grid (e.g. a patch with a high similarity score) can be mapped back to its page.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from docpc_retrievers.config import DEFAULT_CELL_SIZE, grid_shape  # the rules settings check, defined with them

__all__ = [
    "DEFAULT_CELL_SIZE",
    "CellPlacement",
    "ComposedGrid",
    "GridLayout",
    "compose_grid",
    "grid_shape",
]

logger = logging.getLogger(__name__)


Box = tuple[int, int, int, int]

_LAYOUT_VERSION = 1




def _box(value: Sequence[Any]) -> Box:
    """Convert a 4-item sequence of ints into a box tuple, checking its shape."""
    if len(value) != 4:
        raise ValueError(f"a box needs 4 coordinates (x0, y0, x1, y1), got {value!r}")
    x0, y0, x1, y1 = (operator.index(v) for v in value)
    return (x0, y0, x1, y1)


@dataclass(frozen=True)
class CellPlacement:
    """One grid cell: its position, the page it holds (None if blank) and pixel boxes.

    Boxes are (x0, y0, x1, y1) with x1/y1 exclusive; ``page_box`` is where the scaled page
    actually sits inside ``cell_box`` (None for a blank cell).
    """

    cell: int
    row: int
    col: int
    page_index: int | None
    cell_box: Box
    page_box: Box | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of this placement (boxes as lists)."""
        return {
            "cell": self.cell,
            "row": self.row,
            "col": self.col,
            "page_index": self.page_index,
            "cell_box": list(self.cell_box),
            "page_box": None if self.page_box is None else list(self.page_box),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellPlacement:
        """Rebuild a placement from :meth:`to_dict` output (also after a JSON round trip)."""
        page_index = data["page_index"]
        page_box = data["page_box"]
        return cls(
            cell=operator.index(data["cell"]),
            row=operator.index(data["row"]),
            col=operator.index(data["col"]),
            page_index=None if page_index is None else operator.index(page_index),
            cell_box=_box(data["cell_box"]),
            page_box=None if page_box is None else _box(page_box),
        )


@dataclass(frozen=True)
class GridLayout:
    """Geometry of a composed grid: its size, cell size and every cell in row-major order."""

    rows: int
    cols: int
    width: int
    height: int
    cell_width: int
    cell_height: int
    cells: tuple[CellPlacement, ...]

    def __post_init__(self) -> None:
        if len(self.cells) != self.rows * self.cols:
            raise ValueError(
                f"a {self.rows}x{self.cols} layout needs {self.rows * self.cols} cells, got {len(self.cells)}"
            )

    @property
    def page_indices(self) -> list[int]:
        """Page indices held by the grid, in cell (row-major) order."""
        return [c.page_index for c in self.cells if c.page_index is not None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict that :meth:`from_dict` turns back into an equal layout."""
        return {
            "version": _LAYOUT_VERSION,
            "rows": self.rows,
            "cols": self.cols,
            "width": self.width,
            "height": self.height,
            "cell_width": self.cell_width,
            "cell_height": self.cell_height,
            "cells": [c.to_dict() for c in self.cells],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GridLayout:
        """Rebuild a layout stored with :meth:`to_dict`."""
        version = data.get("version", _LAYOUT_VERSION)
        if version != _LAYOUT_VERSION:
            raise ValueError(f"unsupported grid layout version {version!r} (expected {_LAYOUT_VERSION})")
        return cls(
            rows=operator.index(data["rows"]),
            cols=operator.index(data["cols"]),
            width=operator.index(data["width"]),
            height=operator.index(data["height"]),
            cell_width=operator.index(data["cell_width"]),
            cell_height=operator.index(data["cell_height"]),
            cells=tuple(CellPlacement.from_dict(c) for c in data["cells"]),
        )

    def page_at(self, x: float, y: float) -> int | None:
        """Page index shown at pixel (x, y); None in padding, blank cells or outside the grid."""
        px, py = math.floor(x), math.floor(y)
        if not (0 <= px < self.width and 0 <= py < self.height):
            return None
        col, row = px // self.cell_width, py // self.cell_height
        if col >= self.cols or row >= self.rows:
            return None  # leftover strip when the output size is not a multiple of the cell size
        placement = self.cells[row * self.cols + col]
        if placement.page_box is None:
            return None
        x0, y0, x1, y1 = placement.page_box
        return placement.page_index if x0 <= px < x1 and y0 <= py < y1 else None

    def cell_of_page(self, page_index: int) -> CellPlacement | None:
        """The cell holding the given page, or None when the page is not in the grid."""
        for placement in self.cells:
            if placement.page_index == page_index:
                return placement
        return None


@dataclass(frozen=True, eq=False)
class ComposedGrid:
    """A composed RGB grid image together with the layout that maps pixels back to pages."""

    image: Image.Image
    layout: GridLayout


def _to_rgb(page: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """RGB version of a page image; transparent areas are flattened onto the background."""
    if page.mode == "RGB":
        return page
    if page.mode in ("RGBA", "LA", "PA") or (page.mode == "P" and "transparency" in page.info):
        rgba = page.convert("RGBA")
        flat = Image.new("RGB", rgba.size, background)
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return page.convert("RGB")


def _fit(width: int, height: int, cell_width: int, cell_height: int) -> tuple[int, int]:
    """Largest size with the page's aspect ratio that fits the cell (at least 1x1 pixel)."""
    scale = min(cell_width / width, cell_height / height)
    return (
        min(cell_width, max(1, round(width * scale))),
        min(cell_height, max(1, round(height * scale))),
    )


def _check_pair(value: Sequence[int], name: str) -> tuple[int, int]:
    """Validate a (a, b) pair of positive integers."""
    if len(value) != 2:
        raise ValueError(f"{name} must be a pair of positive integers, got {value!r}")
    a, b = (operator.index(v) for v in value)
    if a < 1 or b < 1:
        raise ValueError(f"{name} must be a pair of positive integers, got {value!r}")
    return a, b


def compose_grid(
    pages: Sequence[Image.Image],
    page_indices: Sequence[int],
    *,
    shape: tuple[int, int] | None = None,
    k: int | None = None,
    cell_size: tuple[int, int] = DEFAULT_CELL_SIZE,
    size: tuple[int, int] | None = None,
    background: tuple[int, int, int] = (255, 255, 255),
) -> ComposedGrid:
    """Place page images row-major into equal cells of one RGB image, aspect ratio kept.

    The shape is ``shape=(rows, cols)``, else ``grid_shape(k)``, else
    ``grid_shape(len(pages))``; unused cells stay blank. ``size=(W, H)`` fixes the output
    size (cells W//cols x H//rows, leftover pixels at the right/bottom stay background)
    and overrides ``cell_size``.
    """
    if len(pages) != len(page_indices):
        raise ValueError(f"got {len(pages)} page images but {len(page_indices)} page indices")
    indices = [operator.index(i) for i in page_indices]
    if any(i < 0 for i in indices):
        raise ValueError(f"page indices must be >= 0, got {indices}")
    if len(set(indices)) != len(indices):
        raise ValueError(f"page indices must be distinct, got {indices}")
    if shape is not None and k is not None:
        raise ValueError("pass shape or k, not both")
    if shape is not None:
        rows, cols = _check_pair(shape, "shape")
    elif k is not None:
        rows, cols = grid_shape(k)
        if len(pages) > k:
            raise ValueError(f"got {len(pages)} pages for a grid of k={k}")
    else:
        if not pages:
            raise ValueError("no pages to compose; pass shape or k for an all-blank grid")
        rows, cols = grid_shape(len(pages))
    if len(pages) > rows * cols:
        raise ValueError(f"{len(pages)} pages do not fit a {rows}x{cols} grid")
    if len(background) != 3 or any(not 0 <= int(c) <= 255 for c in background):
        raise ValueError(f"background must be an (r, g, b) tuple of 0..255, got {background!r}")
    fill = (int(background[0]), int(background[1]), int(background[2]))

    if size is not None:
        width, height = _check_pair(size, "size")
        if width < cols or height < rows:
            raise ValueError(f"size {size!r} is too small for a {rows}x{cols} grid")
        cell_width, cell_height = width // cols, height // rows
    else:
        cell_width, cell_height = _check_pair(cell_size, "cell_size")
        width, height = cell_width * cols, cell_height * rows

    canvas = Image.new("RGB", (width, height), fill)
    cells: list[CellPlacement] = []
    for cell in range(rows * cols):
        row, col = divmod(cell, cols)
        x0, y0 = col * cell_width, row * cell_height
        cell_box = (x0, y0, x0 + cell_width, y0 + cell_height)
        if cell >= len(pages):
            cells.append(CellPlacement(cell, row, col, None, cell_box, None))
            continue
        page = _to_rgb(pages[cell], fill)
        if page.width < 1 or page.height < 1:
            raise ValueError(f"page image {cell} is empty ({page.width}x{page.height})")
        target = _fit(page.width, page.height, cell_width, cell_height)
        if page.size != target:
            page = page.resize(target, Image.Resampling.LANCZOS)
        px, py = x0 + (cell_width - target[0]) // 2, y0 + (cell_height - target[1]) // 2
        canvas.paste(page, (px, py))
        page_box = (px, py, px + target[0], py + target[1])
        cells.append(CellPlacement(cell, row, col, indices[cell], cell_box, page_box))

    layout = GridLayout(rows, cols, width, height, cell_width, cell_height, tuple(cells))
    logger.debug("composed %d pages into a %dx%d grid of %dx%d px", len(pages), rows, cols, width, height)
    return ComposedGrid(canvas, layout)
