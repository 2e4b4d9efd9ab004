"""Every mistake gets a clear answer: filters checked before a model loads, options that do not apply,
readable output. The command line runs in this process here, so a model load can be caught."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from e2e_helpers import clear_chroma_cache, make_pdf

from docpc_retrievers import DocPCError, DocPCIndex, InvalidFilterError
from docpc_retrievers.errors import SourceRootError
from docpc_retrievers.cli.search import evidence_line
from docpc_retrievers.results import EvidencePage
from docpc_retrievers.catalog import no_match_reason
from docpc_retrievers.cli.app import main
from docpc_retrievers.cli.search import page_ranges
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.filters import check_where, filter_keys
from docpc_retrievers.explain.shares import shares_text


pytestmark = pytest.mark.usefixtures("fresh_chroma")


@pytest.fixture()
def store(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> Path:
    for i in range(3):
        make_pdf(tmp_path / "docs" / f"m{i}.pdf", f"mistake document {i}", 1 + i)
    with DocPCIndex.from_pdfs([tmp_path / "docs"], tmp_path / "store", encoder=tiny_encoder, workers=0):
        pass
    clear_chroma_cache()
    return tmp_path / "store"


@pytest.fixture()
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to load a model fails the test: mistakes must be caught before."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(ColPaliEncoder, "__init__", refuse)


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ({"total_pages": {"$gtee": 1}}, "'$gtee' for key 'total_pages'"),
        ({"$and": [{"a": 1}]}, "at least two"),
        ({"$xor": [{"a": 1}, {"b": 2}]}, "'$xor'"),
        ({"a": {"$in": []}}, "non-empty list"),
        ({"a": {"$gt": "x"}}, "int or a float"),
    ],
)
def test_bad_filters_raise_the_library_error(where: dict, named: str) -> None:
    with pytest.raises(InvalidFilterError, match=named.replace("$", r"\$")) as caught:
        check_where(where)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, DocPCError)
    assert check_where({"total_pages": {"$gte": 2}}) == {"total_pages": {"$gte": 2}}


def test_filter_typo_fails_before_the_model_loads(store: Path, no_model_load: None) -> None:
    with DocPCIndex(store) as index:
        with pytest.raises(InvalidFilterError, match="valid operators"):
            index.search("anything", filters={"total_pages": {"$gtee": 1}})
        with pytest.raises(InvalidFilterError):
            list(index.documents(where={"$or": 1}))


@pytest.mark.parametrize("command", ["search", "show"])
def test_cli_filter_typo_is_a_usage_error_before_loading(
    store: Path, no_model_load: None, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--out", str(tmp_path / "r.html")] if command == "show" else []
    with pytest.raises(SystemExit) as caught:
        main([command, "x", "--store", str(store), "--where", '{"total_pages": {"$gtee": 1}}', *extra])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "unknown operator '$gtee'" in err and "unexpected" not in err


def test_filter_keys_are_found_inside_logical_operators() -> None:
    where = {"$and": [{"a": 1}, {"$or": [{"b": {"$in": [1, 2]}}, {"a": {"$ne": 2}}]}]}
    assert filter_keys(where) == ["a", "b"] and filter_keys(None) == [] and filter_keys({"c": "x"}) == ["c"]


def test_a_filter_that_matches_nothing_says_why(
    tmp_path: Path, tiny_encoder: ColPaliEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        make_pdf(tmp_path / "docs" / f"m{i}.pdf", f"mistake document {i}", 1)
    mine = {"m0.pdf": {"dept": "legal"}, "m1.pdf": {"dept": "legal"}, "m2.pdf": {"dept": "tax", "year": 2024}}
    with DocPCIndex.from_pdfs([tmp_path / "docs"], tmp_path / "store", encoder=tiny_encoder, workers=0,
                              metadata=lambda path: mine[path.name]) as index:
        assert index.info()["metadata_keys"] == {"dept": 3, "year": 1}
    store = str(tmp_path / "store")
    assert main(["info", "--store", store]) == 0
    assert "metadata     your keys (documents): dept (3), year (1)" in capsys.readouterr().out
    assert main(["list", "--store", store, "--where", '{"dpt": "legal"}']) == 0  # a typo in a key
    err = capsys.readouterr().err
    assert "matches none of the 3 stored documents" in err and "no document has the key 'dpt'" in err
    assert "dept (3), year (1)" in err and "total_pages" in err  # the user's keys, then the library's
    assert main(["search", "mistake", "--store", store, "--where", '{"dept": "Legal"}']) == 0  # a value's case
    out, err = capsys.readouterr()
    assert "no results" in out and "'dept' takes \"legal\" (2), \"tax\" (1) in the 3 of 3 documents" in err
    assert "no document has" not in err
    assert main(["show", "mistake", "--store", store, "--where", '{"dept": "Legal"}', "--out", str(tmp_path / "r.html")]) == 0
    assert "'dept' takes \"legal\" (2)" in capsys.readouterr().err
    assert main(["delete", "--store", store, "--where", '{"year": "2024"}']) == 1  # a number given as text
    err = capsys.readouterr().err
    assert "no stored document matches" in err and "'year' takes 2024 (1) in the 1 of 3 documents" in err
    assert main(["list", "--store", store, "--where", '{"dept": "tax"}']) == 0  # a match: nothing to explain
    assert "matches none" not in capsys.readouterr().err
    with DocPCIndex(tmp_path / "store") as index:  # asked anyway, it says what matches
        assert no_match_reason(index.store, {"dept": "legal"}) == 'the filter {"dept": "legal"} matches 2 stored documents'
        reason = no_match_reason(index.store, {"$and": [{"year": {"$gt": 2030}}, {"dept": "tax"}]})
        assert "'year' takes 2024 (1) in the 1 of 3 documents that have it\n" in reason + "\n"  # numbers: no case note
        assert "'dept' takes \"legal\" (2), \"tax\" (1) in the 3 of 3 documents that have it (strings match" in reason


def test_show_takes_where(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    code = main(["show", "mistake", "--store", str(store), "--where", '{"total_pages": 3}', "--out", str(out), "--json"])
    assert code == 0
    import json

    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [h["total_pages"] for h in hits] == [3] and out.is_file()


def test_options_that_do_not_apply_say_so(store: Path, no_model_load: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["search", "x", "--store", str(store), "--aggregate", "mean"])
    assert caught.value.code == 2 and "page-mode stores only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        main(["search", "x", "--store", str(store), "--top-k", "-1"])
    assert caught.value.code == 2 and "must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        main(["search", "x", "--store", str(store), "--rerank-top-n", "0"])
    assert caught.value.code == 2 and "must be >= 1" in capsys.readouterr().err


def test_index_of_a_folder_without_pdfs(store: Path, tmp_path: Path, tiny_encoder: ColPaliEncoder,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 whether or not the store exists (docs/guide.md), and the library's from_pdfs and add_pdfs raise,
    creating and changing nothing."""
    (tmp_path / "nothing").mkdir()
    with pytest.raises(SystemExit) as caught:
        main(["index", str(tmp_path / "nothing"), "--store", str(store)])
    assert caught.value.code == 2 and "no PDF under" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        main(["index", str(tmp_path / "nothing"), "--store", str(tmp_path / "new-store")])
    assert caught.value.code == 2 and not (tmp_path / "new-store").exists()
    with pytest.raises(SourceRootError, match="no PDF under"):
        DocPCIndex.from_pdfs([tmp_path / "nothing"], tmp_path / "lib-store", encoder=tiny_encoder, workers=0)
    assert not (tmp_path / "lib-store").exists()
    with DocPCIndex(store, encoder=tiny_encoder, writable=True) as index:
        with pytest.raises(SourceRootError, match="no PDF under"):
            index.add_pdfs([tmp_path / "nothing"])
        assert len(index) == 3


