"""End-to-end tests of the index engine (DocPCIndex): real PDFs, the tiny random ColQwen2, a real store.

One store is built per module from a few corpus PDFs (plus the encrypted and the
zero-page file, which must fail on their own); tests that change a store work on a
``shutil.copytree`` copy in tmp_path. Scores come from random weights: tests check
plumbing, persistence, bookkeeping and ranking logic, never retrieval quality.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_helpers import (
    ANNOTATED,
    ENCRYPTED,
    ENCRYPTED_PASSWORD,
    FOUR_PAGES,
    GEOTOPO,
    GOOGLE_DOC,
    IMAGEMAGICK,
    MINIMAL,
    MULTICOLUMN,
    ROTATED,
    ZERO_PAGES,
    clear_chroma_cache,
    copy_store,
    make_pdf,
    needs_corpus,
)

from docpc_retrievers.documents.composition import GridLayout
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import ModelMismatchError, SettingsMismatchError, StoreError, StoreLockedError
from docpc_retrievers.index import DocPCIndex, IndexSettings
from docpc_retrievers.results import IndexReport, SearchResult
from docpc_retrievers.documents.discovery import document_id
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.testing import build_tiny_colqwen2
from docpc_retrievers.testing.support import record_candidates

pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow, needs_corpus]

#: The documents of the module store: (path, total pages, title as indexed or None).
GOOD = {
    MINIMAL: 1,
    FOUR_PAGES: 4,
    IMAGEMAGICK: 6,
    GEOTOPO: 117,
    GOOGLE_DOC: 1,
    ROTATED: 4,
    ANNOTATED: 1,
    MULTICOLUMN: 3,
}
BAD = (ENCRYPTED, ZERO_PAGES)
QUERIES = ("anything", "Table 1: results on the benchmark")


@dataclass
class BuiltStore:
    path: Path
    report: IndexReport
    results: dict[str, list[SearchResult]]  # query -> top-100 results right after building


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_encoder: ColPaliEncoder) -> BuiltStore:
    path = tmp_path_factory.mktemp("index_module") / "store"
    clear_chroma_cache()
    index = DocPCIndex.from_pdfs([*GOOD, *BAD], path, encoder=tiny_encoder)
    try:
        results = {q: index.search(q, top_k=100) for q in QUERIES}
        report = index.last_report
    finally:
        index.close()
    return BuiltStore(path, report, results)


@pytest.fixture
def store_copy(built: BuiltStore, tmp_path: Path) -> Path:
    return copy_store(built.path, tmp_path / "store")


@pytest.fixture(scope="module")
def other_encoder(tmp_path_factory: pytest.TempPathFactory) -> ColPaliEncoder:
    """A second tiny checkpoint (seed 1) in another folder: a different model as far as stores go."""
    folder = build_tiny_colqwen2(tmp_path_factory.mktemp("other_colqwen2") / "checkpoint", seed=1)
    return ColPaliEncoder(folder, device="cpu", dtype="float32")


def _ids(results: list[SearchResult]) -> list[str]:
    return [r.id for r in results]


def _by_name(index: DocPCIndex) -> dict[str, SearchResult]:
    docs = index.get(index.store.ids())
    return {Path(d.source).name: d for d in docs}


# --------------------------------------------------------------------------- building and reopening


def test_from_pdfs_indexes_good_files_and_reports_each_failure(built: BuiltStore) -> None:
    report = built.report
    assert sorted(report.indexed) == sorted(document_id(p) for p in GOOD)
    assert report.skipped == []
    failed = {Path(f.path): f for f in report.failed}
    assert set(failed) == set(BAD)
    assert failed[ENCRYPTED].kind == "encrypted"
    assert "password" in failed[ENCRYPTED].reason.lower()
    assert failed[ZERO_PAGES].kind == "empty"
    for path, failure in failed.items():
        assert str(path) in failure.reason
    with DocPCIndex(built.path) as index:
        assert len(index) == len(GOOD)
        assert {Path(d.source) for d in index.get(index.store.ids())} == set(GOOD)


def test_reopen_from_directory_gives_identical_results(
    built: BuiltStore, tiny_encoder: ColPaliEncoder, tmp_path: Path
) -> None:
    # The same directory, opened again from disk ...
    with DocPCIndex(built.path, encoder=tiny_encoder) as index:
        again = {q: index.search(q, top_k=100) for q in QUERIES}
    # ... and a copy at a path this process never opened.
    clear_chroma_cache()
    moved = copy_store(built.path, tmp_path / "moved")
    with DocPCIndex(moved, encoder=tiny_encoder) as index:
        copied = {q: index.search(q, top_k=100) for q in QUERIES}
    for q in QUERIES:
        original = [(r.id, r.score) for r in built.results[q]]
        assert len(original) == len(GOOD)
        assert [(r.id, r.score) for r in again[q]] == original
        assert [(r.id, r.score) for r in copied[q]] == original


def test_reopened_index_uses_the_recorded_model_and_settings(built: BuiltStore, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(built.path) as index:
        assert index.model == tiny_encoder.model_id
        assert index.settings.to_dict() == IndexSettings().to_dict()
        recorded = index.store.settings
        assert recorded["encoder"] == tiny_encoder.settings()
        assert recorded["index"] == IndexSettings().to_dict()
        info = index.info()
    assert info["documents"] == len(GOOD)
    assert info["model"] == tiny_encoder.model_id
    assert info["strategy"] == "first"
    assert info["pages"] == 4
    assert info["grid"] == "2x2"
    assert info["dim"] == tiny_encoder.dim
    assert info["vectors"] > len(GOOD)
    assert info["bytes_on_disk"] > 0
    per_doc = info["bytes_per_document"]  # docpc info: bytes per document by part
    assert set(per_doc) == {"vectors", "first_stage", "grids", "on_disk"}
    assert per_doc["vectors"] > 0 and per_doc["first_stage"] > 0 and per_doc["grids"] > 0


# --------------------------------------------------------------------------- re-adding files


def test_unchanged_files_are_skipped(store_copy: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(store_copy, encoder=tiny_encoder, writable=True) as index:
        commits = len(index.store.engine.changes(0))
        report = index.add_pdfs([*GOOD, *BAD])
        assert report.indexed == []
        assert sorted(report.skipped) == sorted(document_id(p) for p in GOOD)
        assert {Path(f.path) for f in report.failed} == set(BAD)
        assert len(index) == len(GOOD)
        assert len(index.store.engine.changes(0)) == commits, "a re-run of unchanged files must write nothing"


def test_renamed_copy_is_skipped_as_duplicate(store_copy: Path, tiny_encoder: ColPaliEncoder, tmp_path: Path) -> None:
    renamed = tmp_path / "elsewhere" / "a completely different name.pdf"
    renamed.parent.mkdir()
    shutil.copyfile(FOUR_PAGES, renamed)
    with DocPCIndex(store_copy, encoder=tiny_encoder, writable=True) as index:
        report = index.add_pdfs([renamed])
        assert report.indexed == []
        assert report.skipped == [document_id(FOUR_PAGES)]
        assert report.failed == []
        assert len(index) == len(GOOD)
        [doc] = index.get([document_id(FOUR_PAGES)])
        assert doc.source == str(FOUR_PAGES)
        assert report.duplicates == [(str(renamed.resolve()), str(FOUR_PAGES))]  # named, not just "unchanged 1"
        assert f"duplicate: {renamed.resolve()} has the same content as {FOUR_PAGES}" in report.summary()


def test_two_copies_in_one_run_are_indexed_once(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    a = make_pdf(tmp_path / "in" / "a.pdf", "twins")
    b = tmp_path / "in" / "b.pdf"
    shutil.copyfile(a, b)
    with DocPCIndex.from_pdfs([tmp_path / "in"], tmp_path / "store", encoder=tiny_encoder) as index:
        report = index.last_report
        assert report.indexed == [document_id(a)]
        assert report.skipped == [document_id(a)]
        assert report.duplicates == [(str(b.resolve()), str(a.resolve()))]
        assert report.to_dict()["duplicates"] == [{"path": str(b.resolve()), "same_as": str(a.resolve())}]
        assert len(index) == 1


def test_a_rerun_says_when_sources_under_its_folders_are_gone(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    keep, lose = make_pdf(tmp_path / "in" / "keep.pdf", "kept"), make_pdf(tmp_path / "in" / "lose.pdf", "lost")
    elsewhere = make_pdf(tmp_path / "other" / "x.pdf", "not under the folder")
    with DocPCIndex.from_pdfs([tmp_path / "in", elsewhere], tmp_path / "store", encoder=tiny_encoder) as index:
        assert index.last_report.missing == []
        lose.unlink()
        elsewhere.unlink()
        report = index.add_pdfs([tmp_path / "in"])
        assert report.missing == [document_id_of(index, "lose.pdf")] and report.removed == []
        assert "has lost its source file: `docpc list --missing` shows it, `--prune` deletes it" in report.summary()
        assert len(index) == 3 and keep.exists()
        assert index.add_pdfs([tmp_path / "in"], prune=True).removed == report.missing


def document_id_of(index: DocPCIndex, name: str) -> str:
    return next(d.id for d in index.documents() if Path(d.source).name == name)


def test_changed_file_replaces_its_old_record(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    doc = make_pdf(tmp_path / "docs" / "report.pdf", "first version", n_pages=2)
    old_id = document_id(doc)
    with DocPCIndex.from_pdfs([doc], tmp_path / "store", encoder=tiny_encoder) as index:
        assert index.last_report.indexed == [old_id]
        assert index.grid_image(old_id).size == (1024, 1324)
    clear_chroma_cache()

    make_pdf(doc, "second version, now longer", n_pages=5)  # same path, new bytes
    new_id = document_id(doc)
    assert new_id != old_id
    with DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True) as index:
        report = index.add_pdfs([doc])
        assert report.indexed == [new_id]
        assert report.replaced == [old_id]
        assert len(index) == 1
        assert index.get([old_id]) == []
        [stored] = index.get([new_id])
        assert stored.source == str(doc.resolve())
        assert stored.total_pages == 5
        assert stored.title == "second version, now longer"
        with pytest.raises(KeyError):
            index.grid_image(old_id)
        assert _ids(index.search("anything", top_k=10)) == [new_id]
    clear_chroma_cache()
    with DocPCIndex(tmp_path / "store") as index:  # the replacement is durable
        assert index.store.ids() == [new_id]


def test_changed_file_whose_new_content_is_already_indexed_drops_its_old_record(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    """A file edited so that its bytes equal another indexed file must not keep its stale old record.

    After re-adding, the store must not claim that ``doc.pdf`` holds content it no longer has.
    """
    other = make_pdf(tmp_path / "docs" / "other.pdf", "shared content")
    doc = make_pdf(tmp_path / "docs" / "doc.pdf", "old content of doc")
    old_id = document_id(doc)
    with DocPCIndex.from_pdfs([other, doc], tmp_path / "store", encoder=tiny_encoder) as index:
        assert len(index) == 2
    clear_chroma_cache()

    shutil.copyfile(other, doc)  # doc.pdf now has exactly other.pdf's bytes
    with DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True) as index:
        index.add_pdfs([doc])
        sources_of_old = [d.source for d in index.get([old_id])]
        assert sources_of_old == [], f"stale record {old_id} still claims {sources_of_old}"
        assert len(index) == 1


def test_folders_recurse(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    root = tmp_path / "library"
    top = make_pdf(root / "TOP.PDF", "upper-case suffix")
    deep = make_pdf(root / "a" / "b" / "c" / "deep.pdf", "three folders down")
    (root / "a" / "notes.txt").write_text("not a pdf")
    (root / "a" / "b" / "image.pdf.png").write_bytes(b"\x89PNG\r\n")
    with DocPCIndex.from_pdfs([root], tmp_path / "store", encoder=tiny_encoder) as index:
        report = index.last_report
        assert report.failed == []
        assert sorted(report.indexed) == sorted([document_id(top), document_id(deep)])
        assert {d.source for d in index.get(index.store.ids())} == {str(top.resolve()), str(deep.resolve())}


def test_each_bad_file_fails_on_its_own_and_the_rest_are_indexed(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    good1 = make_pdf(tmp_path / "in" / "good1.pdf", "good one")
    missing = tmp_path / "in" / "missing.pdf"
    corrupt = tmp_path / "in" / "corrupt.pdf"
    corrupt.write_bytes(b"this is plain text, not a PDF at all\n" * 50)
    empty = tmp_path / "in" / "empty.pdf"
    empty.write_bytes(b"")
    good2 = make_pdf(tmp_path / "in" / "good2.pdf", "good two")
    paths = [missing, good1, corrupt, empty, good2]
    with DocPCIndex.from_pdfs(paths, tmp_path / "store", encoder=tiny_encoder) as index:
        report = index.last_report
        assert sorted(report.indexed) == sorted([document_id(good1), document_id(good2)])
        assert len(index) == 2
    failed = {Path(f.path).name: f for f in report.failed}
    assert set(failed) == {"missing.pdf", "corrupt.pdf", "empty.pdf"}
    assert failed["missing.pdf"].kind == "not_found"
    assert failed["corrupt.pdf"].kind == "not_pdf"
    assert failed["empty.pdf"].kind == "corrupt"
    assert "0 bytes" in failed["empty.pdf"].reason
    for name, failure in failed.items():
        assert name in failure.reason, failure
        assert Path(failure.path).resolve() == (tmp_path / "in" / name).resolve()


def test_wrong_and_right_password(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex.from_pdfs([ENCRYPTED], tmp_path / "s1", encoder=tiny_encoder, password="wrong") as index:
        [failure] = index.last_report.failed
        assert failure.kind == "wrong_password"
        assert "password" in failure.reason
        assert len(index) == 0
    with DocPCIndex.from_pdfs(
        [ENCRYPTED], tmp_path / "s2", encoder=tiny_encoder, password=ENCRYPTED_PASSWORD
    ) as index:
        assert index.last_report.indexed == [document_id(ENCRYPTED)]
        [doc] = index.get([document_id(ENCRYPTED)])
        assert doc.total_pages >= 1


# --------------------------------------------------------------------------- search


def test_filters_restrict_results(built: BuiltStore, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(built.path, encoder=tiny_encoder) as index:
        only = index.search("anything", top_k=10, filters={"file_name": FOUR_PAGES.name})
        assert [r.source for r in only] == [str(FOUR_PAGES)]
        long_docs = index.search("anything", top_k=100, filters={"total_pages": {"$gte": 4}})
        assert {Path(r.source) for r in long_docs} == {p for p, n in GOOD.items() if n >= 4}
        assert all(r.total_pages >= 4 for r in long_docs)
        assert index.search("anything", top_k=10, filters={"file_name": "no-such-file.pdf"}) == []
        # A filtered search ranks like the unfiltered one restricted to the matches.
        full = [r.id for r in index.search("anything", top_k=100) if r.total_pages >= 4]
        assert [r.id for r in long_docs] == full


def test_top_k_zero_large_and_negative(built: BuiltStore, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(built.path, encoder=tiny_encoder) as index:
        assert index.search("anything", top_k=0) == []
        everything = index.search("anything", top_k=1000)
        assert sorted(_ids(everything)) == sorted(document_id(p) for p in GOOD)
        scores = [r.score for r in everything]
        assert scores == sorted(scores, reverse=True)
        assert [r.rank for r in everything] == list(range(1, len(GOOD) + 1))
        assert _ids(index.search("anything", top_k=3)) == _ids(everything)[:3]
        with pytest.raises(ValueError):
            index.search("anything", top_k=-1)


def test_candidates_set_the_first_stage_count_and_bad_ones_are_refused(
    built: BuiltStore, tiny_encoder: ColPaliEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``candidates`` reaches the store; a count as large as the store scores every document, as top_k=1000 does."""
    with DocPCIndex(built.path, encoder=tiny_encoder) as index:
        everything = index.search("anything", top_k=1000)
        seen = record_candidates(index, monkeypatch)
        wide = index.search("anything", top_k=2, candidates=len(GOOD))
        assert seen == [len(GOOD)]
        assert [(r.id, r.score) for r in wide] == [(r.id, r.score) for r in everything[:2]]
        for bad in (0, -2, 1.5, True):
            with pytest.raises(ValueError, match="candidates"):
                index.search("anything", candidates=bad)  # type: ignore[arg-type]
        assert seen == [len(GOOD)]  # refused before the store was asked


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_refused(built: BuiltStore, tiny_encoder: ColPaliEncoder, query: str) -> None:
    with DocPCIndex(built.path, encoder=tiny_encoder) as index:
        with pytest.raises(ValueError, match="query"):
            index.search(query)


