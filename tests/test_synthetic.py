"""Synthetic DocViRe-style corpus: determinism, structure, labels and evidence placement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pymupdf
import pytest

from docpc_retrievers.eval.corpus import load_labelled_corpus
from docpc_retrievers.eval.synthetic import DOMAINS, generate_corpus, main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_corpus(tmp_path_factory.mktemp("synthetic") / "tiny", "tiny", seed=0).root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).lower()


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "corpus.jsonl").read_text().splitlines()]


def test_same_seed_same_bytes_other_seed_differs(tiny: Path, tmp_path: Path) -> None:
    again = generate_corpus(tmp_path / "again", "tiny", seed=0)
    first, second = _files(tiny), _files(again.root)
    assert len(first) > 24 and first == second
    other = generate_corpus(tmp_path / "other", "tiny", seed=1)
    assert _files(other.root) != first


def test_structure_and_page_counts(tiny: Path) -> None:
    records = _records(tiny)
    assert 20 <= len(records) <= 30
    assert {r["metadata"]["domain"] for r in records} == set(DOMAINS)
    pages = []
    for r in records:
        with pymupdf.open(tiny / r["file"]) as doc:
            assert doc.page_count == r["metadata"]["pages"]
            assert 4 <= doc.page_count <= 30
            assert doc.metadata["title"] == r["title"]
            assert r["title"].lower() in _norm(doc[0].get_text())  # title page
            assert "contents" in doc[1].get_text().lower()  # contents page
            labels = [doc[i].get_label() for i in range(doc.page_count)]
            assert labels[:3] == ["i", "ii", "1"]
            pages.append(doc.page_count)
    assert sum(p >= 20 for p in pages) >= 2  # some long documents
    assert min(pages) < 10


def test_tables_figures_and_small_print_are_drawn(tiny: Path) -> None:
    tables = figures = small = 0
    for r in _records(tiny)[:12]:
        with pymupdf.open(tiny / r["file"]) as doc:
            for page in doc:
                text = page.get_text()
                if re.search(r"^Table \d+\.", text, re.M):
                    tables += 1
                    assert len(page.get_drawings()) >= 5  # ruled table
                if re.search(r"^Figure \d+\.", text, re.M):
                    figures += 1
                    assert len(page.get_drawings()) >= 5  # vector chart or diagram
                sizes = {round(s["size"], 1) for b in page.get_text("dict")["blocks"] for ln in b.get("lines", []) for s in ln["spans"]}
                small += bool(sizes) and min(sizes) < 6
    assert tables > 0 and figures > 0 and small > 0


def test_queries_have_several_positives_and_are_grounded_in_text(tiny: Path) -> None:
    corpus = load_labelled_corpus(tiny)
    train = load_labelled_corpus(tiny, split="train")
    assert len(corpus.queries) >= 14 and len(train.queries) == len(corpus.queries)
    assert {q.domain for q in corpus.queries} == set(DOMAINS)
    texts: dict[str, str] = {}
    for doc_id, path in corpus.documents.items():
        with pymupdf.open(path) as doc:
            texts[doc_id] = _norm(" ".join(page.get_text() for page in doc))
    topic_of = {json.loads(line)["_id"]: json.loads(line)["metadata"]["topic"] for line in (tiny / "queries.jsonl").read_text().splitlines()}
    records = {r["_id"]: r for r in _records(tiny)}
    grades = [g for q in corpus.queries for g in q.relevance.values()]
    assert grades.count(2) >= len(corpus.documents) and grades.count(1) > 0  # every document has a main topic
    for q in corpus.queries:
        assert len(q.relevance) >= 2, q.query_id
        assert set(q.relevance.values()) <= {1, 2}
        topic = topic_of[q.query_id]
        for doc_id in q.relevance:
            assert topic in records[doc_id]["metadata"]["topics"]
            # the query's content words occur in every positive's text layer
            words = [w for w in re.findall(r"[a-z]+", q.text.lower()) if len(w) > 4 and w not in {"which", "reports", "discuss", "documents", "report", "about", "change", "findings", "figures", "observed"}]
            assert words and all(w in texts[doc_id] for w in words), (q.text, doc_id)


def test_evidence_pages_hold_the_topic_and_some_lie_beyond_page_four(tiny: Path) -> None:
    deep = 0
    for r in _records(tiny):
        meta = r["metadata"]
        with pymupdf.open(tiny / r["file"]) as doc:
            pages = [_norm(page.get_text()) for page in doc]
        for topic, evidence in meta["evidence_pages"].items():
            assert evidence, (r["_id"], topic)
            words = _topic_words(tiny, topic)
            for number in evidence:
                assert all(w in pages[number - 1] for w in words), (r["_id"], topic, number)
            if topic in meta["deep_topics"]:
                deep += 1
                assert min(evidence) >= 5
                first_four = " ".join(pages[:4])
                assert not all(w in first_four for w in words), (r["_id"], topic)
    assert deep >= 5


def _topic_words(root: Path, topic: str) -> list[str]:
    """The topic's phrase as the generator recorded it in the test query's metadata."""
    for line in (root / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        if q["_id"] == f"test-{topic}":
            return [q["metadata"]["phrase"]]
    raise AssertionError(f"no test query for {topic}")


def test_cli_refuses_a_non_empty_folder_and_bad_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.txt").write_text("keep me")
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path), "--size", "tiny"])
    assert info.value.code == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "x.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="unknown size"):
        generate_corpus(tmp_path / "new", "huge")
