"""Grid previews: lossless WebP for text and line art, quality-90 WebP for grids holding photographs or scans."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from e2e_helpers import make_pdf
from PIL import Image

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.documents.preview import encode_grid, preview_form
from docpc_retrievers.documents.represent import represent_pdf
from docpc_retrievers.documents.workers import RenderJob, RenderPool
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.index import DocPCIndex


def _psnr(a: Image.Image, b: Image.Image) -> float:
    x, y = np.asarray(a.convert("RGB"), np.float32), np.asarray(b.convert("RGB"), np.float32)
    mse = float(np.mean((x - y) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def _decoded(data: bytes) -> Image.Image:
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def make_photo_pdf(path: Path, pages: int = 2) -> Path:
    """A PDF whose pages each carry a photograph-like JPEG (smooth colour noise) above a line of text."""
    rng = np.random.default_rng(7)
    doc = pymupdf.open()
    for i in range(pages):
        small = rng.integers(0, 256, (12, 18, 3), dtype=np.uint8)
        photo = Image.fromarray(small).resize((720, 480), Image.Resampling.BICUBIC)
        buf = io.BytesIO()
        photo.save(buf, format="JPEG", quality=92)
        page = doc.new_page(width=595, height=842)
        page.insert_image(pymupdf.Rect(48, 60, 547, 400), stream=buf.getvalue())
        page.insert_text((48, 440), f"photo page {i + 1}", fontsize=14)
    doc.save(path)
    doc.close()
    return path


def make_scan_pdf(path: Path, pages: int = 2) -> Path:
    """A scanned-looking PDF: each page one grey JPEG of grainy paper with dark text-like strokes (under 256 greys)."""
    rng = np.random.default_rng(11)
    doc = pymupdf.open()
    for _ in range(pages):
        paper = (232 + rng.normal(0, 6, (842, 595))).clip(0, 255)
        for y in range(80, 760, 28):
            paper[y : y + 12, 60:530] = rng.integers(20, 70)
        buf = io.BytesIO()
        Image.fromarray(paper.astype(np.uint8), "L").save(buf, format="JPEG", quality=85)
        page = doc.new_page(width=595, height=842)
        page.insert_image(page.rect, stream=buf.getvalue())
    doc.save(path)
    doc.close()
    return path


def test_text_grids_stay_lossless_and_photo_grids_go_lossy(tmp_path: Path) -> None:
    text = represent_pdf(make_pdf(tmp_path / "text.pdf", "quarterly notes", 3), IndexSettings()).grid
    photo = represent_pdf(make_photo_pdf(tmp_path / "photo.pdf"), IndexSettings()).grid
    assert text is not None and photo is not None
    assert preview_form(text.image) == "lossless"
    assert preview_form(photo.image) == "lossy"
    scan = represent_pdf(make_scan_pdf(tmp_path / "scan.pdf"), IndexSettings()).grid
    assert scan is not None and scan.image.convert("RGB").getcolors(maxcolors=256) is not None  # few colours...
    assert preview_form(scan.image) == "lossy"  # ...but grain everywhere: lossless would be slow and large
    assert _psnr(_decoded(encode_grid(scan.image)), scan.image) > 35.0

    exact = encode_grid(text.image)
    assert _psnr(_decoded(exact), text.image) == math.inf, "text grids keep every pixel"

    lossy, lossless = encode_grid(photo.image), encode_grid(photo.image, "lossless")
    assert lossy == encode_grid(photo.image), "the same pixels give the same bytes"
    assert _psnr(_decoded(lossless), photo.image) == math.inf
    assert len(lossy) < len(lossless)
    assert _psnr(_decoded(lossy), photo.image) > 35.0
    assert _decoded(lossy).size == photo.image.size

    with pytest.raises(ValueError, match="unknown preview form"):
        encode_grid(text.image, "jpeg")


def test_the_store_keeps_what_the_render_workers_made_for_a_photo_grid(tmp_path: Path,
                                                                       tiny_encoder: ColPaliEncoder) -> None:
    pdfs = [make_photo_pdf(tmp_path / "photo.pdf"), make_pdf(tmp_path / "text.pdf", "plain text", 2)]
    with RenderPool(RenderJob(IndexSettings(), None, None, previews=True), 1) as pool:
        made = {p.name: r for p, r in pool.imap(pdfs, lambda p: (p, document_id(p)))}
    with DocPCIndex.from_pdfs(pdfs, tmp_path / "store", encoder=tiny_encoder, workers=2) as index:
        for pdf in pdfs:
            rendered = made[pdf.name]
            assert rendered is not None and rendered.doc is not None and rendered.doc.grid is not None
            stored = index.grid_image_bytes(document_id(pdf))
            assert stored == rendered.preview == encode_grid(rendered.doc.grid.image)
            quality = _psnr(index.grid_image(document_id(pdf)), rendered.doc.grid.image)
            assert quality == math.inf if pdf.name == "text.pdf" else 35.0 < quality < math.inf
