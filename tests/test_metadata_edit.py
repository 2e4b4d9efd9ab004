"""Your metadata edited in place: typed ``--meta`` values, ``set_metadata`` / ``docpc meta``, unmatched mapping entries."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from e2e_helpers import make_pdf

from docpc_retrievers import DocPCIndex
from docpc_retrievers.cli import main
from docpc_retrievers.documents.user_metadata import parse_meta_option
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.errors import InvalidMetadataError


def test_meta_values_are_typed_by_one_stated_rule() -> None:
    assert parse_meta_option(["year=2024", "ok=true", "tags=[\"a\", \"b\"]", "name=Ada", "d={\"a\": 1}", "n=null"]) == {
        "year": 2024, "ok": True, "tags": ["a", "b"], "name": "Ada", "d": '{"a": 1}', "n": "null"}
    assert parse_meta_option(['code:="2024"', "year:=2024"]) == {"code": "2024", "year": 2024}
    with pytest.raises(InvalidMetadataError, match="an object cannot be stored"):
        parse_meta_option(['d:={"a": 1}'])
    with pytest.raises(InvalidMetadataError, match="docpc meta unset"):
        parse_meta_option(["n:=null"])
    with pytest.raises(InvalidMetadataError, match="is not JSON"):
        parse_meta_option(["name:=Ada"])


@pytest.fixture()
def two_docs(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> tuple[Path, list[Path]]:
    pdfs = [make_pdf(tmp_path / "lib" / f"{i}.pdf", f"document {i}") for i in range(2)]
    store = tmp_path / "store"
    with DocPCIndex.from_pdfs(pdfs, store, encoder=tiny_encoder, metadata={"team": "alpha", "year": 2023}):
        pass
    return store, pdfs


def _meta(store: Path, pdf: Path) -> dict:
    with DocPCIndex(store) as index:
        return {k: v for k, v in index.get(index.resolve_ids([pdf]))[0].metadata.items()}


def test_set_and_unset_metadata_without_re_encoding(two_docs: tuple[Path, list[Path]]) -> None:
    store, pdfs = two_docs
    with DocPCIndex(store, writable=True) as index:
        before = {d.id: d.vectors.tobytes() for d in index.store.get(include_vectors=True)}
        assert index.set_metadata([pdfs[0]], {"team": "beta", "tags": ["x"]}, unset=["year"]) == 1
        assert index.set_metadata([pdfs[0]], {"team": "beta"}) == 0  # nothing to change
        assert {d.id: d.vectors.tobytes() for d in index.store.get(include_vectors=True)} == before
        assert index.store.ids(where={"team": "beta"}) == index.resolve_ids([pdfs[0]])
        with pytest.raises(InvalidMetadataError, match="reserved"):
            index.set_metadata([pdfs[0]], unset=["title"])  # the library's keys are not yours to remove
    first, second = _meta(store, pdfs[0]), _meta(store, pdfs[1])
    assert first["team"] == "beta" and first["tags"] == ["x"] and "year" not in first and first["title"]
    assert second["team"] == "alpha" and second["year"] == 2023


def test_docpc_meta_set_and_unset(two_docs: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]) -> None:
    store, pdfs = two_docs
    folder = str(pdfs[0].parent)
    assert main(["meta", "set", folder, "--store", str(store), "--meta", "year:=2025", "--meta", "note=ok", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] == 2
    assert main(["meta", "unset", str(pdfs[1]), "--store", str(store), "--key", "note"]) == 0
    assert "1 of 1 matching document changed" in capsys.readouterr().out
    assert _meta(store, pdfs[0])["year"] == 2025 and _meta(store, pdfs[0])["note"] == "ok"
    assert "note" not in _meta(store, pdfs[1])
    assert main(["meta", "unset", str(store.parent / "nowhere"), "--store", str(store), "--key", "note"]) == 1
    assert "no stored document matches" in capsys.readouterr().err


def test_mapping_entries_that_match_no_pdf_are_named(tmp_path: Path, tiny_encoder: ColPaliEncoder,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    pdf = make_pdf(tmp_path / "a.pdf", "mapped")
    typo = str((tmp_path / "b.pdf").resolve())
    with caplog.at_level(logging.WARNING, logger="docpc_retrievers.documents.user_metadata"):
        with DocPCIndex(tmp_path / "store", encoder=tiny_encoder, writable=True) as index:
            index.add_pdfs([pdf], metadata_by_path={str(pdf.resolve()): {"shelf": 1}, typo: {"shelf": 2}})
            assert index.store.ids(where={"shelf": 1})
    assert f"metadata for 1 path matching no PDF of this run: {typo}" in caplog.text