# --------------------------------------------------------------------------- metadata and grids


def test_metadata_pages_title_and_layout(built: BuiltStore) -> None:
    with DocPCIndex(built.path) as index:
        docs = _by_name(index)
        assert set(docs) == {p.name for p in GOOD}
        for path, total in GOOD.items():
            doc = docs[path.name]
            assert doc.total_pages == total
            assert doc.selected_pages == list(range(1, min(total, 4) + 1))  # strategy "first", K=4, 1-based
            layout = index.grid_layout(doc.id)
            assert (layout.rows, layout.cols) == (2, 2)
            assert layout.page_indices == [p - 1 for p in doc.selected_pages]
            stored = json.loads(doc.metadata["layout"])
            assert GridLayout.from_dict(stored).to_dict() == stored
            assert layout.to_dict() == stored
            image = index.grid_image(doc.id)
            assert image.size == (layout.width, layout.height)
            assert image.size == (2 * layout.cell_width, 2 * layout.cell_height)
            assert doc.metadata["strategy"] == "first"
            assert doc.metadata["model"] == index.model
        assert docs[GEOTOPO.name].title == "Geometrie und Topologie"
        assert docs[GOOGLE_DOC.name].title == "PDF Example Document"
        assert docs[MINIMAL.name].title == MINIMAL.name  # no title in the file: its name stands in
        with pytest.raises(KeyError):
            index.grid_layout("0" * 32)
        with pytest.raises(KeyError):
            index.grid_image("0" * 32)


