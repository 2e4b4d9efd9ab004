"""DocPCIndex helpers added for the framework integrations: grid_image_bytes, render_pages, compose_pdf."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from docpc_retrievers import DocPCIndex, IndexSettings, PDFLoadError
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.testing.support import CORPUS, needs_corpus

pytestmark = needs_corpus
FOUR_PAGES = CORPUS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf"
OUTLINE = CORPUS / "006-pdflatex-outline/pdflatex-outline.pdf"
ENCRYPTED = CORPUS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf"


def _same(a: Image.Image, b: Image.Image) -> bool:
    return a.size == b.size and np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB")))


@pytest.fixture
def index_of_copies(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> Iterator[tuple[DocPCIndex, Path]]:
    """A writable index over a copy of the 4-page PDF (so the test may change the source)."""
    pdf = tmp_path / "doc.pdf"
    shutil.copyfile(FOUR_PAGES, pdf)
    index = DocPCIndex.from_pdfs([pdf], tmp_path / "store", encoder=tiny_encoder, settings=IndexSettings(pages=3))
    yield index, pdf
    index.close()


def test_grid_image_bytes_is_the_stored_webp_lossless_for_text_pages(index_of_copies: tuple[DocPCIndex, Path]) -> None:
    index, pdf = index_of_copies
    doc_id = document_id(pdf)
    data = index.grid_image_bytes(doc_id)
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    assert _same(Image.open(io.BytesIO(data)), index.grid_image(doc_id))
    _, grid, _, _ = DocPCIndex.compose_pdf(pdf, settings=index.settings)
    assert _same(index.grid_image(doc_id), grid.image), "lossless: the pixels the encoder saw"
    with pytest.raises(KeyError):
        index.grid_image_bytes("0" * 32)


def test_render_pages_gives_selected_pages_in_order(index_of_copies: tuple[DocPCIndex, Path]) -> None:
    index, pdf = index_of_copies
    pages = index.render_pages(document_id(pdf), dpi=40)
    assert [n for n, _, _ in pages] == [1, 2, 3]
    with open_pdf(pdf) as doc:
        expected = doc.render([0, 1, 2], dpi=40)
        texts = doc.text([0, 1, 2])
    assert all(_same(img, exp) for (_, img, _), exp in zip(pages, expected))
    assert [t for _, _, t in pages] == texts
    with pytest.raises(KeyError):
        index.render_pages("0" * 32)


def test_render_pages_tolerates_a_touched_but_identical_source(index_of_copies: tuple[DocPCIndex, Path]) -> None:
    index, pdf = index_of_copies
    os.utime(pdf, (1_000_000_000, 1_000_000_000))
    assert len(index.render_pages(document_id(pdf), dpi=20)) == 3


def test_render_pages_refuses_a_changed_or_missing_source(index_of_copies: tuple[DocPCIndex, Path]) -> None:
    index, pdf = index_of_copies
    doc_id = document_id(pdf)
    shutil.copyfile(OUTLINE, pdf)
    with pytest.raises(PDFLoadError) as changed:
        index.render_pages(doc_id)
    assert changed.value.kind == "changed"
    pdf.unlink()
    with pytest.raises(PDFLoadError) as missing:
        index.render_pages(doc_id)
    assert missing.value.kind == "not_found"


def test_render_pages_of_an_encrypted_source(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex.from_pdfs([ENCRYPTED], tmp_path / "store", encoder=tiny_encoder, password="openpassword") as index:
        doc_id = document_id(ENCRYPTED)
        with pytest.raises(PDFLoadError) as info:
            index.render_pages(doc_id)
        assert info.value.kind == "encrypted"
        assert [n for n, _, _ in index.render_pages(doc_id, password="openpassword", dpi=20)] == [1]


def test_compose_pdf_matches_what_the_index_stores(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    settings = IndexSettings(strategy="uniform", pages=2)
    doc_id, grid, metadata, text = DocPCIndex.compose_pdf(FOUR_PAGES, settings=settings)
    assert doc_id == document_id(FOUR_PAGES)
    with DocPCIndex.from_pdfs([FOUR_PAGES], tmp_path / "store", encoder=tiny_encoder, settings=settings) as index:
        stored = index.get([doc_id])[0].metadata
        assert _same(grid.image, index.grid_image(doc_id))
        assert text == index.text(doc_id)
    for key, value in metadata.items():
        if key == "file_mtime":  # Chroma keeps about 16 significant digits of a float
            assert stored[key] == pytest.approx(value, abs=1e-5)
        elif key == "title" and value is None:  # an untitled PDF's results are titled by file name
            assert stored[key] == metadata["file_name"]
        elif key != "indexed_at":
            assert stored.get(key) == value, key
    assert set(stored) - set(metadata) <= {"model", "token_grid"}
    assert "model" in stored


def test_compose_pdf_raises_for_unusable_files(tmp_path: Path) -> None:
    with pytest.raises(PDFLoadError) as missing:
        DocPCIndex.compose_pdf(tmp_path / "nope.pdf")
    assert missing.value.kind == "not_found"
    with pytest.raises(PDFLoadError) as encrypted:
        DocPCIndex.compose_pdf(ENCRYPTED)
    assert encrypted.value.kind == "encrypted"
    with pytest.raises(ValueError, match="grid mode"):
        DocPCIndex.compose_pdf(FOUR_PAGES, settings=IndexSettings(mode="page", pages=None))
