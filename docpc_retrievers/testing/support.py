"""Constants and helpers the test suites share: the sample PDF corpus, generated PDFs, image comparisons.

The corpus is ``tests/data/sample-pdfs`` in the repository (29 real PDFs of py-pdf/sample-files, CC-BY-SA-4.0);
``DOCPC_PDF_CORPUS`` points the tests at another copy (a fuller one, say): counts are read from the folder.
"""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

__all__ = [
    "CORPUS",
    "REPOSITORY_CORPUS",
    "ENCRYPTED",
    "ENCRYPTED_PASSWORD",
    "FOUR_PAGES",
    "ZERO_PAGES",
    "decode_b64_image",
    "generated_pdfs",
    "needs_corpus",
    "record_candidates",
    "same_pixels",
]

REPOSITORY_CORPUS = Path(__file__).resolve().parents[2] / "tests" / "data" / "sample-pdfs"
"""The sample PDFs that ship with the repository (absent from an installed wheel)."""
_ASKED = os.environ.get("DOCPC_PDF_CORPUS")
if _ASKED and not Path(_ASKED).is_dir():
    raise RuntimeError(f"DOCPC_PDF_CORPUS={_ASKED} is not a folder: point it at a copy of the sample PDFs, or unset it")
CORPUS = Path(_ASKED or REPOSITORY_CORPUS).resolve()  # resolved: the index stores resolved paths
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no sample PDFs at {CORPUS} (run the tests from a "
                                                              "checkout, or set DOCPC_PDF_CORPUS)")

ENCRYPTED = CORPUS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf"
ENCRYPTED_PASSWORD = "openpassword"
ZERO_PAGES = CORPUS / "017-unreadable-meta-data/unreadablemetadata.pdf"
FOUR_PAGES = CORPUS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf"


def generated_pdfs(folder: Path, n: int = 6, *, label: str = "") -> Path:
    """A few small PDFs (i+1 pages, title and author set) for machines without the corpus; another ``label`` gives
    other bytes (the same ``n`` and label: the same files)."""
    import pymupdf

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        doc = pymupdf.open()
        for p in range(i + 1):
            page = doc.new_page(width=300, height=400)
            page.insert_text((30, 60 + 20 * i), f"{label}Document {i} page {p + 1}: report {i * 7}", fontsize=14)
        doc.set_metadata({"title": f"Generated {i}", "author": f"Author {i % 2}"})
        doc.save(folder / f"generated-{i}.pdf")
        doc.close()
    return folder


def decode_b64_image(data: str) -> Image.Image:
    """A base64 PNG (as carried in results) decoded to an RGB image."""
    with Image.open(io.BytesIO(base64.b64decode(data))) as img:
        return img.convert("RGB")


def same_pixels(a: Image.Image, b: Image.Image) -> bool:
    """True when two images have the same size and identical RGB pixels."""
    return a.size == b.size and np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB")))


def record_candidates(index: Any, monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The ``n_candidates`` each store search of ``index`` (a DocPCIndex) is given from now on, in order: where a
    ``candidates`` option (index, retriever or CLI) ends up."""
    seen: list[int | None] = []
    search_batch = index.store.search_batch

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("n_candidates"))
        return search_batch(*args, **kwargs)

    monkeypatch.setattr(index.store, "search_batch", spy)
    return seen
