"""Tests of docpc_retrievers.documents.composition: grid shapes, page placement, layout mapping."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

from docpc_retrievers.documents.composition import (
    DEFAULT_CELL_SIZE,
    CellPlacement,
    ComposedGrid,
    GridLayout,
    compose_grid,
    grid_shape,
)

WHITE = (255, 255, 255)


def colour(i: int) -> tuple[int, int, int]:
    """A distinct, non-white solid colour per page number."""
    return ((37 * i + 40) % 200, (91 * i + 10) % 200, (53 * i + 90) % 200)


def solid_pages(n: int, size: tuple[int, int] = (100, 130)) -> list[Image.Image]:
    return [Image.new("RGB", size, colour(i)) for i in range(n)]


def assert_exact_placement(grid: ComposedGrid, background: tuple[int, int, int] = WHITE) -> None:
    """Every pixel inside a page_box has that page's colour; every other pixel is background."""
    pixels = np.asarray(grid.image)
    covered = np.zeros(pixels.shape[:2], dtype=bool)
    for placement in grid.layout.cells:
        if placement.page_box is None:
            continue
        x0, y0, x1, y1 = placement.page_box
        assert np.all(pixels[y0:y1, x0:x1] == colour(placement.cell)), f"cell {placement.cell}"
        covered[y0:y1, x0:x1] = True
    assert np.all(pixels[~covered] == background)


@pytest.mark.parametrize(
    ("k", "expected"),
    [(1, (1, 1)), (2, (1, 2)), (3, (2, 2)), (4, (2, 2)), (5, (2, 3)), (6, (2, 3)), (7, (3, 3)),
     (9, (3, 3)), (10, (3, 4)), (12, (3, 4)), (13, (4, 4)), (16, (4, 4)), (17, (4, 5)), (25, (5, 5))],
)
def test_grid_shape_table(k: int, expected: tuple[int, int]) -> None:
    assert grid_shape(k) == expected


def test_grid_shape_rule_for_many_k() -> None:
    for k in range(1, 200):
        rows, cols = grid_shape(k)
        assert cols == math.ceil(math.sqrt(k))
        assert rows == math.ceil(k / cols)
        assert rows * cols >= k > (rows - 1) * cols


@pytest.mark.parametrize("bad", [0, -3])
def test_grid_shape_rejects_non_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="k must be >= 1"):
        grid_shape(bad)


@pytest.mark.parametrize("k", [1, 4, 9, 16])
def test_square_grids_default_cell_size(k: int) -> None:
    grid = compose_grid(solid_pages(k), list(range(k)))
    side = math.isqrt(k)
    layout = grid.layout
    assert (layout.rows, layout.cols) == (side, side)
    assert (layout.cell_width, layout.cell_height) == DEFAULT_CELL_SIZE
    assert grid.image.size == (side * DEFAULT_CELL_SIZE[0], side * DEFAULT_CELL_SIZE[1])
    assert (layout.width, layout.height) == grid.image.size
    assert grid.image.mode == "RGB"
    assert len(layout.cells) == k
    for placement in layout.cells:
        row, col = divmod(placement.cell, side)
        assert (placement.row, placement.col) == (row, col)
        assert placement.cell_box == (col * 512, row * 662, (col + 1) * 512, (row + 1) * 662)
        assert placement.page_index == placement.cell
        x0, y0, x1, y1 = placement.page_box
        cx0, cy0, cx1, cy1 = placement.cell_box
        assert cx0 <= x0 < x1 <= cx1 and cy0 <= y0 < y1 <= cy1
        # 100x130 page scaled into 512x662: height limited (130*512/100 = 665.6 > 662)
        assert y1 - y0 == 662
        assert x1 - x0 == round(100 * 662 / 130)
        # centred horizontally
        assert abs((x0 - cx0) - (cx1 - x1)) <= 1
    assert_exact_placement(grid)


def test_landscape_page_in_portrait_cell_is_centred_vertically() -> None:
    page = Image.new("RGB", (800, 400), colour(0))
    grid = compose_grid([page], [7], cell_size=(512, 662))
    placement = grid.layout.cells[0]
    assert placement.page_box == (0, 203, 512, 459)
    assert grid.image.getpixel((256, 10)) == WHITE
    assert grid.image.getpixel((256, 661)) == WHITE
    assert grid.image.getpixel((256, 331)) == colour(0)
    assert grid.layout.page_at(256, 331) == 7
    assert grid.layout.page_at(256, 202) is None
    assert grid.layout.page_at(256, 203) == 7
    assert grid.layout.page_at(256, 458) == 7
    assert grid.layout.page_at(256, 459) is None
    assert_exact_placement(grid)


