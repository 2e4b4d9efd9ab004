"""Labelled-corpus loaders: BEIR layout, simple JSONL form, and every bad-label error naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docpc_retrievers.errors import DocPCError
from docpc_retrievers.eval.corpus import LabelError, LabelledCorpus, LabelledQuery, load_labelled_corpus


def _pdf(path: Path, text: str = "x") -> Path:
    """A stand-in PDF file (the loader checks existence only; it never opens PDFs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"%PDF-1.4\n% " + text.encode() + b"\n%%EOF\n")
    return path


def _jsonl(path: Path, records: list[object]) -> None:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")


def _beir(root: Path, *, qrels: str | None = None, queries: list[object] | None = None, corpus: list[object] | None = None) -> Path:
    for name in ("a", "b", "c"):
        _pdf(root / "files" / f"{name}.pdf", name)
    _jsonl(
        root / "corpus.jsonl",
        corpus
        if corpus is not None
        else [
            {"_id": "doc-a", "file": "files/a.pdf", "title": "A"},
            {"_id": "doc-b", "path": "files/b.pdf"},
            {"_id": "doc-c", "metadata": {"file": "files/c.pdf"}},
        ],
    )
    _jsonl(
        root / "queries.jsonl",
        queries
        if queries is not None
        else [
            {"_id": "q1", "text": "first query", "domain": "finance"},
            {"_id": "q2", "text": "second query", "metadata": {"domain": "legal"}},
            {"_id": "q3", "text": "no domain"},
            {"_id": "q9", "text": "a query of another split"},
        ],
    )
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(
        qrels if qrels is not None else "query-id\tcorpus-id\tscore\nq1\tdoc-a\t2\nq1\tdoc-b\t1\nq2\tdoc-c\t1\nq2\tdoc-a\t0\nq3\tdoc-b\t0\n",
        encoding="utf-8",
    )
    return root


def test_beir_layout(tmp_path: Path) -> None:
    corpus = load_labelled_corpus(_beir(tmp_path))
    assert isinstance(corpus, LabelledCorpus)
    assert corpus.root == tmp_path.resolve()
    assert corpus.documents == {
        "doc-a": (tmp_path / "files" / "a.pdf").resolve(),
        "doc-b": (tmp_path / "files" / "b.pdf").resolve(),
        "doc-c": (tmp_path / "files" / "c.pdf").resolve(),
    }
    by_id = {q.query_id: q for q in corpus.queries}
    assert set(by_id) == {"q1", "q2", "q3"}  # q9 has no judgement in this split
    assert by_id["q1"] == LabelledQuery("q1", "first query", {"doc-a": 2, "doc-b": 1}, "finance")
    assert by_id["q2"].relevance == {"doc-c": 1} and by_id["q2"].domain == "legal"  # grade 0 is not a positive
    assert by_id["q3"].relevance == {} and by_id["q3"].domain is None
    assert corpus.qrels()["q1"] == {"doc-a": 2, "doc-b": 1}
    assert corpus.domains() == ["finance", "legal"]


def test_beir_split_selection_and_missing_split(tmp_path: Path) -> None:
    root = _beir(tmp_path)
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq9\tdoc-c\t1\n", encoding="utf-8")
    train = load_labelled_corpus(root, split="train")
    assert [q.query_id for q in train.queries] == ["q9"]
    with pytest.raises(LabelError, match=r"dev\.tsv: file not found"):
        load_labelled_corpus(root, split="dev")


