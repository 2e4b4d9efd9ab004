"""Grid-then-page reranking with a controlled encoder: order changes, page budget, page cache."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf
import pytest
from PIL import Image

from docpc_retrievers import DocPCIndex, IndexSettings
from docpc_retrievers.encoders import EncodedImage
from docpc_retrievers.rerank import RerankSettings, choose_pages, fuse

PATCHES = 4  # the controlled encoder sees every image as a 4x4 grid of patches
COLOURS = {"red": 0, "green": 1, "blue": 2}


class ColourEncoder:
    """One vector per patch: its mean colour (r, g, b, 0.2), normalised. Queries name a colour.

    Small details shrink in a grid: a page-corner patch that is pure red at full
    resolution is averaged with white when four pages share the image.
    """

    model_id = "test/colour-encoder"
    dim = 4

    def __init__(self) -> None:
        self.images_encoded = 0
        self.calls: list[int] = []

    def settings(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "dim": self.dim}

    def encode_images(self, images: Sequence[Image.Image], *, batch_size: int | None = None) -> list[np.ndarray]:
        self.images_encoded += len(images)
        self.calls.append(len(images))
        out = []
        for img in images:
            small = np.asarray(img.convert("RGB").resize((PATCHES, PATCHES), Image.BOX), dtype=np.float32) / 255.0
            v = np.concatenate([small.reshape(-1, 3), np.full((PATCHES * PATCHES, 1), 0.2, np.float32)], axis=1)
            out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
        return out

    def encode_images_with_info(
        self, images: Sequence[Image.Image], *, batch_size: int | None = None
    ) -> list[EncodedImage]:
        """Every row is a visual token, row-major over a PATCHES x PATCHES grid."""
        return [
            EncodedImage(e, np.ones(len(e), dtype=bool), (PATCHES, PATCHES)) for e in self.encode_images(images)
        ]

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[np.ndarray]:
        out = []
        for q in queries:
            v = np.zeros((1, self.dim), np.float32)
            v[0, COLOURS[q.split()[0]]] = 1.0
            out.append(v)
        return out


def _pdf(path: Path, pages: list[dict[str, Any]]) -> Path:
    doc = pymupdf.open()
    for spec in pages:
        page = doc.new_page(width=400, height=400)
        if "fill" in spec:
            page.draw_rect(page.rect, color=None, fill=spec["fill"])
        if "corner" in spec:  # a 100x100 square: exactly one of the encoder's 4x4 patches of a full page
            page.draw_rect(pymupdf.Rect(0, 0, 100, 100), color=None, fill=spec["corner"])
        if "text" in spec:
            page.insert_text((120, 300), spec["text"], fontsize=11)
    doc.save(path)
    doc.close()
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "pdfs"
    folder.mkdir()
    return [
        # A: the answer is a small red square on page 3; its text says so.
        _pdf(folder / "a.pdf", [{"text": "intro"}, {"text": "methods"}, {"corner": (1, 0, 0), "text": "red result"}, {"text": "end"}]),
        # B: one pale red page; looks redder than A in a grid, less red than A's page 3 alone.
        _pdf(folder / "b.pdf", [{"fill": (1, 0.6, 0.6), "text": "pale"}]),
        # C: nothing red at all.
        _pdf(folder / "c.pdf", [{"fill": (0, 0, 1), "text": "blue"}, {"text": "more"}]),
    ]


def _index(path: Path, corpus: list[Path], encoder: ColourEncoder) -> DocPCIndex:
    settings = IndexSettings(pages=4, cell_size=(100, 100), page_size=(400, 400))
    return DocPCIndex.from_pdfs(corpus, path, encoder=encoder, settings=settings)


def test_fusion_is_the_documented_convex_combination() -> None:
    assert fuse(2.0, [1.0, 4.0], 0.5) == pytest.approx(3.0)
    assert fuse(2.0, [1.0, 4.0], 1.0) == pytest.approx(2.0)
    assert fuse(2.0, [], 0.3) == 2.0
    with pytest.raises(ValueError):
        RerankSettings(grid_weight=1.5)


def test_reranking_reorders_when_page_scores_disagree_with_grid_scores(tmp_path: Path, corpus: list[Path]) -> None:
    encoder = ColourEncoder()
    with _index(tmp_path / "s", corpus, encoder) as index:
        grid_order = [r.source for r in index.search("red", top_k=3)]
        assert grid_order[:2] == [str(corpus[1]), str(corpus[0])]  # the pale page wins on grids
        reranked = index.search("red", top_k=3, rerank=True, rerank_top_n=3, page_budget=1)
        assert [r.source for r in reranked][:2] == [str(corpus[0]), str(corpus[1])]
        top = reranked[0]
        assert top.reranked and top.grid_score is not None and top.score > top.grid_score
        assert [e.page for e in top.evidence_pages] == [3]  # BM25 on the text layer chose page 3
        assert top.evidence_pages[0].score == pytest.approx(1 / np.sqrt(1.04), abs=1e-3)
        assert top.score == pytest.approx(fuse(top.grid_score, [top.evidence_pages[0].score], 0.5))
        assert [r.rank for r in reranked] == [1, 2, 3]


def test_page_budget_and_cache_bound_the_encoder_calls(tmp_path: Path, corpus: list[Path]) -> None:
    encoder = ColourEncoder()
    with _index(tmp_path / "s", corpus, encoder) as index:
        after_indexing = encoder.images_encoded
        assert after_indexing == 3  # one grid per document
        index.search("red", top_k=3, rerank=True, rerank_top_n=3, page_budget=2)
        first = encoder.images_encoded - after_indexing
        assert first == 2 + 1 + 2  # min(budget, pages) for A (4 pages), B (1), C (2)
        assert index.reranker.pages_encoded == first
        red = index.search("red", top_k=3, rerank=True, rerank_top_n=3, page_budget=2)
        assert encoder.images_encoded - after_indexing == first  # the same query: every page from the cache
        green = index.search("green", top_k=3, rerank=True, rerank_top_n=3, page_budget=2)
        # Another query may choose other pages; only pages never encoded before are encoded now.
        seen = {(r.id, e.page) for r in red + green for e in r.evidence_pages}
        assert all(len(r.evidence_pages) <= 2 for r in green)
        assert encoder.images_encoded - after_indexing == len(seen)
        assert index.info()["page_cache_pages"] == len(seen)
        total = len(seen)
    # The cache persists: a reopened index encodes nothing for the same pages.
    encoder2 = ColourEncoder()
    with DocPCIndex(tmp_path / "s", encoder=encoder2) as again:
        again.search("red", top_k=3, rerank=True, rerank_top_n=3, page_budget=2)
        assert encoder2.images_encoded == 0
        assert again.info()["page_cache_bytes"] > 0
        assert again.clear_page_cache() == total
        assert again.info()["page_cache_pages"] == 0 and again.info()["page_cache_bytes"] == 0  # the files go too
        again.search("red", top_k=3, rerank=True, rerank_top_n=1, page_budget=2)
        assert encoder2.images_encoded == 1  # only the grid's top document (B, one page)


def test_rerank_top_n_limits_which_documents_are_reranked(tmp_path: Path, corpus: list[Path]) -> None:
    with _index(tmp_path / "s", corpus, ColourEncoder()) as index:
        results = index.search("red", top_k=3, rerank=True, rerank_top_n=1, page_budget=1)
        assert [r.reranked for r in results] == [True, False, False]


def test_a_document_that_cannot_be_reranked_says_so_on_its_hit_and_in_json(tmp_path: Path, corpus: list[Path]) -> None:
    """Its source gone, a document keeps its grid score: the hit says reranked False and why (it was only logged),
    as do the --json form and the frameworks' metadata."""
    from docpc_retrievers.retrievers import result_metadata

    with _index(tmp_path / "s", corpus, ColourEncoder()) as index:
        corpus[1].unlink()  # b.pdf
        results = index.search("red", top_k=3, rerank=True, rerank_top_n=3, page_budget=1)
    by_name = {Path(r.source or "").name: r for r in results}
    failed, fine = by_name["b.pdf"], by_name["a.pdf"]
    assert not failed.reranked and failed.rerank_error and "b.pdf" in failed.rerank_error
    assert failed.grid_score is None and fine.reranked and fine.rerank_error is None
    as_json = failed.to_dict()
    assert as_json["reranked"] is False and as_json["rerank_error"] == failed.rerank_error
    assert fine.to_dict()["reranked"] is True and "grid_score" in fine.to_dict()
    assert result_metadata(failed)["reranked"] is False and result_metadata(failed)["rerank_error"]