def test_portrait_page_in_landscape_output_is_centred_horizontally() -> None:
    page = Image.new("RGB", (100, 400), colour(0))
    grid = compose_grid([page], [0], size=(1000, 300))
    placement = grid.layout.cells[0]
    assert grid.image.size == (1000, 300)
    assert placement.page_box == (462, 0, 537, 300)
    assert grid.image.getpixel((10, 150)) == WHITE
    assert grid.image.getpixel((500, 150)) == colour(0)
    assert_exact_placement(grid)


def test_mixed_orientation_pages_each_fit_their_cell() -> None:
    pages = [
        Image.new("RGB", (842, 595), colour(0)),  # landscape A4
        Image.new("RGB", (595, 842), colour(1)),  # portrait A4
        Image.new("RGB", (300, 300), colour(2)),  # square
        Image.new("RGB", (50, 1000), colour(3)),  # extreme strip
    ]
    grid = compose_grid(pages, [0, 1, 2, 3], cell_size=(200, 260))
    boxes = [c.page_box for c in grid.layout.cells]
    assert boxes[0] == (0, 59, 200, 200)  # 200 x 141
    assert boxes[1][2] - boxes[1][0] == 200 - 16 and boxes[1][3] - boxes[1][1] == 260  # 184 x 260
    assert boxes[2] == (0, 290, 200, 490)
    assert boxes[3][3] - boxes[3][1] == 260 and boxes[3][2] - boxes[3][0] == 13
    assert_exact_placement(grid)


def test_k_larger_than_pages_leaves_blank_cells() -> None:
    grid = compose_grid(solid_pages(3), [0, 1, 2], k=4)
    layout = grid.layout
    assert (layout.rows, layout.cols) == (2, 2)
    blank = layout.cells[3]
    assert blank.page_index is None and blank.page_box is None
    assert blank.cell_box == (512, 662, 1024, 1324)
    x0, y0, x1, y1 = blank.cell_box
    assert np.all(np.asarray(grid.image)[y0:y1, x0:x1] == WHITE)
    assert layout.page_at(700, 900) is None
    assert layout.page_indices == [0, 1, 2]
    assert_exact_placement(grid)


def test_no_shape_uses_page_count() -> None:
    grid = compose_grid(solid_pages(5), [0, 1, 2, 3, 4], cell_size=(40, 50))
    assert (grid.layout.rows, grid.layout.cols) == (2, 3)
    assert grid.layout.cells[5].page_index is None


@pytest.mark.parametrize("shape", [(1, 3), (3, 1), (2, 4)])
def test_explicit_shape(shape: tuple[int, int]) -> None:
    rows, cols = shape
    grid = compose_grid(solid_pages(3), [0, 1, 2], shape=shape, cell_size=(60, 80))
    assert (grid.layout.rows, grid.layout.cols) == shape
    assert grid.image.size == (cols * 60, rows * 80)
    assert len(grid.layout.cells) == rows * cols
    assert [c.page_index for c in grid.layout.cells][:3] == [0, 1, 2]
    assert all(c.page_index is None for c in grid.layout.cells[3:])
    assert_exact_placement(grid)


def test_pages_are_placed_row_major_in_given_order() -> None:
    pages = solid_pages(4)
    grid = compose_grid(pages, [40, 30, 20, 10], cell_size=(50, 50))
    by_cell = {c.cell: c for c in grid.layout.cells}
    assert [by_cell[i].page_index for i in range(4)] == [40, 30, 20, 10]
    assert grid.image.getpixel((75, 25)) == colour(1)  # row 0, col 1
    assert grid.image.getpixel((25, 75)) == colour(2)  # row 1, col 0
    assert grid.layout.page_at(75, 25) == 30
    assert grid.layout.page_at(25, 75) == 20


def test_size_sets_whole_output_and_leftover_stays_background() -> None:
    grid = compose_grid(solid_pages(4, (100, 100)), [0, 1, 2, 3], size=(1001, 703))
    layout = grid.layout
    assert grid.image.size == (1001, 703)
    assert (layout.cell_width, layout.cell_height) == (500, 351)
    pixels = np.asarray(grid.image)
    assert np.all(pixels[:, 1000] == WHITE)
    assert np.all(pixels[702, :] == WHITE)
    assert layout.page_at(1000, 10) is None
    assert layout.page_at(10, 702) is None
    assert_exact_placement(grid)


def test_size_overrides_cell_size() -> None:
    grid = compose_grid(solid_pages(4), [0, 1, 2, 3], size=(400, 600), cell_size=(10, 10))
    assert grid.image.size == (400, 600)
    assert (grid.layout.cell_width, grid.layout.cell_height) == (200, 300)