@pytest.mark.parametrize(
    ("qrels", "line", "message"),
    [
        ("query-id\tcorpus-id\tscore\nq1\tdoc-zzz\t1\n", 2, "document 'doc-zzz'.*not in the corpus"),
        ("query-id\tcorpus-id\tscore\nq1\tdoc-a\t1\nq7\tdoc-a\t1\n", 3, "query 'q7' is not in queries.jsonl"),
        ("query-id\tcorpus-id\tscore\nq1\tdoc-a\t1\nq1\tdoc-a\t2\n", 3, "duplicate judgement"),
        ("query-id\tcorpus-id\tscore\nq1\tdoc-a\n", 2, "expected 3 tab-separated columns"),
        ("query-id\tcorpus-id\tscore\nq1\tdoc-a\thigh\n", 2, "grade must be an integer"),
        ("query-id\tcorpus-id\tscore\nq1\tdoc-a\t1.5\n", 2, "grade must be an integer"),
    ],
)
def test_beir_bad_qrels(tmp_path: Path, qrels: str, line: int, message: str) -> None:
    root = _beir(tmp_path, qrels=qrels)
    with pytest.raises(LabelError, match=message) as info:
        load_labelled_corpus(root)
    assert info.value.line == line
    assert info.value.file.endswith("test.tsv")
    assert f"test.tsv, line {line}:" in str(info.value)
    assert isinstance(info.value, DocPCError)


@pytest.mark.parametrize(
    ("queries", "line", "message"),
    [
        ([{"_id": "q1", "text": "a"}, {"_id": "q1", "text": "again"}], 2, "duplicate query id 'q1'"),
        ([{"_id": "q1", "text": "a"}, '{"_id": "q2", "text": '], 2, "malformed JSON"),
        ([{"_id": "q1", "text": "a"}, {"_id": "q2"}], 2, "missing field 'text'"),
        ([{"_id": "q1", "text": "   "}], 1, "field 'text' is empty"),
        ([["not", "an", "object"]], 1, "expected a JSON object"),
        ([{"_id": "q1", "text": "a", "domain": 3}], 1, "field 'domain'"),
    ],
)
def test_beir_bad_queries(tmp_path: Path, queries: list[object], line: int, message: str) -> None:
    root = _beir(tmp_path, queries=queries, qrels="query-id\tcorpus-id\tscore\n")
    with pytest.raises(LabelError, match=message) as info:
        load_labelled_corpus(root)
    assert info.value.file.endswith("queries.jsonl") and info.value.line == line
    assert f"queries.jsonl, line {line}:" in str(info.value)


@pytest.mark.parametrize(
    ("corpus", "line", "message"),
    [
        ([{"_id": "d", "file": "files/a.pdf"}, {"_id": "d", "file": "files/b.pdf"}], 2, "duplicate document id 'd'"),
        ([{"_id": "d", "file": "files/missing.pdf"}], 1, "PDF 'files/missing.pdf' not found"),
        ([{"_id": "d"}], 1, "has no 'file'"),
        ([{"file": "files/a.pdf"}], 1, "missing field '_id'"),
    ],
)
def test_beir_bad_corpus(tmp_path: Path, corpus: list[object], line: int, message: str) -> None:
    root = _beir(tmp_path, corpus=corpus)
    with pytest.raises(LabelError, match=message) as info:
        load_labelled_corpus(root)
    assert info.value.file.endswith("corpus.jsonl") and info.value.line == line


def _simple(root: Path, records: list[object], *, corpus_jsonl: bool = False) -> Path:
    _pdf(root / "pdfs" / "alpha.pdf")
    _pdf(root / "pdfs" / "sub" / "beta.pdf")
    _pdf(root / "pdfs" / "gamma.PDF")
    if corpus_jsonl:
        _jsonl(root / "corpus.jsonl", [{"_id": "A", "file": "pdfs/alpha.pdf"}, {"_id": "B", "file": "pdfs/sub/beta.pdf"}])
    _jsonl(root / "queries.jsonl", records)
    return root


