"""A tiny labelled corpus whose topics are *visual*: for training tests on the tiny checkpoint.

Why: a learning test must show that ``docpc train`` improves retrieval, on 2 CPU cores, in a
few minutes, with a randomly initialised tiny model. Text-heavy pages are far beyond such a
model; large solid colour shapes are not. Each topic word (taken from the tiny tokenizer's
training sentences, see :mod:`docpc_retrievers.testing.tiny_checkpoint`) is tied to a colour;
every page of a document shows its topic's colour as a big shape on white, with jittered
shade, position and shape. Documents of one topic are relevant with grade 2; "mixed"
documents carry pages of two topics and are relevant to both with grade 1, so each query has
several positives and some positives are shared between queries.

Written in the simple JSONL form of :mod:`docpc_retrievers.eval.corpus`: ``queries.jsonl``
(``query_id``, ``query``, ``positives`` as ``{doc id: grade}``, ``domain``) and
``pdfs/<doc id>.pdf``. The same arguments give the same files.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HELD_OUT_TEMPLATES",
    "TOPIC_COLOURS",
    "TRAIN_TEMPLATES",
    "TopicCorpus",
    "build_topic_corpus",
    "corelevance_corpus",
]

logger = logging.getLogger(__name__)

#: Topic word -> RGB colour (0..255). The words are in the tiny checkpoint's tokenizer corpus.
TOPIC_COLOURS: dict[str, tuple[int, int, int]] = {
    "revenue": (220, 30, 30),
    "invoice": (30, 60, 220),
    "warranty": (30, 170, 60),
    "safety": (235, 200, 20),
    "architecture": (170, 40, 190),
    "benchmark": (20, 190, 200),
}

#: Query phrasings used for training queries.
TRAIN_TEMPLATES: tuple[str, ...] = ("{topic}", "{topic} report", "Where is the {topic} information?")
#: Different phrasings, for held-out queries.
HELD_OUT_TEMPLATES: tuple[str, ...] = ("the {topic} details", "{topic} in the manual")

_PAGE_SIZE = (100.0, 130.0)  # points; small pages render fast


@dataclass(frozen=True)
class TopicCorpus:
    """Where a generated corpus lies and what it holds."""

    root: Path
    documents: dict[str, list[str]]  # doc id -> topics of its pages (in page order)
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade}
    queries: dict[str, str]  # query id -> text


def _jitter(colour: tuple[int, int, int], rng: random.Random, amount: int) -> tuple[float, float, float]:
    return tuple(min(255, max(0, c + rng.randint(-amount, amount))) / 255.0 for c in colour)  # type: ignore[return-value]


def _draw_page(page: object, colour: tuple[int, int, int], rng: random.Random) -> None:
    """One big rectangle or disc of the topic colour covering most of the page, plus a small grey mark."""
    import pymupdf

    assert isinstance(page, pymupdf.Page)
    width, height = _PAGE_SIZE
    fill = _jitter(colour, rng, 18)
    margin_x, margin_y = rng.uniform(4, 14), rng.uniform(4, 18)
    rect = pymupdf.Rect(margin_x, margin_y, width - rng.uniform(4, 14), height - rng.uniform(4, 18))
    if rng.random() < 0.5:
        page.draw_rect(rect, color=None, fill=fill)
    else:
        page.draw_oval(rect, color=None, fill=fill)
    x, y = rng.uniform(5, width - 25), rng.uniform(5, height - 15)
    grey = rng.uniform(0.3, 0.7)
    page.draw_rect(pymupdf.Rect(x, y, x + 20, y + 10), color=None, fill=(grey, grey, grey))


def build_topic_corpus(
    out: str | Path,
    *,
    seed: int = 0,
    docs_per_topic: int = 2,
    mixed_pairs: Sequence[tuple[str, str]] | None = None,
    templates: Sequence[str] = TRAIN_TEMPLATES,
    topics: Mapping[str, tuple[int, int, int]] | None = None,
    pages: tuple[int, int] = (1, 3),
    decoys_per_topic: int = 0,
    decoy_shift: float = 0.4,
) -> TopicCorpus:
    """Write the corpus into ``out`` (created; existing files of the same names are overwritten).

    ``docs_per_topic`` single-topic documents (grade 2) per topic; one mixed document per pair
    in ``mixed_pairs`` (default: topics paired in order, (t0, t1), (t2, t3), ...), relevant with
    grade 1 to both topics; ``templates`` make one query per topic and template; ``pages`` is
    the (min, max) page count of a single-topic document. ``decoys_per_topic`` documents per
    topic relevant to no query, coloured ``decoy_shift`` of the way from the topic's colour to
    the next topic's: hard negatives that look like the positives. Returns a :class:`TopicCorpus`.
    """
    import pymupdf

    colours = dict(TOPIC_COLOURS if topics is None else topics)
    names = list(colours)
    if docs_per_topic < 0:
        raise ValueError(f"docs_per_topic must be >= 0, got {docs_per_topic}")
    if mixed_pairs is None:
        mixed_pairs = [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]
    rng = random.Random(f"topic-corpus:{seed}")
    root = Path(out)
    pdf_dir = root / "pdfs"
    pdf_dir.mkdir(parents=True, exist_ok=True)

    documents: dict[str, list[str]] = {}
    grades: dict[str, dict[str, int]] = {t: {} for t in names}
    for topic in names:
        for i in range(docs_per_topic):
            doc_id = f"s{seed}-{topic}-{i}"
            documents[doc_id] = [topic] * rng.randint(pages[0], pages[1])
            grades[topic][doc_id] = 2
    for a, b in mixed_pairs:
        doc_id = f"s{seed}-mixed-{a}-{b}"
        documents[doc_id] = [a, b] if rng.random() < 0.5 else [b, a]
        grades[a][doc_id] = 1
        grades[b][doc_id] = 1
    for t_index, topic in enumerate(names if decoys_per_topic > 0 else []):
        near = colours[names[(t_index + 1) % len(names)]]
        decoy = f"decoy-{topic}"
        colours[decoy] = tuple(round(c + decoy_shift * (n - c)) for c, n in zip(colours[topic], near))  # type: ignore[assignment]
        for i in range(decoys_per_topic):
            documents[f"s{seed}-decoy-{topic}-{i}"] = [decoy] * rng.randint(pages[0], pages[1])

    for doc_id, page_topics in documents.items():
        pdf = pymupdf.open()
        try:
            for topic in page_topics:
                page = pdf.new_page(width=_PAGE_SIZE[0], height=_PAGE_SIZE[1])
                _draw_page(page, colours[topic], rng)
            pdf.set_metadata({"title": doc_id, "creationDate": "", "modDate": "", "producer": "", "creator": ""})
            pdf.save(pdf_dir / f"{doc_id}.pdf", garbage=3, deflate=True, no_new_id=True)
        finally:
            pdf.close()

    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    lines: list[str] = []
    for t_index, template in enumerate(templates):
        for topic in names:
            qid = f"s{seed}-q{t_index}-{topic}"
            text = template.format(topic=topic)
            queries[qid] = text
            qrels[qid] = dict(grades[topic])
            lines.append(json.dumps({"query_id": qid, "query": text, "positives": grades[topic], "domain": topic}))
    (root / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    logger.info("topic corpus: %d documents, %d queries in %s", len(documents), len(queries), root)
    return TopicCorpus(root=root, documents=documents, qrels=qrels, queries=queries)


def corelevance_corpus(out: str | Path, *, seed: int = 0, templates: Sequence[str] = TRAIN_TEMPLATES) -> TopicCorpus:
    """The co-relevance experiment's corpus (docs/training.md): 5 positives per query that look alike, and decoys.

    Per topic: 3 single-topic documents (grade 2), 2 two-topic documents shared with its ring
    neighbours (grade 1), 2 decoys coloured 40% of the way towards the next topic (no query's).
    """
    names = list(TOPIC_COLOURS)
    ring = [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
    return build_topic_corpus(out, seed=seed, docs_per_topic=3, mixed_pairs=ring, templates=templates,
                              decoys_per_topic=2, decoy_shift=0.4)
