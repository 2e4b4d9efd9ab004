"""Token-to-page attribution on grids whose geometry is known, and agreement with the real processor."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from docpc_retrievers.documents.composition import compose_grid
from docpc_retrievers.explain.shares import evidence_shares
from docpc_retrievers.scoring.evidence import TokenGrid, token_pages


def _pages(n: int, size: tuple[int, int] = (100, 100)) -> list[Image.Image]:
    return [Image.new("RGB", size, (i * 40 % 256, 0, 0)) for i in range(n)]


def test_square_pages_in_a_2x2_grid_map_tokens_to_quadrants() -> None:
    grid = compose_grid(_pages(4), [10, 11, 12, 13], k=4, cell_size=(100, 100))
    got = token_pages(grid.layout, 8, 8).reshape(8, 8)
    expected = np.empty((8, 8), dtype=np.int64)
    for r in range(8):
        for c in range(8):
            expected[r, c] = [10, 11, 12, 13][(r // 4) * 2 + (c // 4)]
    np.testing.assert_array_equal(got, expected)


def test_k1_every_token_is_the_page() -> None:
    grid = compose_grid(_pages(1), [0], k=1, cell_size=(120, 120))
    assert set(token_pages(grid.layout, 5, 7).tolist()) == {0}


def test_k16_grid() -> None:
    grid = compose_grid(_pages(16), list(range(16)), k=16, cell_size=(50, 50))
    got = token_pages(grid.layout, 4, 4)
    np.testing.assert_array_equal(got, np.arange(16))
    finer = token_pages(grid.layout, 8, 8).reshape(8, 8)
    assert finer[0, 0] == finer[1, 1] == 0 and finer[7, 7] == 15 and finer[0, 7] == 3


def test_landscape_pages_leave_padding_rows_unattributed() -> None:
    # A 200x100 page in a 100x100 cell is scaled to 100x50, centred: rows y < 25 and y >= 75 are padding.
    grid = compose_grid(_pages(1, (200, 100)), [0], k=1, cell_size=(100, 100))
    got = token_pages(grid.layout, 4, 4).reshape(4, 4)  # token centres at y = 12.5, 37.5, 62.5, 87.5
    np.testing.assert_array_equal(got[0], [-1] * 4)
    np.testing.assert_array_equal(got[3], [-1] * 4)
    np.testing.assert_array_equal(got[1:3], np.zeros((2, 4)))


def test_blank_cells_are_unattributed() -> None:
    grid = compose_grid(_pages(3), [0, 1, 2], k=4, cell_size=(100, 100))
    got = token_pages(grid.layout, 2, 2)
    np.testing.assert_array_equal(got, [0, 1, 2, -1])


def test_evidence_shares_credit_the_page_of_each_winning_token() -> None:
    e = np.eye(6, dtype=np.float32)
    # Stored rows: 1 prompt token, then a 1x2 visual grid (page 0 | page 1), then 1 prompt token.
    doc = np.stack([e[5], e[0], e[1], e[4]])
    grid = TokenGrid(start=1, rows=1, cols=2)
    pages = np.array([0, 1])
    query = np.stack([e[0], e[0], e[1], e[4]])  # two hits on page 0, one on page 1, one on a prompt token
    shares = evidence_shares(query, doc, grid, pages)
    assert shares == pytest.approx({0: 0.5, 1: 0.25})
    assert evidence_shares(-query, doc, grid, pages) == {}  # nothing positive to share


def test_token_grid_from_mask_requires_one_contiguous_block() -> None:
    assert TokenGrid.from_visual_mask(np.array([0, 1, 1, 1, 1, 0], bool), (2, 2)) == TokenGrid(1, 2, 2)
    assert TokenGrid.from_visual_mask(np.array([1, 0, 1, 1, 1], bool), (2, 2)) is None
    assert TokenGrid.from_visual_mask(np.array([1, 1, 1], bool), (2, 2)) is None
    assert TokenGrid.from_visual_mask(np.array([1, 1], bool), None) is None
    assert TokenGrid.from_dict(TokenGrid(3, 4, 5).to_dict()) == TokenGrid(3, 4, 5)


def test_real_processor_geometry_matches_the_stored_token_grid(tiny_encoder) -> None:
    pages = [Image.new("RGB", (300, 400), c) for c in ("red", "green", "blue")] + [Image.new("RGB", (400, 300), "black")]
    grid = compose_grid(pages, [0, 1, 2, 3], k=4)
    (item,) = tiny_encoder.encode_images_with_info([grid.image])
    tg = TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid)
    assert tg is not None
    assert (tg.rows, tg.cols) == tiny_encoder.image_patch_grid(grid.image.size)
    assert int(item.visual_mask.sum()) == tg.count
    assert item.embeddings.shape[0] > tg.count  # prompt tokens surround the visual block
    owners = token_pages(grid.layout, tg.rows, tg.cols)
    assert set(owners.tolist()) <= {-1, 0, 1, 2, 3}
    assert {0, 1, 2, 3} <= set(owners.tolist())


def test_index_results_carry_evidence_pages(tmp_path: Path, tiny_checkpoint: Path) -> None:
    from docpc_retrievers import DocPCIndex

    from docpc_retrievers.testing.support import FOUR_PAGES as pdf
    # Visual rows only: every winning row is a visual token, so shares must add up to (almost) 1;
    # the remainder is tokens over the cell padding around the pages.
    kwargs = {"encoder_kwargs": {"mask_non_image_embeddings": True, "device": "cpu"}}
    with DocPCIndex.from_pdfs([pdf], tmp_path / "s", model=tiny_checkpoint, **kwargs) as index:
        (hit,) = index.search("pages", top_k=1)
        meta = index.get([hit.id])[0].metadata
        grid = TokenGrid.from_dict(json.loads(meta["token_grid"]))
        assert grid.count > 0
        assert sorted(e.page for e in hit.evidence_pages) == [1, 2, 3, 4]
        shares = [e.share for e in hit.evidence_pages]
        assert all(s is not None and 0.0 <= s <= 1.0 for s in shares)
        assert shares == sorted(shares, reverse=True)
        assert grid.start == 0
        assert 0.5 < sum(shares) <= 1.0 + 1e-6
        assert hit.to_dict()["evidence_pages"][0]["page"] == hit.evidence_pages[0].page