def test_simple_form_with_pdfs_folder(tmp_path: Path) -> None:
    root = _simple(
        tmp_path,
        [
            {"query_id": "q1", "query": "list form", "positives": ["alpha", "beta"], "domain": "legal"},
            {"query_id": "q2", "query": "graded form", "positives": {"gamma": 3, "alpha": 0}},
            {"query_id": "q3", "query": "train only", "positives": ["beta"], "split": "train"},
            "",
        ],
    )
    corpus = load_labelled_corpus(root)
    assert set(corpus.documents) == {"alpha", "beta", "gamma"}
    assert corpus.documents["beta"] == (root / "pdfs" / "sub" / "beta.pdf").resolve()
    assert [q.query_id for q in corpus.queries] == ["q1", "q2"]
    assert corpus.queries[0].relevance == {"alpha": 1, "beta": 1} and corpus.queries[0].domain == "legal"
    assert corpus.queries[1].relevance == {"gamma": 3} and corpus.queries[1].domain is None
    train = load_labelled_corpus(root, split="train")
    assert [q.query_id for q in train.queries] == ["q1", "q2", "q3"]  # records without a split belong to every split


def test_simple_form_with_corpus_jsonl(tmp_path: Path) -> None:
    root = _simple(tmp_path, [{"query_id": "q1", "query": "x", "positives": ["A", "B"]}], corpus_jsonl=True)
    corpus = load_labelled_corpus(root)
    assert set(corpus.documents) == {"A", "B"}
    assert corpus.queries[0].relevance == {"A": 1, "B": 1}


@pytest.mark.parametrize(
    ("records", "line", "message"),
    [
        ([{"query_id": "q1", "query": "x", "positives": ["alpha", "nope"]}], 1, "positive 'nope' names no document"),
        ([{"query_id": "q1", "query": "x", "positives": {"nope": 1}}], 1, "positive 'nope' names no document"),
        ([{"query_id": "q1", "query": "x", "positives": ["alpha"]}, {"query_id": "q1", "query": "y", "positives": ["beta"]}], 2, "duplicate query id 'q1'"),
        ([{"query_id": "q1", "query": "x", "positives": ["alpha"]}, "{broken"], 2, "malformed JSON"),
        ([{"query_id": "q1", "query": "x"}], 1, "no 'positives' field"),
        ([{"query_id": "q1", "query": "x", "positives": "alpha"}], 1, "'positives' must be"),
        ([{"query_id": "q1", "query": "x", "positives": {"alpha": "high"}}], 1, "grade must be an integer"),
        ([{"query_id": "q1", "query": "x", "positives": ["alpha", "alpha"]}], 1, "listed twice"),
        ([{"query": "x", "positives": ["alpha"]}], 1, "missing field 'query_id'"),
        ([{"query_id": "q1", "query": "x", "positives": ["alpha"]}, {"query_id": "q2", "query": "y", "positives": ["nope"], "split": "train"}], 2, "positive 'nope'"),
    ],
)
def test_simple_form_bad_labels(tmp_path: Path, records: list[object], line: int, message: str) -> None:
    root = _simple(tmp_path, records)
    with pytest.raises(LabelError, match=message) as info:
        load_labelled_corpus(root)
    assert info.value.line == line
    assert str(info.value).startswith(f"{root / 'queries.jsonl'}, line {line}: ")


def test_duplicate_pdf_stems_are_refused(tmp_path: Path) -> None:
    root = _simple(tmp_path, [{"query_id": "q1", "query": "x", "positives": ["alpha"]}])
    _pdf(root / "pdfs" / "other" / "alpha.pdf")
    with pytest.raises(LabelError, match="'alpha' is used twice"):
        load_labelled_corpus(root)


def test_not_a_corpus(tmp_path: Path) -> None:
    with pytest.raises(LabelError, match="not a labelled corpus"):
        load_labelled_corpus(tmp_path)
    with pytest.raises(LabelError, match="not a folder"):
        load_labelled_corpus(tmp_path / "missing")
    (tmp_path / "queries.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(LabelError, match="no documents"):
        load_labelled_corpus(tmp_path)


def test_empty_queries_are_refused(tmp_path: Path) -> None:
    root = _simple(tmp_path, [])
    (root / "queries.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(LabelError, match="no queries"):
        load_labelled_corpus(root)