def test_choose_pages_prefers_text_matches_then_grid_evidence_then_page_order() -> None:
    texts = ["cover", "table of revenue by region", "appendix", "revenue"]
    assert choose_pages(4, 2, "revenue region", texts) == [1, 3]
    assert choose_pages(4, 1, "nothing matches", texts, evidence={2: 0.7}) == [2]
    assert choose_pages(4, 3, "nothing matches", texts) == [0, 1, 2]
    assert choose_pages(120, 4, "x", None) == [0, 1, 2, 3]
    assert choose_pages(2, 5, "x", ["a", "b"]) == [0, 1]
    assert choose_pages(0, 3, "x") == []


def test_page_mode_aggregates_match_page_scores(tmp_path: Path, corpus: list[Path]) -> None:
    settings = IndexSettings(mode="page", pages=None, page_size=(400, 400))
    encoder = ColourEncoder()
    with DocPCIndex.from_pdfs(corpus, tmp_path / "p", encoder=encoder, settings=settings) as index:
        assert encoder.images_encoded == 4 + 1 + 2  # every page on its own
        assert index.info()["images_encoded"] == 7
        for aggregate, fn in (("max", max), ("mean", np.mean), ("sum", sum)):
            for r in index.search("red", top_k=3, aggregate=aggregate):
                page_scores = [e.score for e in r.evidence_pages]
                assert len(page_scores) == r.total_pages
                assert r.score == pytest.approx(float(fn(page_scores)), abs=1e-4)
        # MaxP ranks A first (its pure-red corner), SumP too, AvgP prefers B (one pale red page).
        assert index.search("red", top_k=1, aggregate="max")[0].source == str(corpus[0])
        assert index.search("red", top_k=1, aggregate="mean")[0].source == str(corpus[1])
