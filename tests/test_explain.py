"""Explanations: token terms that add up to the score, outlines on the layout's cells, crops from the right page.

Real PDFs, the tiny random ColQwen2 and a real store. Random weights make the
heat itself meaningless; what is checked is the bookkeeping: which patch,
which page, which file, and that the numbers add up to what search returned.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import FOUR_PAGES, GEOTOPO, MULTICOLUMN, needs_corpus
from PIL import Image

from docpc_retrievers import DocPCIndex, DocumentNotFoundError, ExplainUnavailableError, IndexSettings
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.explain import Explainer
from docpc_retrievers.explain.pictures import crop_fraction

pytestmark = [needs_corpus]

QUERY = "topology of surfaces and a torus"
OUTLINE = (20, 90, 220)


@pytest.fixture(scope="module")
def grid_index(tmp_path_factory: pytest.TempPathFactory, tiny_encoder: ColPaliEncoder) -> DocPCIndex:
    folder = tmp_path_factory.mktemp("explain")
    pdfs = [shutil.copy(p, folder / p.name) for p in (FOUR_PAGES, GEOTOPO, MULTICOLUMN)]
    index = DocPCIndex.from_pdfs(pdfs, folder / "store", encoder=tiny_encoder, workers=0)
    yield index
    index.close()


def test_token_terms_add_up_to_the_search_score(grid_index: DocPCIndex, tiny_encoder: ColPaliEncoder) -> None:
    hits = grid_index.search(QUERY, 3)
    assert len(hits) == 3
    for hit in hits:
        x = hit.explain()
        total = sum(c.value for c in x.contributions)
        assert x.score == hit.score and x.grid_score == pytest.approx(total)
        assert x.grid_score == pytest.approx(hit.score, rel=1e-4, abs=1e-4)  # search scored the same int8 rows
        labels = tiny_encoder.query_tokens(QUERY)
        assert len(x.contributions) == len(labels)
        assert [c.included for c in x.contributions] == [own for _, own in labels]
        assert x.excluded and x.included  # augmentation tokens are reported, not drawn
        assert sum(c.value for c in x.included) + sum(c.value for c in x.excluded) == pytest.approx(x.score)
        shares = {e.page: e.share for e in hit.evidence_pages if e.share}
        assert x.shares == pytest.approx(shares)


def test_every_winning_patch_maps_to_the_page_the_layout_puts_there(grid_index: DocPCIndex) -> None:
    hit = grid_index.search(QUERY, 1)[0]
    x = hit.explain()
    layout = grid_index.grid_layout(hit.id)
    drawn = [c for c in x.contributions if c.box is not None]
    assert drawn
    for c in drawn:
        x0, y0, x1, y1 = c.box
        assert 0 <= x0 < x1 <= layout.width and 0 <= y0 < y1 <= layout.height
        under = layout.page_at((x0 + x1) / 2, (y0 + y1) / 2)
        assert c.page == (None if under is None else under + 1)


def test_outlines_sit_on_the_cells_the_layout_says(grid_index: DocPCIndex) -> None:
    hit = grid_index.search(QUERY, 1)[0]
    x = hit.explain()
    layout = grid_index.grid_layout(hit.id)
    assert x.overlay is not None and x.overlay.size == (layout.width, layout.height)
    pixels = x.overlay.load()
    outlined = 0
    for cell in layout.cells:
        if cell.page_box is None:
            continue
        bx0, by0, bx1, by1 = cell.page_box
        mid = by0 + (by1 - by0) * 2 // 3  # below the label band
        assert pixels[bx0, mid] == OUTLINE and pixels[bx1 - 1, mid] == OUTLINE
        assert pixels[(bx0 + bx1) // 2, by1 - 1] == OUTLINE
        outlined += 1
    assert outlined == len(layout.page_indices)
    grid = grid_index.grid_image(hit.id)
    # away from every outline, the overlay is the grid or the grid tinted red, never blue
    inner = [(c.page_box[0] + 20, c.page_box[3] - 20) for c in layout.cells if c.page_box]
    for px, py in inner:
        r, g, b = pixels[px, py]
        gr, gg, gb = grid.getpixel((px, py))
        assert b <= gb + 1 and r >= gr - 1


def test_a_crop_comes_from_the_right_page_of_the_right_pdf(grid_index: DocPCIndex) -> None:
    hit = next(h for h in grid_index.search(QUERY, 3) if Path(h.source or "").name == GEOTOPO.name)
    x = grid_index.explain(QUERY, hit.id, top_pages=2, dpi=72)
    assert x.crops and all(c.source == "pdf" for c in x.crops)
    assert [c.page for c in x.crops] == sorted(x.shares, key=lambda p: (-x.shares[p], p))[:2]
    with open_pdf(hit.source or "") as pdf:
        for crop in x.crops:
            [page] = pdf.render([crop.page - 1], dpi=72)
            expected = crop_fraction(page, crop.region)
            assert crop.image.size == expected.size
            assert np.array_equal(np.asarray(crop.image), np.asarray(expected))
            others = [p for p in range(pdf.page_count) if p != crop.page - 1][:1]
            [other] = pdf.render(others, dpi=72)
            other_crop = crop_fraction(other, crop.region)
            assert other_crop.size != expected.size or not np.array_equal(np.asarray(other_crop), np.asarray(expected))


def test_without_the_source_the_crop_is_cut_from_the_grid_and_says_so(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    pdf = Path(shutil.copy(GEOTOPO, tmp_path / "moved-away.pdf"))
    with DocPCIndex.from_pdfs([pdf], tmp_path / "store", encoder=tiny_encoder, workers=0) as index:
        doc_id = index.store.ids()[0]
        pdf.unlink()
        x = index.explain(QUERY, doc_id, top_pages=1)
        layout = index.grid_layout(doc_id)
    assert x.overlay is not None  # the stored grid is enough for the overlay
    [crop] = x.crops
    assert crop.source == "grid" and crop.note and "moved-away.pdf" in crop.note
    box = next(c.page_box for c in layout.cells if c.page_index == crop.page - 1)
    assert box is not None
    assert crop.image.width <= box[2] - box[0] and crop.image.height <= box[3] - box[1]
    assert any("cut from the stored grid" in n for n in x.notes)


def test_unknown_id_raises_not_found_and_bad_arguments_are_refused(grid_index: DocPCIndex) -> None:
    with pytest.raises(DocumentNotFoundError, match="no-such-document"):
        grid_index.explain(QUERY, "no-such-document")
    with pytest.raises(KeyError):
        grid_index.explain(QUERY, "no-such-document")
    doc_id = grid_index.store.ids()[0]
    with pytest.raises(ValueError, match="query"):
        grid_index.explain("  ", doc_id)
    with pytest.raises(ValueError, match="top_pages"):
        grid_index.explain(QUERY, doc_id, top_pages=-1)


class _NoPatchPositions:
    """An encoder of a family without patch positions (forced: every supported Qwen family has them)."""

    family = "colpali"

    def __init__(self, inner: ColPaliEncoder) -> None:
        self._inner = inner

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        return self._inner.encode_queries(queries)


def test_an_encoder_without_patch_positions_gets_a_clear_message(
    grid_index: DocPCIndex, tiny_encoder: ColPaliEncoder
) -> None:
    explainer = Explainer(grid_index.store, grid_index.grids, grid_index.settings, lambda: _NoPatchPositions(tiny_encoder))  # type: ignore[arg-type, return-value]
    with pytest.raises(ExplainUnavailableError, match="colpali encoder does not say where its image patches sit"):
        explainer.explain(QUERY, grid_index.store.ids()[0])


def test_page_mode_explains_page_images(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    settings = IndexSettings(mode="page", pages=3)
    with DocPCIndex.from_pdfs([GEOTOPO], tmp_path / "store", encoder=tiny_encoder, settings=settings, workers=0) as index:
        [hit] = index.search(QUERY, 1)
        x = hit.explain(top_pages=2)
    assert x.mode == "page" and x.overlay is None
    assert len(x.pages) == 2 and len(x.crops) == 2
    by_page = {e.page: e.score for e in hit.evidence_pages}
    assert [p.page for p in x.pages] == [e.page for e in hit.evidence_pages][:2]
    for picture in x.pages:
        # the page encoded again the way the index did it scores what the stored page scored (int8 rounding apart)
        assert picture.score == pytest.approx(by_page[picture.page], rel=0.02, abs=0.02)
        assert picture.score == pytest.approx(sum(c.value for c in picture.contributions))
        assert {c.page for c in picture.contributions if c.box is not None} <= {picture.page, None}
        assert picture.overlay.size == settings.page_size
    assert x.contributions == x.pages[0].contributions


def test_a_reranked_hit_shows_the_pages_reranking_scored(grid_index: DocPCIndex) -> None:
    hit = grid_index.search(QUERY, 1, rerank=True, page_budget=2)[0]
    assert hit.reranked
    x = hit.explain(top_pages=2)
    assert x.mode == "grid" and x.overlay is not None
    assert [p.page for p in x.pages] == [e.page for e in hit.evidence_pages][:2]
    for picture, ev in zip(x.pages, hit.evidence_pages):
        assert picture.score == pytest.approx(ev.score, rel=0.02, abs=0.02)
    assert any("reranked" in n for n in x.notes)
    assert x.score == hit.score != x.grid_score  # the hit's fused score; the grid's MaxSim beside it
    assert x.grid_score == pytest.approx(hit.grid_score, rel=1e-4, abs=1e-4)


def test_explanations_and_results_display_and_save(grid_index: DocPCIndex, tmp_path: Path) -> None:
    hit = grid_index.search(QUERY, 1)[0]
    x = hit.explain()
    with Image.open(io.BytesIO(x._repr_png_() or b"")) as png:
        assert png.size == x.overlay.size  # type: ignore[union-attr]
    page = x.to_html(rank=1)
    assert page.count("<img") == 1 + len(x.crops) and "data:image/jpeg;base64," in page
    assert f"{len(x.excluded)} prompt/augmentation token(s)" in page
    written = x.save(tmp_path / "pictures")
    assert [p.name for p in written] == ["overlay.png", *(f"page-{c.page}-crop.png" for c in x.crops)]
    for path in written:
        with Image.open(path) as img:
            assert img.width > 0
    card = hit._repr_html_()
    assert hit.title in card and "<img" in card
    assert hit._repr_png_() is not None
    copied = dataclasses.replace(hit)
    with pytest.raises(ExplainUnavailableError, match="index.explain"):
        copied.explain()


def test_a_crop_spans_the_page_width_so_no_line_is_cut_mid_word() -> None:
    from docpc_retrievers.explain.contributions import TokenContribution
    from docpc_retrievers.explain.pictures import hot_region

    def term(box: tuple[int, int, int, int], value: float) -> TokenContribution:
        return TokenContribution(index=0, text="t", value=value, included=True, patch=(0, 0), box=box, page=1)

    hot = [term((200, 400, 228, 428), 1.0), term((228, 400, 256, 428), 0.8), term((20, 900, 48, 928), 0.1)]
    region = hot_region(hot, 1, (0, 0, 512, 1024))
    assert region[0] == 0.0 and region[2] == 1.0  # whole lines
    assert region[1] == pytest.approx((400 - 28) / 1024) and region[3] == pytest.approx((428 + 28) / 1024)
    assert hot_region([], 1, (0, 0, 512, 1024)) == (0.0, 0.0, 1.0, 1.0)
