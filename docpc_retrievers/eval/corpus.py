"""Labelled corpora: PDFs plus queries with graded, multi-positive relevance judgements.

Why: evaluation (``docpc eval``) and training both need the same view of a
labelled collection, whatever its on-disk form. :func:`load_labelled_corpus`
reads two layouts (see ``docs/evaluation.md``):

* **BEIR layout** (chosen when the folder has a ``qrels/`` sub-folder)::

      corpus.jsonl        {"_id": "doc1", "file": "pdfs/doc1.pdf", "title": ...}   ("path" also accepted)
      queries.jsonl       {"_id": "q1", "text": "...", "domain": "finance"}       (or "metadata": {"domain": ...})
      qrels/<split>.tsv   query-id <TAB> corpus-id <TAB> score, with a header row

  Queries are those that appear in ``qrels/<split>.tsv``; other queries in
  ``queries.jsonl`` (for example those of another split) are ignored.

* **Simple JSONL form**: ``queries.jsonl`` of
  ``{"query_id": "q1", "query": "...", "positives": ["doc1", "doc2"] | {"doc1": 2}, "domain": "legal"}``
  (optional ``"split"``: records of another split are skipped) and the documents
  either in ``corpus.jsonl`` (as above) or as PDFs under ``pdfs/`` whose file
  stem is the document id.

Every bad label (malformed line, missing field, duplicate id, a judgement
naming an unknown query or document, a missing PDF) raises :class:`LabelError`
naming the file and the 1-based line number. Grades must be integers; only
grades > 0 are kept as relevance (0 or less means judged non-relevant, as in
trec_eval). A query with no positive judgement is kept (it scores 0 on every
metric, as trec_eval counts it) and a warning is logged.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docpc_retrievers.errors import DocPCError

__all__ = ["LabelError", "LabelledCorpus", "LabelledQuery", "load_labelled_corpus"]

logger = logging.getLogger(__name__)


class LabelError(DocPCError):
    """A labelled corpus has a bad record; ``file`` and ``line`` (1-based, or None) say where."""

    def __init__(self, file: str | Path, line: int | None, message: str) -> None:
        self.file = str(file)
        self.line = line
        self.reason = message
        where = f"{self.file}, line {line}" if line is not None else self.file
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class LabelledQuery:
    """One query: its id, text, graded positives (dataset doc id -> grade > 0) and optional domain."""

    query_id: str
    text: str
    relevance: dict[str, int]
    domain: str | None


@dataclass(frozen=True)
class LabelledCorpus:
    """A labelled collection: its folder, documents (dataset doc id -> PDF path) and queries."""

    root: Path
    documents: dict[str, Path]
    queries: list[LabelledQuery]

    def qrels(self) -> dict[str, dict[str, int]]:
        """Relevance judgements in the pytrec_eval shape: query id -> {doc id: grade}."""
        return {q.query_id: dict(q.relevance) for q in self.queries}

    def domains(self) -> list[str]:
        """The distinct query domains, sorted (queries without a domain are not counted)."""
        return sorted({q.domain for q in self.queries if q.domain is not None})


# ------------------------------------------------------------------------------------ reading


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; malformed lines raise LabelError."""
    try:
        handle = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise LabelError(path, None, "file not found") from None
    except OSError as exc:
        raise LabelError(path, None, f"cannot read file: {exc}") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise LabelError(path, number, f"malformed JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise LabelError(path, number, f"expected a JSON object, got {type(record).__name__}")
            yield number, record


def _string_field(path: Path, line: int, record: Mapping[str, Any], *names: str, required: bool = True) -> str | None:
    """The first present field among ``names`` as a non-empty string (ints are accepted as ids)."""
    for name in names:
        if name in record and record[name] is not None:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise LabelError(path, line, f"field {name!r} must be a string, got {type(value).__name__}")
            text = str(value)
            if not text.strip():
                raise LabelError(path, line, f"field {name!r} is empty")
            return text
    if required:
        raise LabelError(path, line, f"missing field {' or '.join(repr(n) for n in names)}")
    return None


def _grade(path: Path, line: int, value: object, what: str) -> int:
    """An integer relevance grade (``2`` or ``2.0``; not ``true``, ``"2"`` or ``1.5``)."""
    if isinstance(value, bool):
        raise LabelError(path, line, f"{what}: grade must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number == int(number):
            return int(number)
    raise LabelError(path, line, f"{what}: grade must be an integer, got {value!r}")


def _domain(path: Path, line: int, record: Mapping[str, Any]) -> str | None:
    value = record.get("domain")
    if value is None and isinstance(record.get("metadata"), Mapping):
        value = record["metadata"].get("domain")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise LabelError(path, line, f"field 'domain' must be a non-empty string, got {value!r}")
    return value.strip()


def _read_corpus(root: Path) -> dict[str, Path]:
    """``corpus.jsonl``: ``_id`` plus ``file``/``path`` (relative to the folder, or absolute) per document."""
    path = root / "corpus.jsonl"
    documents: dict[str, Path] = {}
    for line, record in _jsonl(path):
        doc_id = _string_field(path, line, record, "_id", "doc_id", "corpus_id")
        assert doc_id is not None
        meta = record.get("metadata") if isinstance(record.get("metadata"), Mapping) else {}
        rel = _string_field(path, line, record, "file", "path", required=False)
        if rel is None:
            rel = _string_field(path, line, meta, "file", "path", required=False)
        if rel is None:
            raise LabelError(path, line, f"document {doc_id!r} has no 'file' (or 'path') naming its PDF")
        if doc_id in documents:
            raise LabelError(path, line, f"duplicate document id {doc_id!r}")
        pdf = (root / rel).resolve()
        if not pdf.is_file():
            raise LabelError(path, line, f"document {doc_id!r}: PDF {rel!r} not found (looked at {pdf})")
        documents[doc_id] = pdf
    if not documents:
        raise LabelError(path, None, "no documents")
    return documents


def _read_pdf_folder(root: Path) -> dict[str, Path]:
    """PDFs under ``pdfs/`` (recursively); each file's stem is its document id and must be unique."""
    folder = root / "pdfs"
    if not folder.is_dir():
        raise LabelError(root, None, "no documents: expected corpus.jsonl or a pdfs/ folder")
    documents: dict[str, Path] = {}
    for pdf in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf"):
        if pdf.stem in documents:
            raise LabelError(
                pdf, None, f"document id {pdf.stem!r} is used twice (also {documents[pdf.stem]}); file stems must be unique"
            )
        documents[pdf.stem] = pdf.resolve()
    if not documents:
        raise LabelError(folder, None, "no PDF files")
    return documents


def _read_qrels(path: Path, queries: Mapping[str, tuple[str, str | None]], documents: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """``qrels/<split>.tsv`` -> query id -> {doc id: grade} (grades <= 0 kept as 0-entries)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise LabelError(path, None, "file not found (is --split right?)") from None
    except OSError as exc:
        raise LabelError(path, None, f"cannot read file: {exc}") from None
    judged: dict[str, dict[str, int]] = {}
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        cols = raw.rstrip("\r").split("\t")
        if len(cols) == 1:
            cols = raw.split()
        if number == 1 and cols[0].strip().lower() in {"query-id", "query_id", "qid", "query"}:
            continue  # header row
        if len(cols) == 4:  # TREC qrels form: qid 0 docid grade
            cols = [cols[0], cols[2], cols[3]]
        if len(cols) != 3:
            raise LabelError(path, number, f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(cols)}")
        qid, did, score = (c.strip() for c in cols)
        grade = _grade(path, number, score, f"judgement ({qid}, {did})")
        if qid not in queries:
            raise LabelError(path, number, f"query {qid!r} is not in queries.jsonl")
        if did not in documents:
            raise LabelError(path, number, f"document {did!r} (judged for query {qid!r}) is not in the corpus")
        per_query = judged.setdefault(qid, {})
        if did in per_query:
            raise LabelError(path, number, f"duplicate judgement for query {qid!r} and document {did!r}")
        per_query[did] = grade
    return judged


def _query_fields(path: Path, line: int, record: Mapping[str, Any], ids: tuple[str, str], texts: tuple[str, str],
                  seen: Container[str]) -> tuple[str, str]:
    """A query record's id and text (each under the first of its two keys present); a repeated id is an error."""
    qid = _string_field(path, line, record, *ids)
    text = _string_field(path, line, record, *texts)
    assert qid is not None and text is not None
    if qid in seen:
        raise LabelError(path, line, f"duplicate query id {qid!r}")
    return qid, text


def _load_beir(root: Path, split: str) -> LabelledCorpus:
    documents = _read_corpus(root)
    queries_path = root / "queries.jsonl"
    queries: dict[str, tuple[str, str | None]] = {}
    for line, record in _jsonl(queries_path):
        qid, text = _query_fields(queries_path, line, record, ("_id", "query_id"), ("text", "query"), queries)
        queries[qid] = (text, _domain(queries_path, line, record))
    judged = _read_qrels(root / "qrels" / f"{split}.tsv", queries, documents)
    out = [
        LabelledQuery(qid, queries[qid][0], {d: g for d, g in rels.items() if g > 0}, queries[qid][1])
        for qid, rels in judged.items()
    ]
    return _finish(root, documents, out, root / "qrels" / f"{split}.tsv")


def _load_simple(root: Path, split: str) -> LabelledCorpus:
    documents = _read_corpus(root) if (root / "corpus.jsonl").is_file() else _read_pdf_folder(root)
    path = root / "queries.jsonl"
    out: list[LabelledQuery] = []
    seen: set[str] = set()
    for line, record in _jsonl(path):
        qid, text = _query_fields(path, line, record, ("query_id", "_id"), ("query", "text"), seen)
        seen.add(qid)
        if "positives" not in record:
            raise LabelError(path, line, f"query {qid!r} has no 'positives' field")
        positives = record["positives"]
        grades: dict[str, int] = {}
        if isinstance(positives, list):
            for doc in positives:
                if isinstance(doc, bool) or not isinstance(doc, (str, int)):
                    raise LabelError(path, line, f"query {qid!r}: positive {doc!r} is not a document id")
                if str(doc) in grades:
                    raise LabelError(path, line, f"query {qid!r}: positive {str(doc)!r} is listed twice")
                grades[str(doc)] = 1
        elif isinstance(positives, Mapping):
            for doc, grade in positives.items():
                grades[str(doc)] = _grade(path, line, grade, f"query {qid!r}, positive {doc!r}")
        else:
            raise LabelError(path, line, f"query {qid!r}: 'positives' must be a list of ids or an object id -> grade")
        for doc in grades:
            if doc not in documents:
                raise LabelError(path, line, f"query {qid!r}: positive {doc!r} names no document in the corpus")
        record_split = record.get("split")
        if record_split is not None and str(record_split) != split:
            continue  # validated like the others, but another split's query
        out.append(LabelledQuery(qid, text, {d: g for d, g in grades.items() if g > 0}, _domain(path, line, record)))
    return _finish(root, documents, out, path)


def _finish(root: Path, documents: dict[str, Path], queries: list[LabelledQuery], source: Path) -> LabelledCorpus:
    if not queries:
        raise LabelError(source, None, "no queries")
    empty = [q.query_id for q in queries if not q.relevance]
    if empty:
        logger.warning(
            "%s: %d of %d queries have no positive judgement (they score 0 on every metric), e.g. %s",
            source, len(empty), len(queries), ", ".join(empty[:5]),
        )
    logger.info("loaded %d documents and %d queries from %s", len(documents), len(queries), root)
    return LabelledCorpus(root=root, documents=documents, queries=queries)


def load_labelled_corpus(path: str | os.PathLike[str], split: str = "test") -> LabelledCorpus:
    """Read a labelled corpus folder (BEIR layout when it has ``qrels/``, else the simple JSONL form).

    ``split`` picks ``qrels/<split>.tsv`` (BEIR) or the records whose optional
    ``"split"`` field matches (simple form; records without one belong to every
    split). Raises :class:`LabelError` naming the file and line of a bad record.
    """
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise LabelError(root, None, "not a folder (expected a labelled corpus folder)")
    if (root / "qrels").is_dir():
        return _load_beir(root, split)
    if (root / "queries.jsonl").is_file():
        return _load_simple(root, split)
    raise LabelError(root, None, "not a labelled corpus: expected qrels/ (BEIR layout) or queries.jsonl (simple form)")
