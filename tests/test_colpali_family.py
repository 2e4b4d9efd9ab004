"""ColPali (PaliGemma), the fixed-resolution family, end to end: a tiny random checkpoint loaded through
colpali-engine's ``from_pretrained``, its square block of visual tokens, and evidence pages and explanations drawn on
it as for ColQwen2. Random weights: only the bookkeeping is checked (which token, which page, that shares add up)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from e2e_helpers import FOUR_PAGES, GEOTOPO, MULTICOLUMN, needs_corpus
from PIL import Image

from docpc_retrievers import DocPCIndex
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.scoring.evidence import TokenGrid
from docpc_retrievers.testing import build_tiny_colpali
from docpc_retrievers.testing.tiny_checkpoint import TINY_COLPALI_IMAGE_SIZE

SIDE = TINY_COLPALI_IMAGE_SIZE // 14
QUERY = "topology of surfaces and a torus"


@pytest.fixture(scope="module")
def colpali_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_colpali(tmp_path_factory.mktemp("tiny_colpali") / "checkpoint")


@pytest.fixture(scope="module")
def colpali_encoder(colpali_checkpoint: Path) -> ColPaliEncoder:
    return ColPaliEncoder(colpali_checkpoint, device="cpu")


def test_a_colpali_checkpoint_loads_and_says_where_its_image_tokens_sit(
    colpali_encoder: ColPaliEncoder, colpali_checkpoint: Path
) -> None:
    assert colpali_encoder.family == "colpali" and colpali_encoder.has_patch_grid
    # every image is stretched to a square: the same grid whatever its shape
    assert colpali_encoder.image_patch_grid((100, 140)) == colpali_encoder.image_patch_grid((300, 50)) == (SIDE, SIDE)
    images = [Image.new("RGB", (100, 140), "white"), Image.new("RGB", (300, 50), "red")]
    for item in colpali_encoder.encode_images_with_info(images):
        assert item.patch_grid == (SIDE, SIDE)
        assert int(item.visual_mask.sum()) == SIDE * SIDE < item.embeddings.shape[0]  # then the prompt's tokens
        grid = TokenGrid.from_visual_mask(item.visual_mask, item.patch_grid)
        assert grid is not None and (grid.start, grid.rows, grid.cols) == (0, SIDE, SIDE)  # the image's come first
    with pytest.raises(ValueError, match="max_num_visual_tokens"):  # a fixed resolution has no cap to set
        ColPaliEncoder(colpali_checkpoint, device="cpu", max_num_visual_tokens=16)


@needs_corpus
def test_a_colpali_store_gives_evidence_pages_and_explanations(
    tmp_path: Path, colpali_encoder: ColPaliEncoder
) -> None:
    pdfs = [shutil.copy(p, tmp_path / p.name) for p in (FOUR_PAGES, GEOTOPO, MULTICOLUMN)]
    with DocPCIndex.from_pdfs(pdfs, tmp_path / "store", encoder=colpali_encoder, workers=0) as index:
        hits = index.search(QUERY, 3)
        assert len(hits) == 3
        for hit in hits:
            shares = [e.share for e in hit.evidence_pages]
            assert {e.page for e in hit.evidence_pages} == set(hit.selected_pages)
            assert all(s is not None and 0.0 <= s <= 1.0 for s in shares)
            assert sum(shares) <= 1.0 + 1e-6  # the rest is on the prompt's tokens
            x = hit.explain()
            assert x.score == pytest.approx(hit.score, rel=1e-4, abs=1e-4)
            assert x.shares == pytest.approx({e.page: e.share for e in hit.evidence_pages if e.share})
            layout = index.grid_layout(hit.id)
            assert x.overlay is not None and x.overlay.size == (layout.width, layout.height)
            drawn = [c for c in x.contributions if c.box is not None]
            for c in drawn:
                x0, y0, x1, y1 = c.box
                assert 0 <= x0 < x1 <= layout.width and 0 <= y0 < y1 <= layout.height
                assert (x1 - x0, y1 - y0) == pytest.approx((layout.width / SIDE, layout.height / SIDE), abs=1)
                under = layout.page_at((x0 + x1) / 2, (y0 + y1) / 2)
                assert c.page == (None if under is None else under + 1)