def test_info_is_a_readable_block(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "{" not in out and "fingerprint  sha256:" in out and "(embedded)" in out


def test_search_output_counts_pages_and_labels_evidence(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "mistake", "--store", str(store), "-k", "2"]) == 0  # -k: --top-k's short form
    assert sum(line[:4].strip().endswith(".") for line in capsys.readouterr().out.splitlines()) == 2
    assert main(["search", "mistake", "--store", str(store), "--top-k", "3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert main(["search", "mistake", "--store", str(store), "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    blocks = [b for b in re.split(r"(?m)^(?=\s*\d+\.\s)", out) if b.strip()]
    assert len(blocks) == len(hits) == 3
    for hit, block in zip(hits, blocks):  # one definition: the printed line is the JSON's shares, which add up to 1
        pages = {e["page"]: e["share"] for e in hit["evidence_pages"]}
        other = hit.get("other_shares", {})
        assert abs(sum(pages.values()) + sum(other.values()) - 1.0) < 1e-4, hit
        shown = dict(sorted(((p, v) for p, v in pages.items() if v >= 0.005), key=lambda kv: -kv[1])[:4])
        assert f"where the score went: {shares_text(shown, other)}" in block, block
        assert not re.search(r"\bpage \d+ 0%", block), block
    nothing = [EvidencePage(page=p, score=0.0, share=0.0) for p in (1, 2, 3, 4)]
    assert evidence_line(nothing, {"query prompt tokens": 0.7, "image prompt rows": 0.3}) == (
        "query prompt tokens 70%, image prompt rows 30%")
    some = [EvidencePage(page=2, score=0.5, share=0.6), EvidencePage(page=1, score=0.0, share=0.0)]
    assert evidence_line(some, {"query prompt tokens": 0.4}) == "page 2 60%, query prompt tokens 40%"
    assert "[1 page;" in out and "1 pages" not in out and "where the score went:" in out
    assert page_ranges([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8" and page_ranges(list(range(1, 118))) == "1-117"


def test_crops_of_a_tiny_page_are_rendered_large_enough(tmp_path: Path, tiny_encoder: ColPaliEncoder) -> None:
    import pymupdf

    pdf = tmp_path / "tiny" / "stamp.pdf"
    pdf.parent.mkdir()
    doc = pymupdf.open()
    page = doc.new_page(width=20, height=16)  # a page a few points wide: 40x32 px at 144 dpi
    page.insert_text((2, 10), "ok", fontsize=6)
    doc.save(pdf)
    doc.close()
    with DocPCIndex.from_pdfs([pdf], tmp_path / "store", encoder=tiny_encoder, workers=0) as index:
        hit = index.search("ok", 1)[0]
        why = hit.explain(top_pages=1)
    assert why.crops and all(min(c.image.size) >= 256 for c in why.crops)
    assert why.crops[0].source == "pdf"


def test_report_says_where_the_whole_score_went(store: Path, tiny_encoder: ColPaliEncoder) -> None:
    with DocPCIndex(store, encoder=tiny_encoder) as index:
        hit = index.search("mistake document", 1)[0]
        why = hit.explain(top_pages=1)
    parts = why.breakdown()
    assert parts and sum(parts.values()) == pytest.approx(1.0)
    assert sum(c.value for c in why.contributions) == pytest.approx(why.score, rel=1e-4)
    assert any(k.startswith("page ") for k in parts)
    rows = why.token_rows()
    assert len(rows) == len(why.contributions) and all(isinstance(v, float) for _, v, _ in rows)
    html = why.to_html()
    assert "where the score went" in html and "100% in all" in html and "<th>token</th>" in html