def test_custom_background_colour_in_padding() -> None:
    bg = (10, 20, 30)
    grid = compose_grid([Image.new("RGB", (400, 100), colour(0))], [0], cell_size=(200, 200), background=bg)
    assert grid.image.getpixel((100, 5)) == bg
    assert grid.image.getpixel((100, 100)) == colour(0)
    assert_exact_placement(grid, background=bg)


def test_non_rgb_inputs_give_rgb_output_and_alpha_is_flattened() -> None:
    grey = Image.new("L", (50, 50), 128)
    transparent = Image.new("RGBA", (50, 50), (255, 0, 0, 0))
    opaque = Image.new("RGBA", (50, 50), (0, 0, 255, 255))
    palette = Image.new("RGB", (50, 50), (0, 200, 0)).convert("P", palette=Image.Palette.ADAPTIVE)
    bg = (1, 2, 3)
    grid = compose_grid([grey, transparent, opaque, palette], [0, 1, 2, 3], cell_size=(50, 50), background=bg)
    assert grid.image.mode == "RGB"
    assert grid.image.getpixel((25, 25)) == (128, 128, 128)
    assert grid.image.getpixel((75, 25)) == bg
    assert grid.image.getpixel((25, 75)) == (0, 0, 255)
    assert grid.image.getpixel((75, 75)) == (0, 200, 0)


def test_page_at_and_cell_of_page() -> None:
    grid = compose_grid(solid_pages(4, (200, 100)), [5, 6, 7, 8], cell_size=(100, 100))
    layout = grid.layout
    for placement in layout.cells:
        x0, y0, x1, y1 = placement.page_box
        assert layout.page_at((x0 + x1) / 2, (y0 + y1) / 2) == placement.page_index
        assert layout.page_at(x0, y0) == placement.page_index
        assert layout.page_at(x1 - 1, y1 - 1) == placement.page_index
        assert layout.page_at(x0, y0 - 1) is None  # padding above the page
        assert layout.cell_of_page(placement.page_index) == placement
    assert layout.page_at(-1, 10) is None
    assert layout.page_at(10, 200) is None
    assert layout.page_at(200, 10) is None
    assert layout.cell_of_page(99) is None


def test_layout_dict_round_trip_is_exact() -> None:
    grid = compose_grid(solid_pages(3, (120, 90)), [2, 9, 4], k=4, cell_size=(64, 80))
    layout = grid.layout
    data = layout.to_dict()
    restored = GridLayout.from_dict(json.loads(json.dumps(data)))
    assert restored == layout
    assert restored.to_dict() == data
    assert isinstance(restored.cells[0].cell_box, tuple)
    assert restored.cells[3].page_box is None
    assert all(isinstance(c, CellPlacement) for c in restored.cells)


def test_layout_from_dict_rejects_unknown_version_and_bad_cells() -> None:
    data = compose_grid(solid_pages(1), [0], cell_size=(10, 10)).layout.to_dict()
    with pytest.raises(ValueError, match="version"):
        GridLayout.from_dict({**data, "version": 99})
    with pytest.raises(ValueError, match="cells"):
        GridLayout.from_dict({**data, "rows": 2})


def test_layout_is_frozen() -> None:
    layout = compose_grid(solid_pages(1), [0], cell_size=(10, 10)).layout
    with pytest.raises(AttributeError):
        layout.rows = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "n_pages", "message"),
    [
        ({"shape": (1, 2)}, 3, "do not fit"),
        ({"k": 2}, 3, "k=2"),
        ({"k": 4, "shape": (2, 2)}, 2, "not both"),
        ({}, 0, "no pages"),
        ({"size": (1, 1), "k": 4}, 2, "too small"),
        ({"cell_size": (0, 10)}, 1, "cell_size"),
        ({"shape": (0, 2)}, 0, "shape"),
        ({"background": (300, 0, 0)}, 1, "background"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, object], n_pages: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compose_grid(solid_pages(n_pages), list(range(n_pages)), **kwargs)  # type: ignore[arg-type]


def test_mismatched_or_duplicate_indices_rejected() -> None:
    with pytest.raises(ValueError, match="page indices"):
        compose_grid(solid_pages(2), [0])
    with pytest.raises(ValueError, match="distinct"):
        compose_grid(solid_pages(2), [3, 3])
    with pytest.raises(ValueError, match=">= 0"):
        compose_grid(solid_pages(1), [-1])


def test_all_blank_grid_with_k_and_no_pages() -> None:
    grid = compose_grid([], [], k=4, cell_size=(10, 10))
    assert grid.image.size == (20, 20)
    assert np.all(np.asarray(grid.image) == WHITE)
    assert grid.layout.page_indices == []
