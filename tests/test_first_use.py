"""What a new user meets first, each found by trying the product from a plain clone: a copied PDF reported once,
a mistyped path or folder explained, one-line usage errors, progress that says only what happened, and the
messages that name the route that works."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import make_pdf

from docpc_retrievers import DocPCIndex, StoreError
from docpc_retrievers.cli import main as docpc_main
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.encoders import ColPaliEncoder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("first-use") / "papers"
    for name in ("alpha", "beta"):
        make_pdf(root / "2024" / f"{name}.pdf", f"first use {name}", 1)
    make_pdf(root / "2025" / "gamma.pdf", "first use gamma", 1)
    return root


@pytest.fixture(scope="module")
def store(folder: Path, tmp_path_factory: pytest.TempPathFactory, tiny_encoder: ColPaliEncoder) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("first-use-store") / "store"
    with DocPCIndex.from_pdfs([folder], path, encoder=tiny_encoder, workers=0):
        pass
    yield path


def test_a_copy_met_before_its_stored_original_is_reported_once_as_the_copy(
        tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    """z.pdf is stored; a.pdf, a copy, sorts before it: one duplicate (a.pdf of z.pdf), one unchanged document."""
    docs = tmp_path / "docs"
    original = make_pdf(docs / "z.pdf", "stored original", 1)
    with DocPCIndex.from_pdfs([docs], tmp_path / "s", encoder=tiny_encoder, workers=0) as index:
        copy = Path(shutil.copy(original, docs / "a.pdf"))
        report = index.add_pdfs([docs], workers=0)
    assert report.duplicates == [(str(copy.resolve()), str(original.resolve()))]
    assert report.skipped == [document_id(original)]
    assert report.counts()["unchanged"] == 1


def test_add_pdfs_on_a_path_that_does_not_exist_raises_and_indexes_nothing(
        tmp_path: Path, store: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(store, encoder=tiny_encoder, writable=True) as index:
        before = len(index)
        with pytest.raises(FileNotFoundError, match=r"no such file or folder: .*papres.*nothing was indexed"):
            index.add_pdfs([tmp_path / "papres"])
        assert len(index) == before


def test_a_mistyped_under_folder_is_explained_with_where_the_documents_are(
        store: Path, folder: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = folder / "2042"
    code = docpc_main(["search", "first use", "--store", str(store), "--model", str(tiny_checkpoint),
                       "--under", str(typo), "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and out.strip() == "[]"
    assert f"no stored document comes from {typo.resolve()} (no such file or folder here)" in err
    assert f"the store's documents come from {(folder / '2024').resolve()} (2)" in err


def test_docpc_show_takes_under_like_search(
        store: Path, folder: Path, tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    code = docpc_main(["show", "first use", "--store", str(store), "--model", str(tiny_checkpoint), "-k", "5",
                       "--under", str(folder / "2025"), "--png", str(tmp_path / "png"), "--json"])
    out, _ = capsys.readouterr()
    hits = json.loads(out)["hits"]
    assert code == 0 and [Path(h["source"]).name for h in hits] == ["gamma.pdf"]


def test_a_rerun_with_nothing_new_says_nothing_was_rendered_and_the_model_line_has_no_first_use(
        store: Path, folder: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Plain progress lines (no terminal) count only the files that needed the work they name."""
    said: list[str] = []

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    progress = logging.getLogger("docpc_retrievers.progress")
    heard = Heard()
    progress.addHandler(heard)
    try:
        code = docpc_main(["index", str(folder), "--store", str(store), "--model", str(tiny_checkpoint),
                           "--workers", "0"])
        first = list(said)
        said.clear()
        make_pdf(folder / "2025" / "delta.pdf", "first use delta", 1)
        try:
            docpc_main(["index", str(folder), "--store", str(store), "--model", str(tiny_checkpoint),
                        "--workers", "0"])
        finally:
            (folder / "2025" / "delta.pdf").unlink()
    finally:
        progress.removeHandler(heard)
    capsys.readouterr()
    assert code == 0 and first, first
    assert not any(re.match(r"(rendered|committed) \d+ of \d+", m) for m in first), first
    assert any(m.startswith("loading the model ") for m in said) and not any("first use" in m for m in first + said)
    assert "rendered 1 of 1" in said and "committed 1 of 1" in said, said


def test_a_read_only_retrievers_refusal_names_the_route_that_writes(store: Path, tiny_encoder: ColPaliEncoder,
                                                                    folder: Path) -> None:
    from docpc_retrievers.retrievers import StoreEditing

    class Retriever(StoreEditing):  # what both framework retrievers add to their own classes
        def __init__(self, index: DocPCIndex) -> None:
            self.index, self._owns_index = index, True

    with Retriever(DocPCIndex(store, encoder=tiny_encoder)) as retriever:
        for edit in (lambda: retriever.add_pdfs(folder), lambda: retriever.delete(folder)):
            with pytest.raises(StoreError) as caught:
                edit()
            assert f"DocPCRetriever(index=DocPCIndex('{store}', writable=True))" in str(caught.value)
            assert "writable=True to change it" not in str(caught.value)


def test_the_integrations_require_the_core_that_has_what_they_import() -> None:
    from docpc_retrievers import __version__

    minor = ".".join(__version__.split(".")[:2])
    for pyproject in ROOT.glob("integrations/*/pyproject.toml"):
        floor = re.search(r'"docpc-retrievers>=([^"]+)"', pyproject.read_text())
        assert floor and floor.group(1).startswith(minor), (pyproject, floor)


def test_the_docs_name_the_hub_command_that_exists() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs" / "guide.md"):
        text = doc.read_text()
        assert "huggingface-cli" not in text, doc
    assert "hf download vidore/colqwen2-v1.0" in (ROOT / "README.md").read_text()
