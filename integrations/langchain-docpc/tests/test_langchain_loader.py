"""DocPCLoader: one Document per PDF with the grid in metadata, lazily, for users with their own store."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
from docpc_retrievers.retrievers import loading
from docpc_retrievers.testing.support import (
    ENCRYPTED,
    ENCRYPTED_PASSWORD,
    FOUR_PAGES,
    ZERO_PAGES,
    decode_b64_image,
    needs_corpus,
    same_pixels,
)
from langchain_core.documents import Document

from docpc_retrievers import DocPCIndex, PDFLoadError
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.documents.discovery import document_id
from langchain_docpc import DocPCLoader


def test_one_document_per_pdf(small_pdfs: list[Path]) -> None:
    docs = DocPCLoader(small_pdfs).load()
    assert len(docs) == len(small_pdfs)
    for doc, path in zip(docs, small_pdfs):
        assert isinstance(doc, Document)
        assert doc.id == document_id(path)
        meta = doc.metadata
        assert meta["source"] == str(path.resolve())
        assert meta["file_name"] == path.name
        assert meta["image_mime_type"] == "image/png"
        image = decode_b64_image(meta["image_base64"])
        assert f'"width":{image.size[0]}' in meta["layout"]
        with open_pdf(path) as pdf:
            pages = list(range(min(4, pdf.page_count)))
            assert meta["total_pages"] == pdf.page_count
            expected = "\n\n".join(t.strip() for t in pdf.text(pages) if t.strip())
        assert doc.page_content == expected
        assert meta["selected_pages"] == [p + 1 for p in pages]


def test_lazy_load_is_a_lazy_generator(small_pdfs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    original = loading.represent_pdf

    def counting(path: Path, *args: object, **kwargs: object) -> object:
        calls.append(Path(path))
        return original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loading, "represent_pdf", counting)
    gen = DocPCLoader(small_pdfs).lazy_load()
    assert inspect.isgenerator(gen)
    assert calls == []
    first = next(gen)
    assert len(calls) == 1 and first.id == document_id(small_pdfs[0])
    assert "load" not in DocPCLoader.__dict__, "load() comes from BaseLoader"


def test_loader_grid_matches_the_index_grid(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    doc = DocPCLoader(small_pdfs[3], strategy="uniform", pages=2).load()[0]
    with DocPCIndex.from_pdfs(
        [small_pdfs[3]], tmp_path / "store", encoder=tiny_encoder, strategy="uniform", pages=2
    ) as index:
        assert same_pixels(decode_b64_image(doc.metadata["image_base64"]), index.grid_image(doc.id))
        stored = index.get([doc.id])[0].metadata
    for key in ("selected_pages", "selected_labels", "strategy", "k", "layout", "total_pages"):
        assert doc.metadata[key] == stored[key], key


def test_folders_and_duplicates(tmp_path: Path, small_pdfs: list[Path]) -> None:
    (tmp_path / "sub").mkdir()
    shutil.copyfile(small_pdfs[0], tmp_path / "a.pdf")
    shutil.copyfile(small_pdfs[0], tmp_path / "sub" / "again.pdf")
    shutil.copyfile(small_pdfs[1], tmp_path / "sub" / "b.pdf")
    docs = list(DocPCLoader(str(tmp_path)).lazy_load())
    assert sorted(d.metadata["file_name"] for d in docs) == ["a.pdf", "b.pdf"]


@needs_corpus
def test_bad_files_are_skipped_or_raised() -> None:
    assert DocPCLoader([ZERO_PAGES, ENCRYPTED]).load() == []
    with pytest.raises(PDFLoadError) as info:
        DocPCLoader([FOUR_PAGES, ZERO_PAGES], raise_on_error=True).load()
    assert info.value.kind == "empty"
    docs = DocPCLoader(ENCRYPTED, password=ENCRYPTED_PASSWORD).load()
    assert len(docs) == 1 and docs[0].metadata["total_pages"] == 1
