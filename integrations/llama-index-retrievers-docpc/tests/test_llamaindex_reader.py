"""DocPCReader: one ImageDocument per PDF with the grid and the selected pages' text, lazily."""

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
from llama_index.core.schema import ImageDocument, MetadataMode

from docpc_retrievers import DocPCIndex, PDFLoadError
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.documents.pdf import open_pdf
from docpc_retrievers.documents.discovery import document_id
from llama_index.retrievers.docpc import DocPCReader


def test_one_image_document_per_pdf(small_pdfs: list[Path]) -> None:
    docs = DocPCReader().load_data(small_pdfs)
    assert len(docs) == len(small_pdfs)
    for doc, path in zip(docs, small_pdfs):
        assert isinstance(doc, ImageDocument)
        assert doc.id_ == document_id(path)
        assert doc.metadata["source"] == str(path.resolve())
        assert doc.image_mimetype == "image/png"
        layout = doc.metadata["layout"]
        image = decode_b64_image(doc.image)
        assert f'"width":{image.size[0]}' in layout and f'"height":{image.size[1]}' in layout
        with open_pdf(path) as pdf:
            pages = list(range(min(4, pdf.page_count)))
            expected_text = "\n\n".join(t.strip() for t in pdf.text(pages) if t.strip())
        assert doc.text == expected_text
        assert doc.metadata["selected_pages"] == [p + 1 for p in pages]
        assert "layout:" not in doc.get_content(metadata_mode=MetadataMode.LLM)


def test_reader_grid_matches_the_index_grid(
    tmp_path: Path, small_pdfs: list[Path], tiny_encoder: ColPaliEncoder
) -> None:
    """The reader and the index compose the same grid and metadata for the same file."""
    doc = DocPCReader().load_data(small_pdfs[2])[0]
    with DocPCIndex.from_pdfs([small_pdfs[2]], tmp_path / "store", encoder=tiny_encoder) as index:
        assert same_pixels(decode_b64_image(doc.image), index.grid_image(doc.id_))
        stored = index.get([doc.id_])[0].metadata
    for key in ("source", "file_name", "total_pages", "selected_pages", "selected_labels", "strategy", "k", "layout"):
        assert doc.metadata[key] == stored[key], key


def test_strategy_and_pages_are_used(small_pdfs: list[Path]) -> None:
    doc = DocPCReader(strategy="last", pages=2).load_data(small_pdfs[2])[0]
    total = doc.metadata["total_pages"]
    assert total >= 3
    assert doc.metadata["selected_pages"] == [total - 1, total]
    assert doc.metadata["strategy"] == "last" and doc.metadata["k"] == 2


def test_lazy_load_is_lazy(small_pdfs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    original = loading.represent_pdf

    def counting(path: Path, *args: object, **kwargs: object) -> object:
        calls.append(Path(path))
        return original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loading, "represent_pdf", counting)
    gen = DocPCReader().lazy_load_data(small_pdfs)
    assert inspect.isgenerator(gen)
    assert calls == []
    next(gen)
    assert len(calls) == 1


def test_folders_duplicates_and_extra_info(tmp_path: Path, small_pdfs: list[Path]) -> None:
    folder = tmp_path / "pdfs"
    (folder / "sub").mkdir(parents=True)
    shutil.copyfile(small_pdfs[0], folder / "a.pdf")
    shutil.copyfile(small_pdfs[0], folder / "sub" / "copy-of-a.PDF")
    shutil.copyfile(small_pdfs[1], folder / "sub" / "b.pdf")
    (folder / "notes.txt").write_text("not a pdf")
    docs = DocPCReader().load_data(folder, extra_info={"collection": "tests", "file_name": "ignored"})
    assert len(docs) == 2, "identical files load once"
    assert {d.id_ for d in docs} == {document_id(small_pdfs[0]), document_id(small_pdfs[1])}
    assert all(d.metadata["collection"] == "tests" for d in docs)
    assert {d.metadata["file_name"] for d in docs} == {"a.pdf", "b.pdf"}


@needs_corpus
def test_bad_files_are_skipped_or_raised(tmp_path: Path) -> None:
    assert DocPCReader().load_data([ZERO_PAGES, ENCRYPTED]) == []
    with pytest.raises(PDFLoadError) as info:
        DocPCReader(raise_on_error=True).load_data([FOUR_PAGES, ENCRYPTED])
    assert info.value.kind == "encrypted"
    docs = DocPCReader(password=ENCRYPTED_PASSWORD).load_data([ENCRYPTED])
    assert len(docs) == 1 and docs[0].metadata["total_pages"] == 1


def test_fs_argument_is_refused(small_pdfs: list[Path]) -> None:
    with pytest.raises(NotImplementedError, match="local files"):
        DocPCReader().load_data(small_pdfs[0], fs=object())


def test_works_as_simple_directory_reader_extractor(tmp_path: Path, small_pdfs: list[Path]) -> None:
    from llama_index.core import SimpleDirectoryReader

    for p in small_pdfs[:2]:
        shutil.copyfile(p, tmp_path / p.name)
    docs = SimpleDirectoryReader(str(tmp_path), file_extractor={".pdf": DocPCReader()}).load_data()
    assert len(docs) == 2
    assert all(isinstance(d, ImageDocument) and d.image for d in docs)
    assert {d.metadata["file_name"] for d in docs} == {p.name for p in small_pdfs[:2]}
    assert all("file_path" in d.metadata for d in docs)  # SimpleDirectoryReader's own keys survive