def test_other_strategy_is_recorded_and_used(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    settings = IndexSettings(strategy="boundary", pages=2, grid=(1, 2))
    with DocPCIndex.from_pdfs([GEOTOPO], tmp_path / "store", encoder=tiny_encoder, settings=settings) as index:
        [doc] = index.get([document_id(GEOTOPO)])
        assert doc.selected_pages == [1, 117]
        layout = index.grid_layout(doc.id)
        assert (layout.rows, layout.cols) == (1, 2)
        assert layout.page_indices == [0, 116]
        assert index.grid_image(doc.id).size == (layout.width, layout.height)
    clear_chroma_cache()
    with DocPCIndex(tmp_path / "store") as index:
        assert index.settings == settings
        assert index.info()["grid"] == "1x2"
        assert index.info()["strategy"] == "boundary"


# --------------------------------------------------------------------------- settings and models


def test_different_strategy_on_existing_store_raises(store_copy: Path, tiny_encoder: ColPaliEncoder) -> None:
    with pytest.raises(SettingsMismatchError, match="strategy"):
        DocPCIndex(store_copy, settings=IndexSettings(strategy="uniform"), writable=True, encoder=tiny_encoder)
    with pytest.raises(SettingsMismatchError, match="pages"):
        DocPCIndex(store_copy, settings=IndexSettings(pages=9), writable=True, encoder=tiny_encoder)
    # The failed opens released the writer lock; the recorded settings are unchanged.
    with DocPCIndex(store_copy, settings=IndexSettings(), writable=True, encoder=tiny_encoder) as index:
        assert index.settings.to_dict() == IndexSettings().to_dict()
        assert len(index) == len(GOOD)


def test_different_model_on_existing_store_raises(
    store_copy: Path, tiny_encoder: ColPaliEncoder, other_encoder: ColPaliEncoder
) -> None:
    assert other_encoder.model_id != tiny_encoder.model_id
    assert other_encoder.settings() != tiny_encoder.settings()
    with pytest.raises(ModelMismatchError, match="model"):
        DocPCIndex(store_copy, encoder=other_encoder)
    with DocPCIndex(store_copy, model=other_encoder.model_id) as index:  # the encoder loads lazily
        with pytest.raises(ModelMismatchError, match="model"):
            index.search("anything")
    with pytest.raises(ModelMismatchError):
        DocPCIndex(store_copy, encoder=other_encoder, writable=True)
    with DocPCIndex(store_copy, writable=True) as index:  # lock released, nothing written
        assert len(index) == len(GOOD)


# --------------------------------------------------------------------------- delete, read-only, one writer


def test_delete_by_id_and_by_source_path(store_copy: Path, tiny_encoder: ColPaliEncoder) -> None:
    geo, minimal = document_id(GEOTOPO), document_id(MINIMAL)
    with DocPCIndex(store_copy, encoder=tiny_encoder, writable=True) as index:
        assert index.delete([geo]) == 1
        assert index.delete([str(MINIMAL)]) == 1
        assert index.delete(["0" * 32, str(MINIMAL)]) == 0
        assert len(index) == len(GOOD) - 2
        remaining = _ids(index.search("anything", top_k=100))
        assert len(remaining) == len(GOOD) - 2
        assert geo not in remaining and minimal not in remaining
        for gone in (geo, minimal):
            with pytest.raises(KeyError):
                index.grid_image(gone)
    clear_chroma_cache()
    with DocPCIndex(store_copy, encoder=tiny_encoder) as index:
        assert len(index) == len(GOOD) - 2
        assert index.get([geo, minimal]) == []


def test_read_only_index_cannot_add_or_delete(store_copy: Path, tiny_encoder: ColPaliEncoder, tmp_path: Path) -> None:
    new = make_pdf(tmp_path / "new.pdf", "never indexed")
    with DocPCIndex(store_copy, encoder=tiny_encoder) as index:
        with pytest.raises(StoreError):
            index.add_pdfs([new])
        with pytest.raises(StoreError):
            index.delete([document_id(GEOTOPO)])
        assert len(index) == len(GOOD)
    clear_chroma_cache()
    with DocPCIndex(store_copy) as index:
        assert len(index) == len(GOOD)
        assert index.get([document_id(new)]) == []
        assert index.get([document_id(GEOTOPO)]) != []


def test_opening_a_directory_that_is_not_a_store_fails(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no docpc store"):
        DocPCIndex(tmp_path)
    with pytest.raises(StoreError):
        DocPCIndex(tmp_path / "does-not-exist")
    assert list(tmp_path.iterdir()) == []


def test_a_store_is_not_written_into_a_file_or_a_folder_of_other_files(tmp_path: Path) -> None:
    """--store at a user's own folder or at a file: refused before anything is written, naming what is there."""
    papers = tmp_path / "papers"
    make_pdf(papers / "a.pdf", "a user's own file")
    (papers / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match=r"not a docpc store and holds other files \(a.pdf, notes.txt\)"):
        DocPCIndex(papers, writable=True)
    assert sorted(p.name for p in papers.iterdir()) == ["a.pdf", "notes.txt"]
    with pytest.raises(StoreError, match="is a file; a store is a folder"):
        DocPCIndex(papers / "notes.txt", writable=True)
    with DocPCIndex(tmp_path / "empty-or-new", writable=True) as index:  # a new folder is fine
        assert len(index) == 0


def test_under_searches_only_a_folders_documents(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    """``under=``: the documents whose source lies in a folder (or is a file), as delete matches them; others never
    appear, a folder with nothing indexed gives nothing, and the ranking is the unrestricted one's order."""
    lib = tmp_path / "lib"
    a = [make_pdf(lib / "a" / f"{i}.pdf", f"team a {i}") for i in range(3)]
    b = [make_pdf(lib / "b" / f"{i}.pdf", f"team b {i}") for i in range(2)]
    with DocPCIndex.from_pdfs([lib], tmp_path / "store", encoder=tiny_encoder) as index:
        everything = [r.id for r in index.search("anything", top_k=10)]
        in_a = index.search("anything", top_k=10, under=lib / "a")
        assert {r.source for r in in_a} == {str(p.resolve()) for p in a}
        assert [r.id for r in in_a] == [i for i in everything if i in {r.id for r in in_a}]
        both = index.search("anything", top_k=10, under=[str(lib / "b"), a[0]])
        assert {r.source for r in both} == {str(p.resolve()) for p in [*b, a[0]]}
        assert index.search("anything", top_k=10, under=tmp_path / "elsewhere") == []
        named = index.search("anything", top_k=10, under=lib / "b", filters={"file_name": "0.pdf"})
        assert [r.source for r in named] == [str(b[0].resolve())]
        with pytest.raises(ValueError, match="under takes folder or file paths"):
            index.search("anything", under=[3])  # type: ignore[list-item]


def test_contains_on_a_text_key_is_refused_and_explained(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    """$contains tests list items: on a built-in text key it is refused at once; on a user's text key that matches
    nothing, the no-match explanation says why."""
    from docpc_retrievers import InvalidFilterError
    from docpc_retrievers.catalog import no_match_reason

    pdf = make_pdf(tmp_path / "doc.pdf", "one document")
    with DocPCIndex.from_pdfs([pdf], tmp_path / "store", encoder=tiny_encoder, metadata={"team": "alpha"}) as index:
        with pytest.raises(InvalidFilterError, match=r"\$contains on 'title' can never match.*--under"):
            index.search("anything", filters={"title": {"$contains": "one"}})
        assert index.search("anything", filters={"team": {"$contains": "alp"}}) == []
        reason = no_match_reason(index.store, {"team": {"$contains": "alp"}})
        assert "'team' holds text, not lists" in reason and "--under" in reason
        assert "holds text" not in no_match_reason(index.store, {"team": "beta"})


def test_second_writer_in_the_same_process_is_refused(store_copy: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(store_copy, encoder=tiny_encoder, writable=True):
        with pytest.raises(StoreLockedError, match="being written by"):
            DocPCIndex(store_copy, writable=True)
        with pytest.raises(StoreLockedError):
            MultiVectorStore(store_copy, writable=True)
        with DocPCIndex(store_copy, encoder=tiny_encoder) as reader:  # readers are not blocked
            assert len(reader.search("anything", top_k=100)) == len(GOOD)
    with DocPCIndex(store_copy, writable=True) as index:
        assert len(index) == len(GOOD)


# --------------------------------------------------------------------------- interrupted runs


def test_interrupt_between_payload_and_records_is_completed_by_rerun(
    tmp_path: Path, tiny_encoder: ColPaliEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or a kill) after a batch's vectors and grids reached Chroma, before its records did.

    The re-run must complete the batch: every stored document has its vectors and its grid image.
    """
    from docpc_retrievers.store.engine import ChromaEngine

    files = [make_pdf(tmp_path / "in" / f"doc{i}.pdf", f"interrupted {i}") for i in range(3)]

    def interrupted(self: ChromaEngine, docs: object, old: object) -> list[str]:
        raise KeyboardInterrupt

    index = DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(ChromaEngine, "_stale_blobs", interrupted)
            with pytest.raises(KeyboardInterrupt):
                index.add_pdfs(files, batch_size=1)
    finally:
        index.close()
    clear_chroma_cache()

    with DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True) as index:
        report = index.add_pdfs(files, batch_size=1)
        assert len(report.indexed) + len(report.skipped) == len(files)
        assert sorted(index.store.ids()) == sorted(document_id(f) for f in files)
        for doc_id in index.store.ids():
            assert index.grid_image(doc_id).size == (1024, 1324)
            assert index.store.vectors(doc_id).shape[0] > 0


def test_interrupt_between_new_version_and_old_version_removal_leaves_no_duplicate(
    tmp_path: Path, tiny_encoder: ColPaliEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or a kill) after a changed file's new record is committed, before its old one is deleted.

    Re-running the same command must leave one record for the file, the new one.
    """
    doc = make_pdf(tmp_path / "in" / "doc.pdf", "version one")
    old_id = document_id(doc)
    with DocPCIndex.from_pdfs([doc], tmp_path / "store", encoder=tiny_encoder):
        pass
    clear_chroma_cache()
    make_pdf(doc, "version two")
    new_id = document_id(doc)

    def interrupted(self: MultiVectorStore, ids: object) -> int:
        raise KeyboardInterrupt

    index = DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True)
    try:
        monkeypatch.setattr(MultiVectorStore, "delete", interrupted)
        with pytest.raises(KeyboardInterrupt):
            index.add_pdfs([doc])
    finally:
        monkeypatch.undo()
        index.close()
    clear_chroma_cache()

    with DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True) as index:
        index.add_pdfs([doc])
        assert index.store.ids() == [new_id], f"old version {old_id} is still stored next to {new_id}"


def test_unknown_ids_raise_document_not_found(store_copy: Path) -> None:
    """Every lookup by id names the id and the store, and stays a KeyError for older callers."""
    from docpc_retrievers.errors import DocumentNotFoundError

    missing = "0" * 32
    with DocPCIndex(store_copy) as index:
        lookups = [index.grid_image, index.grid_image_bytes, index.grid_layout, index.render_pages, index.text,
                   index.metadata, index.store.vectors]
        for lookup in lookups:
            with pytest.raises(DocumentNotFoundError, match=missing) as excinfo:
                lookup(missing)
            assert isinstance(excinfo.value, KeyError) and str(store_copy.resolve()) in str(excinfo.value)
        assert index.get([missing]) == []  # get() skips unknown ids, as documented


def test_ids_never_become_paths_outside_the_store(store_copy: Path, tmp_path: Path) -> None:
    """A grid lookup with a path-like id is a not-found error; nothing outside the store is opened."""
    from PIL import Image

    from docpc_retrievers.errors import DocumentNotFoundError

    Image.new("RGB", (4, 4)).save(tmp_path / "x.png")
    with DocPCIndex(store_copy) as index:
        for bad in ("../../x", str(tmp_path / "x"), "../" * 8 + str(tmp_path / "x")[1:], "", "A" * 32):
            with pytest.raises(DocumentNotFoundError):
                index.grid_image(bad)
            with pytest.raises(DocumentNotFoundError):
                index.grid_image_bytes(bad)


def test_store_grids_false_keeps_no_previews_and_composes_them_on_request(
    tmp_path: Path, tiny_encoder: ColPaliEncoder
) -> None:
    doc = make_pdf(tmp_path / "in" / "doc.pdf", "no stored grid", n_pages=3)
    with DocPCIndex.from_pdfs([doc], tmp_path / "s", encoder=tiny_encoder, store_grids=False) as index:
        doc_id = document_id(doc)
        assert index.store.bytes_by_part()["grids"] == 0
        _, grid, _, _ = DocPCIndex.compose_pdf(doc, settings=index.settings)
        from PIL import Image
        import io

        again = Image.open(io.BytesIO(index.grid_image_bytes(doc_id))).convert("RGB")
        assert again.size == grid.image.size and again.tobytes() == grid.image.tobytes()


def test_a_results_json_carries_the_users_metadata_and_only_theirs() -> None:
    """`docpc search --json` left out the keys users filter on, which the integrations return."""
    from docpc_retrievers.results import SearchResult

    stored = {"source": "/d/a.pdf", "title": "A", "total_pages": 3, "selected_pages": [1, 2, 3], "_n": 40,
              "dept": "legal", "year": 2024, "tags": ["x", "y"]}
    as_json = SearchResult.from_metadata("a" * 32, 1.5, 1, stored).to_dict()
    assert as_json["metadata"] == {"dept": "legal", "year": 2024, "tags": ["x", "y"]}
    assert "reranked" not in as_json and "rerank_error" not in as_json  # not asked for: nothing to say
