"""Tests of docpc_retrievers.documents.pdf: opening, metadata, labels, rendering, text and every error kind.

Corpus files (tests/data/sample-pdfs) are read-only: tests that need modified bytes copy them
into tmp_path first. Set DOCPC_PDF_CORPUS to point at another copy of the corpus.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from PIL import Image

from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.documents.pdf import DEFAULT_MAX_PIXELS, PDFDocument, PDFInfo, open_pdf
from docpc_retrievers.testing.support import CORPUS, needs_corpus

MINIMAL = CORPUS / "001-trivial/minimal-document.pdf"
FOUR_PAGES = CORPUS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf"
ENCRYPTED = CORPUS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf"
IMAGEMAGICK = CORPUS / "007-imagemagick-images/imagemagick-images.pdf"
INLINE_IMAGE = CORPUS / "008-reportlab-inline-image/inline-image.pdf"
GEOTOPO = CORPUS / "009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
ROTATED = CORPUS / "015-arabic/habibi-rotated.pdf"
ZERO_PAGES = CORPUS / "017-unreadable-meta-data/unreadablemetadata.pdf"
MULTICOLUMN = CORPUS / "026-latex-multicolumn/multicolumn.pdf"


def make_pdf(
    path: Path, sizes: list[tuple[float, float]], fills: list[tuple[float, float, float]] | None = None
) -> Path:
    """Write a PDF whose page i has size sizes[i] and a full-page fill colour fills[i] (if given)."""
    doc = pymupdf.open()
    for i, (width, height) in enumerate(sizes):
        page = doc.new_page(width=width, height=height)
        if fills is not None:
            page.draw_rect(page.rect, color=None, fill=fills[i])
    doc.save(path)
    doc.close()
    return path


def open_kind(path: Path, **kwargs: object) -> PDFLoadError:
    """Open a file that must fail; return the error."""
    with pytest.raises(PDFLoadError) as info:
        open_pdf(path, **kwargs)  # type: ignore[arg-type]
    return info.value


@pytest.fixture
def page_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """Record every page PyMuPDF loads and every pixmap it renders."""
    calls: dict[str, list[int]] = {"load_page": [], "get_pixmap": []}
    original_load = pymupdf.Document.load_page
    original_pixmap = pymupdf.Page.get_pixmap

    def load_page(self: pymupdf.Document, page_id: int = 0) -> pymupdf.Page:
        calls["load_page"].append(page_id)
        return original_load(self, page_id)

    def get_pixmap(self: pymupdf.Page, *args: object, **kwargs: object) -> pymupdf.Pixmap:
        calls["get_pixmap"].append(self.number)
        return original_pixmap(self, *args, **kwargs)

    monkeypatch.setattr(pymupdf.Document, "load_page", load_page)
    monkeypatch.setattr(pymupdf.Page, "get_pixmap", get_pixmap)
    yield calls


# -- metadata ------------------------------------------------------------------------


@needs_corpus
@pytest.mark.parametrize(
    ("path", "pages", "title", "author"),
    [
        (MINIMAL, 1, None, None),
        (FOUR_PAGES, 4, None, None),
        (MULTICOLUMN, 3, None, None),
        (GEOTOPO, 117, "Geometrie und Topologie", "Martin Thoma"),
        (IMAGEMAGICK, 6, "imagemagick-images", None),  # stored title ends in a NUL byte
        (INLINE_IMAGE, 1, "untitled", "anonymous"),
    ],
)
def test_page_count_and_metadata(path: Path, pages: int, title: str | None, author: str | None) -> None:
    with open_pdf(path) as doc:
        assert doc.page_count == pages
        assert doc.title == title
        assert doc.author == author
        assert doc.path == path


@needs_corpus
def test_info_is_frozen_and_complete() -> None:
    with open_pdf(GEOTOPO) as doc:
        info = doc.info()
    assert isinstance(info, PDFInfo)
    assert info.path == str(GEOTOPO)
    assert info.page_count == 117
    assert info.title == "Geometrie und Topologie"
    assert info.author == "Martin Thoma"
    assert info.file_bytes == GEOTOPO.stat().st_size
    assert len(info.page_labels) == 117 and info.page_labels[:4] == ("i", "ii", "iii", "1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.page_count = 3  # type: ignore[misc]


def test_blank_metadata_becomes_none(tmp_path: Path) -> None:
    path = tmp_path / "meta.pdf"
    doc = pymupdf.open()
    doc.new_page()
    doc.set_metadata({"title": "   ", "author": "  Ada Lovelace \n"})
    doc.save(path)
    doc.close()
    with open_pdf(path) as pdf:
        assert pdf.title is None
        assert pdf.author == "Ada Lovelace"


# -- page labels ---------------------------------------------------------------------


@needs_corpus
def test_page_labels_of_geotopo_match_pymupdf(page_loads: dict[str, list[int]]) -> None:
    with open_pdf(GEOTOPO) as doc:
        labels = doc.page_labels
        assert page_loads["load_page"] == []  # labels come from the catalog, not from pages
        assert labels[:5] == ["i", "ii", "iii", "1", "2"]
        assert labels[-1] == "114"
        raw = pymupdf.open(GEOTOPO)
        assert labels == [raw[i].get_label() for i in range(raw.page_count)]
        raw.close()


@needs_corpus
def test_page_labels_default_to_numbers() -> None:
    with open_pdf(FOUR_PAGES) as doc:
        assert doc.page_labels == ["1", "2", "3", "4"]


def test_page_label_styles(tmp_path: Path) -> None:
    path = tmp_path / "labels.pdf"
    doc = pymupdf.open()
    for _ in range(34):
        doc.new_page(width=100, height=100)
    doc.set_page_labels(
        [
            {"startpage": 0, "prefix": "", "style": "R", "firstpagenum": 1},
            {"startpage": 3, "prefix": "A-", "style": "D", "firstpagenum": 5},
            {"startpage": 5, "prefix": "", "style": "a", "firstpagenum": 1},
            {"startpage": 33, "prefix": "Cover", "style": "", "firstpagenum": 1},
        ]
    )
    doc.save(path)
    doc.close()
    with open_pdf(path) as pdf:
        labels = pdf.page_labels
    assert labels[:5] == ["I", "II", "III", "A-5", "A-6"]
    assert labels[5:8] == ["a", "b", "c"]
    assert labels[30] == "z"
    assert labels[31:33] == ["aa", "bb"]  # PDF spec: aa..zz after z, not "ab"
    assert labels[33] == "Cover"


# -- sizes and rendering -------------------------------------------------------------


@needs_corpus
def test_page_size_respects_rotation() -> None:
    with open_pdf(ROTATED) as doc:
        width0, height0 = doc.page_size(0)  # /Rotate 90
        width1, height1 = doc.page_size(1)  # /Rotate 180
        images = doc.render([0, 1])
    assert width0 == pytest.approx(841.89, abs=0.01) and height0 == pytest.approx(595.28, abs=0.01)
    assert width1 == pytest.approx(595.28, abs=0.01) and height1 == pytest.approx(841.89, abs=0.01)
    assert images[0].width > images[0].height
    assert images[1].width < images[1].height


def test_rotated_synthetic_page(tmp_path: Path) -> None:
    path = tmp_path / "rotated.pdf"
    doc = pymupdf.open()
    doc.new_page(width=300, height=500).set_rotation(90)
    doc.save(path)
    doc.close()
    with open_pdf(path) as pdf:
        assert pdf.page_size(0) == (500.0, 300.0)
        assert pdf.render([0])[0].size == (500, 300)


@needs_corpus
def test_render_only_requested_pages(page_loads: dict[str, list[int]]) -> None:
    with open_pdf(GEOTOPO) as doc:
        assert page_loads["load_page"] == []  # opening touches no page
        images = doc.render([100, 3], dpi=36)
    assert page_loads["load_page"] == [100, 3]
    assert page_loads["get_pixmap"] == [100, 3]
    assert len(images) == 2
    for image in images:
        assert image.mode == "RGB"
        assert image.size == (298, 421)  # 595.28 x 841.89 pt at 36 dpi, rounded outwards


@needs_corpus
def test_render_keeps_requested_order() -> None:
    with open_pdf(FOUR_PAGES) as doc:
        both = doc.render([2, 0], dpi=30)
        single2 = doc.render([2], dpi=30)[0]
        single0 = doc.render([0], dpi=30)[0]
    assert np.array_equal(np.asarray(both[0]), np.asarray(single2))
    assert np.array_equal(np.asarray(both[1]), np.asarray(single0))
    assert not np.array_equal(np.asarray(single0), np.asarray(single2))


def test_render_pixels_dpi_and_fit(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "colours.pdf", [(200, 100), (100, 300)], [(1, 0, 0), (0, 0, 1)])
    with open_pdf(path) as doc:
        red, blue = doc.render([0, 1])
        assert red.size == (200, 100) and blue.size == (100, 300)
        assert red.mode == "RGB"
        assert red.getpixel((100, 50)) == (255, 0, 0)
        assert blue.getpixel((50, 150)) == (0, 0, 255)
        assert doc.render([0], dpi=144)[0].size == (400, 200)
        fitted = doc.render([0, 1], fit=(64, 64))
    assert fitted[0].size == (64, 32)
    assert fitted[1].size == (22, 64)  # 21.3 px wide: MuPDF rounds the pixmap outwards
    for image in fitted:
        assert image.width <= 64 and image.height <= 64


@needs_corpus
def test_fit_never_exceeds_box() -> None:
    with open_pdf(GEOTOPO) as doc:
        for box in [(64, 64), (100, 100), (333, 333), (1000, 50)]:
            image = doc.render([0], fit=box)[0]
            assert image.width <= box[0] and image.height <= box[1]
            assert image.width >= box[0] - 1 or image.height >= box[1] - 1  # fills one side


def test_huge_page_is_downscaled_to_pixel_cap(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "huge.pdf", [(14400, 14400)])
    with open_pdf(path) as doc:
        capped = doc.render([0], max_pixels=250_000)[0]
        assert capped.width * capped.height <= 250_000
        assert capped.size == (500, 500)
        full = doc.render([0])[0]  # 14400x14400 pt at 72 dpi would be 207 million pixels
        assert full.width * full.height <= DEFAULT_MAX_PIXELS
        assert full.size == (4096, 4096)
        fitted = doc.render([0], fit=(20000, 20000), max_pixels=10_000)[0]
        assert fitted.size == (100, 100)


def test_high_dpi_is_capped_on_normal_page(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "a4.pdf", [(595, 842)])
    with open_pdf(path) as doc:
        image = doc.render([0], dpi=1200, max_pixels=1_000_000)[0]
    assert image.width * image.height <= 1_000_000
    assert image.width * image.height > 990_000
    assert abs(image.width / image.height - 595 / 842) < 0.01


def test_render_argument_validation(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "two.pdf", [(100, 100), (100, 100)])
    with open_pdf(path) as doc:
        with pytest.raises(ValueError, match="not both"):
            doc.render([0], dpi=100, fit=(10, 10))
        with pytest.raises(ValueError, match="dpi"):
            doc.render([0], dpi=0)
        with pytest.raises(ValueError, match="fit"):
            doc.render([0], fit=(0, 10))
        with pytest.raises(ValueError, match="max_pixels"):
            doc.render([0], max_pixels=0)
        with pytest.raises(IndexError, match="out of range"):
            doc.render([2])
        with pytest.raises(IndexError, match="out of range"):
            doc.render([-1])
        with pytest.raises(IndexError, match="out of range"):
            doc.page_size(5)
        with pytest.raises(IndexError, match="out of range"):
            doc.text([0, 9])
        with pytest.raises(TypeError):
            doc.render(0)  # type: ignore[arg-type]
        assert doc.render([np.int64(1)])[0].size == (100, 100)


def test_render_failure_is_wrapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_pdf(tmp_path / "one.pdf", [(100, 100)])

    def broken(self: pymupdf.Page, *args: object, **kwargs: object) -> pymupdf.Pixmap:
        raise RuntimeError("code=2: simulated MuPDF failure")

    monkeypatch.setattr(pymupdf.Page, "get_pixmap", broken)
    with open_pdf(path) as doc:
        with pytest.raises(PDFLoadError) as info:
            doc.render([0])
    assert info.value.kind == "render_failed"
    assert info.value.path == str(path)
    assert "page 0" in info.value.reason and "simulated MuPDF failure" in info.value.reason
    assert isinstance(info.value.__cause__, RuntimeError)


def test_close_and_context_manager(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "one.pdf", [(100, 100)])
    with open_pdf(path) as doc:
        assert isinstance(doc, PDFDocument) and not doc.closed
    assert doc.closed
    with pytest.raises(ValueError, match="closed"):
        doc.render([0])
    with pytest.raises(ValueError, match="closed"):
        doc.page_labels
    doc.close()  # closing twice is harmless
    assert doc.page_count == 1  # plain metadata stays readable


# -- text ----------------------------------------------------------------------------


@needs_corpus
def test_text_of_chosen_pages(page_loads: dict[str, list[int]]) -> None:
    with open_pdf(GEOTOPO) as doc:
        texts = doc.text([5, 0])
    assert page_loads["load_page"] == [5, 0]
    assert "Topologische Räume" in texts[0]
    assert "Topologische Räume" not in texts[1]
    assert texts[1].strip() != ""


@needs_corpus
def test_image_only_page_has_empty_text() -> None:
    with open_pdf(IMAGEMAGICK) as doc:
        assert doc.text([0]) == [""]


# -- errors --------------------------------------------------------------------------


def test_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pdf"
    error = open_kind(missing)
    assert error.kind == "not_found"
    assert error.path == str(missing)
    assert str(missing) in str(error)


@pytest.mark.parametrize("name", ["notes.pdf", "notes.txt", "notes"])
def test_text_file_is_not_pdf(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("hello world\nthis is not a PDF\n")
    error = open_kind(path)
    assert error.kind == "not_pdf"
    assert str(path) in str(error)


def test_image_file_is_not_pdf(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    Image.new("RGB", (20, 20), "red").save(path, format="PNG")
    error = open_kind(path)  # MuPDF would happily open this as a 1-page image document
    assert error.kind == "not_pdf"
    assert "Image" in error.reason


def test_directory_is_not_pdf(tmp_path: Path) -> None:
    assert open_kind(tmp_path).kind == "not_pdf"


def test_zero_byte_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "empty.pdf"
    path.write_bytes(b"")
    error = open_kind(path)
    assert error.kind == "corrupt"
    assert "0 bytes" in error.reason


@needs_corpus
@pytest.mark.parametrize("keep", [500, 10_000, 20_000])
def test_truncated_pdf_is_corrupt(tmp_path: Path, keep: int) -> None:
    path = tmp_path / "truncated.pdf"
    path.write_bytes(FOUR_PAGES.read_bytes()[:keep])
    error = open_kind(path)
    assert error.kind == "corrupt"
    assert "truncated" in error.reason


def test_header_with_garbage_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 8)
    assert open_kind(path).kind == "corrupt"


@needs_corpus
def test_pdf_without_pdf_suffix_opens(tmp_path: Path) -> None:
    path = tmp_path / "report.dat"
    shutil.copyfile(FOUR_PAGES, path)
    with open_pdf(path) as doc:
        assert doc.page_count == 4


@needs_corpus
def test_encrypted_without_password() -> None:
    error = open_kind(ENCRYPTED)
    assert error.kind == "encrypted"
    assert "password" in error.reason
    assert "--password" in error.reason
    assert str(ENCRYPTED) in str(error)


@needs_corpus
def test_encrypted_with_wrong_password() -> None:
    error = open_kind(ENCRYPTED, password="not-the-password")
    assert error.kind == "wrong_password"
    assert "password" in error.reason


@needs_corpus
@pytest.mark.parametrize("password", ["openpassword", "permissionpassword"])
def test_encrypted_with_correct_password(password: str) -> None:
    with open_pdf(ENCRYPTED, password=password) as doc:
        assert doc.page_count == 1
        assert "Lorem ipsum" in doc.text([0])[0]
        assert doc.render([0], dpi=20)[0].mode == "RGB"


def test_encrypted_synthetic_file_without_pdf_suffix(tmp_path: Path) -> None:
    path = tmp_path / "secret.bin"
    doc = pymupdf.open()
    doc.new_page()
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="s3cret", owner_pw="owner")
    doc.close()
    assert open_kind(path).kind == "encrypted"
    assert open_kind(path, password="nope").kind == "wrong_password"
    with open_pdf(path, password="s3cret") as pdf:
        assert pdf.page_count == 1


@needs_corpus
def test_password_on_unencrypted_file_is_ignored() -> None:
    with open_pdf(MINIMAL, password="whatever") as doc:
        assert doc.page_count == 1


@needs_corpus
def test_zero_page_file_is_empty() -> None:
    error = open_kind(ZERO_PAGES)
    assert error.kind == "empty"
    assert "zero pages" in error.reason


@needs_corpus
def test_max_file_bytes() -> None:
    size = MINIMAL.stat().st_size
    error = open_kind(MINIMAL, max_file_bytes=size - 1)
    assert error.kind == "too_large"
    assert str(size) in error.reason
    with open_pdf(MINIMAL, max_file_bytes=size) as doc:
        assert doc.page_count == 1
