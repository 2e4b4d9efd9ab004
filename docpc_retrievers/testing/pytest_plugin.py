"""Session fixtures both integrations' test suites use: a tiny random ColQwen2 and one shared index.

A suite's ``conftest.py`` imports them (``from docpc_retrievers.testing.pytest_plugin import *``);
the tiny checkpoint is built once per session (about a second, offline). The shared index holds the
py-pdf-sample-files corpus (or, when it is missing, a few generated PDFs)
and is opened read-only by the tests; tests that write build their own
stores under ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from docpc_retrievers import DocPCIndex
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing import build_tiny_colqwen2

from docpc_retrievers.testing.support import CORPUS, generated_pdfs

__all__ = ["corpus_index", "corpus_store", "pdf_folder", "small_pdfs", "tiny_checkpoint", "tiny_encoder"]


@pytest.fixture(scope="session")
def pdf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PDF corpus folder (read-only), or generated PDFs when it is missing."""
    if CORPUS.is_dir():
        return CORPUS
    return generated_pdfs(tmp_path_factory.mktemp("pdfs"))


@pytest.fixture(scope="session")
def small_pdfs(pdf_folder: Path) -> list[Path]:
    """Four small, valid PDFs for tests that build their own store."""
    if pdf_folder == CORPUS:
        names = [
            "001-trivial/minimal-document.pdf",
            "002-trivial-libre-office-writer/002-trivial-libre-office-writer.pdf",
            "004-pdflatex-4-pages/pdflatex-4-pages.pdf",
            "006-pdflatex-outline/pdflatex-outline.pdf",
        ]
        return [CORPUS / n for n in names]
    return sorted(pdf_folder.glob("*.pdf"))[:4]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random ColQwen2 checkpoint (model + processor), built offline once per session."""
    return build_tiny_colqwen2(tmp_path_factory.mktemp("tiny_colqwen2") / "checkpoint", seed=0)


@pytest.fixture(scope="session")
def tiny_encoder(tiny_checkpoint: Path) -> ColPaliEncoder:
    """ColPaliEncoder on the tiny checkpoint, cpu/float32."""
    return ColPaliEncoder(tiny_checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def corpus_store(tmp_path_factory: pytest.TempPathFactory, pdf_folder: Path, tiny_encoder: ColPaliEncoder) -> Path:
    """A store holding every valid PDF of the corpus, built once and closed (reopen it read-only)."""
    path = tmp_path_factory.mktemp("corpus") / "store"
    with DocPCIndex.from_pdfs([pdf_folder], path, encoder=tiny_encoder) as index:
        assert len(index) >= 3, index.last_report.to_dict()
    return path


@pytest.fixture(scope="session")
def corpus_index(corpus_store: Path, tiny_encoder: ColPaliEncoder) -> Iterator[DocPCIndex]:
    """The shared corpus store opened read-only with the tiny encoder."""
    index = DocPCIndex(corpus_store, encoder=tiny_encoder)
    yield index
    index.close()
