"""A deterministic, DocViRe-style synthetic benchmark corpus of multi-page PDFs (BEIR layout).

Why: the evaluation harness needs a labelled corpus that anyone can rebuild
offline, byte for byte, to check that the harness and labels are right (BM25
must score clearly above a random ranking) and to run benchmarks at scale.

What it draws (PyMuPDF, vector only, base-14 fonts): seven domains (biology,
education, finance, government, industrial, legal, research); documents of 4
to 30 pages with a title page, a contents page, running headers and page
labels (i, ii, 1, 2, ...), sections with headings and paragraphs, ruled
tables, figures drawn with vector graphics (bar and line charts, flow
diagrams) and small-print pages. Each domain has *topics* (an aspect of a
subject, e.g. "thermal fatigue in gas turbine blades"); every topic is
discussed in two or more documents, so each query has several positives
(grade 2 where the topic is the document's main one, else 1). Query text
reuses the topic's words as they appear in the text layer, so lexical
retrieval is clearly better than chance. About half of the topic placements
in documents longer than five pages put all their evidence beyond page 4
(generic title and headings, evidence deep in the body), so first-K page
selection can miss it; some documents are long (up to 30 pages).

Sizes: ``tiny`` (24 documents, 2 topics per domain, seconds) and ``small``
(280 documents, 16 topics per domain, mean about 10 pages like DocViRe).
Output (see ``docs/evaluation.md``)::

    OUT/corpus.jsonl  OUT/queries.jsonl  OUT/qrels/test.tsv  OUT/qrels/train.tsv
    OUT/pdfs/<domain>/<doc-id>.pdf  OUT/manifest.json

``train`` queries are paraphrases of the same topics as ``test`` (handy for
exercising training code; not a leak-free split). The same size and seed
give the same bytes.

Command line: ``python -m docpc_retrievers.eval.synthetic OUT --size tiny [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import shutil
import sys
from importlib import resources
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymupdf

__all__ = ["DOMAINS", "SIZES", "SizeSpec", "SyntheticSummary", "generate_corpus", "main"]

logger = logging.getLogger(__name__)

GENERATOR_VERSION = 1

#: The seven DocViRe domains.
DOMAINS: tuple[str, ...] = ("biology", "education", "finance", "government", "industrial", "legal", "research")

_A4 = (595.0, 842.0)
_LETTER = (612.0, 792.0)
_MARGIN = 56.0
_FIXED_DATE = "D:20240101000000Z"


@dataclass(frozen=True)
class SizeSpec:
    """How big a generated corpus is: documents and topics per domain, page-count mixture."""

    docs_per_domain: tuple[int, ...]
    topics_per_domain: int
    max_positives: int
    #: (weight, min pages, max pages) mixture for page counts.
    page_mixture: tuple[tuple[float, int, int], ...]
    #: documents forced to be long: (domain index, document index in domain).
    long_docs: tuple[tuple[int, int], ...] = ()


SIZES: dict[str, SizeSpec] = {
    "tiny": SizeSpec(
        docs_per_domain=(4, 3, 4, 3, 4, 3, 3),
        topics_per_domain=2,
        max_positives=3,
        page_mixture=((1.0, 4, 10),),
        long_docs=((4, 0), (5, 1)),
    ),
    "small": SizeSpec(
        docs_per_domain=(40,) * 7,
        topics_per_domain=16,
        max_positives=5,
        page_mixture=((0.55, 4, 8), (0.30, 9, 16), (0.15, 17, 30)),
    ),
}


# ------------------------------------------------------------------------------------ vocabulary


@dataclass(frozen=True)
class _Vocab:
    connector: str
    organisations: tuple[str, ...]
    kinds: tuple[str, ...]
    subjects: tuple[str, ...]
    aspects: tuple[str, ...]
    measures: tuple[str, ...]
    units: tuple[str, ...]
    headings: tuple[str, ...]
    filler: tuple[str, ...]
    colour: tuple[float, float, float]
    font: str = "helv"


def _load_vocabulary() -> dict[str, Any]:
    """The generator's word lists (package data, ``vocabulary.json``): domains, filler, evidence, query templates."""
    text = resources.files("docpc_retrievers.eval").joinpath("vocabulary.json").read_text(encoding="utf-8")
    return json.loads(text)


_DATA = _load_vocabulary()
_VOCAB: dict[str, _Vocab] = {
    name: _Vocab(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
    for name, fields in _DATA["domains"].items()
}
_GENERIC_FILLER: tuple[str, ...] = tuple(_DATA["generic_filler"])
_SMALL_PRINT: tuple[str, ...] = tuple(_DATA["small_print"])
_EVIDENCE: tuple[str, ...] = tuple(_DATA["evidence"])
_QUERY_TEMPLATES: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in _DATA["query_templates"].items()}


# ------------------------------------------------------------------------------------ planning


@dataclass(frozen=True)
class _Topic:
    topic_id: str
    domain: str
    aspect: str
    subject: str
    measure: str

    @property
    def phrase(self) -> str:
        return f"{self.aspect} {_VOCAB[self.domain].connector} {self.subject}"

    def fill(self, template: str, rng: random.Random) -> str:
        v1 = round(rng.uniform(10, 900), 1)
        v2 = round(v1 * rng.uniform(0.6, 1.6), 1)
        values = {
            "P": self.phrase,
            "P_cap": _cap(self.phrase),
            "A": self.aspect,
            "A_cap": _cap(self.aspect),
            "S": self.subject,
            "C": _VOCAB[self.domain].connector,
            "M": self.measure,
            "n": rng.randint(3, 60),
            "v1": v1,
            "v2": v2,
            "pct": abs(round((v2 - v1) / v1 * 100, 1)),
        }
        return template.format(**values)


@dataclass
class _PagePlan:
    kind: str  # title, contents, text, table, figure, smallprint
    heading: str | None = None
    evidence: list[_Topic] = field(default_factory=list)
    topic: _Topic | None = None  # table/figure about this topic


@dataclass
class _DocPlan:
    doc_id: str
    domain: str
    index: int
    n_pages: int
    topics: dict[str, int] = field(default_factory=dict)  # topic id -> grade
    deep: list[str] = field(default_factory=list)
    title: str = ""
    organisation: str = ""
    kind: str = ""
    year: int = 2020
    size: tuple[float, float] = _A4
    pages: list[_PagePlan] = field(default_factory=list)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _pick_pages(rng: random.Random, spec: SizeSpec) -> int:
    roll = rng.random() * sum(w for w, _, _ in spec.page_mixture)
    for weight, low, high in spec.page_mixture:
        if roll < weight:
            return rng.randint(low, high)
        roll -= weight
    _, low, high = spec.page_mixture[-1]
    return rng.randint(low, high)


def _plan_topics(rng: random.Random, domain: str, spec: SizeSpec, domain_index: int) -> list[_Topic]:
    vocab = _VOCAB[domain]
    pairs = [(a, s) for a in vocab.aspects for s in vocab.subjects]
    chosen = rng.sample(pairs, spec.topics_per_domain)
    return [
        _Topic(f"{domain}-t{i:02d}", domain, a, s, rng.choice(vocab.measures)) for i, (a, s) in enumerate(chosen)
    ]


def _plan_documents(seed: int, spec: SizeSpec) -> tuple[list[_DocPlan], list[_Topic]]:
    """Decide every document's topics, page count and page kinds (no drawing yet)."""
    docs: list[_DocPlan] = []
    topics: list[_Topic] = []
    for d_index, domain in enumerate(DOMAINS):
        rng = random.Random(f"docpc-synthetic:{seed}:{domain}")
        n_docs = spec.docs_per_domain[d_index]
        domain_topics = _plan_topics(rng, domain, spec, d_index)
        topics.extend(domain_topics)
        plans = [_DocPlan(f"{domain}-{i:03d}", domain, i, _pick_pages(rng, spec)) for i in range(n_docs)]
        for d_i, i in spec.long_docs:
            if d_i == d_index and i < n_docs:
                plans[i].n_pages = rng.randint(22, 30)
        members: dict[str, list[int]] = {}
        for topic in domain_topics:
            m = rng.randint(2, min(spec.max_positives, n_docs))
            members[topic.topic_id] = rng.sample(range(n_docs), m)
        for i in range(n_docs):
            if not any(i in ids for ids in members.values()):
                members[rng.choice(domain_topics).topic_id].append(i)
        by_id = {t.topic_id: t for t in domain_topics}
        for topic_id in sorted(members):
            for i in members[topic_id]:
                plans[i].topics[topic_id] = 1
        for plan in plans:
            main_topic = rng.choice(sorted(plan.topics))
            plan.topics[main_topic] = 2
            _plan_pages(rng, plan, [by_id[t] for t in sorted(plan.topics)], main_topic)
        docs.extend(plans)
    return docs, topics


def _plan_pages(rng: random.Random, plan: _DocPlan, topics: list[_Topic], main_topic: str) -> None:
    vocab = _VOCAB[plan.domain]
    plan.organisation = rng.choice(vocab.organisations)
    plan.kind = rng.choice(vocab.kinds)
    plan.year = rng.randint(2015, 2024)
    plan.size = _LETTER if rng.random() < 0.3 else _A4
    pages = [_PagePlan("title"), _PagePlan("contents")]
    for i in range(2, plan.n_pages):
        if i == 2:
            kind = "text"
        elif i == plan.n_pages - 1 and plan.n_pages >= 6 and rng.random() < 0.6:
            kind = "smallprint"
        else:
            kind = rng.choices(("text", "table", "figure", "smallprint"), (0.55, 0.17, 0.18, 0.10))[0]
        pages.append(_PagePlan(kind))
    # Section headings: a new section starts on every text page with probability 0.6 (always on page 3).
    headings = list(vocab.headings)
    rng.shuffle(headings)
    h = 0
    for i, page in enumerate(pages[2:], 2):
        if page.kind == "text" and (i == 2 or rng.random() < 0.6):
            page.heading = headings[h % len(headings)] + ("" if h < len(headings) else f" ({h // len(headings) + 1})")
            h += 1
    # Evidence: each topic gets one text or small-print page (deep ones beyond page 4) and maybe a table/figure.
    main = next(t for t in topics if t.topic_id == main_topic)
    deep_ids: set[str] = set()
    for topic in topics:
        eligible = [i for i, p in enumerate(pages) if p.kind in ("text", "smallprint") and len(p.evidence) < 2]
        deep_pages = [i for i in eligible if i >= 4]
        if deep_pages and plan.n_pages >= 6 and rng.random() < 0.5:
            target = rng.choice(deep_pages)
            deep_ids.add(topic.topic_id)
        else:
            target = rng.choice(eligible or [2])
        pages[target].evidence.append(topic)
        visuals = [i for i, p in enumerate(pages) if p.kind in ("table", "figure") and p.topic is None]
        if topic.topic_id in deep_ids:
            visuals = [i for i in visuals if i >= 4]
        if visuals and rng.random() < 0.7:
            pages[rng.choice(visuals)].topic = topic
        if topic.topic_id not in deep_ids and pages[target].heading is not None and rng.random() < 0.5:
            pages[target].heading = _cap(topic.phrase)
    plan.deep = sorted(deep_ids)
    if main.topic_id not in deep_ids and rng.random() < 0.5:
        plan.title = f"{plan.kind}: {_cap(main.phrase)}"
    else:
        plan.title = f"{plan.organisation} {plan.kind} {plan.year}"
    plan.pages = pages


# ------------------------------------------------------------------------------------ drawing


_CHAR_WIDTHS: dict[tuple[str, str], float] = {}


def _text_width(text: str, font: str, size: float) -> float:
    """Width of a string in points; widths are cached per (font, string): PyMuPDF measures slowly in Python."""
    key = (font, text)
    width = _CHAR_WIDTHS.get(key)
    if width is None:
        width = _CHAR_WIDTHS[key] = sum(_char_width(ch, font) for ch in text)
    return width * size


def _char_width(ch: str, font: str) -> float:
    key = (font, ch)
    width = _CHAR_WIDTHS.get(key)
    if width is None:
        width = _CHAR_WIDTHS[key] = pymupdf.get_text_length(ch, fontname=font, fontsize=1.0)
    return width


class _Canvas:
    """Page-like drawing calls collected into one PyMuPDF Shape, committed once (about 7x faster)."""

    def __init__(self, page: pymupdf.Page) -> None:
        self.shape = page.new_shape()

    def draw_line(self, p1: Any, p2: Any, color: Any = (0,), width: float = 1, dashes: str | None = None) -> None:
        self.shape.draw_line(p1, p2)
        self.shape.finish(color=color, width=width, dashes=dashes)

    def draw_rect(
        self, rect: Any, color: Any = (0,), fill: Any = None, width: float = 1, fill_opacity: float = 1,
        radius: float | None = None,
    ) -> None:
        self.shape.draw_rect(rect, radius=radius)
        self.shape.finish(color=color, fill=fill, width=width, fill_opacity=fill_opacity)

    def draw_circle(self, centre: Any, radius: float, color: Any = (0,), fill: Any = None, width: float = 1) -> None:
        self.shape.draw_circle(centre, radius)
        self.shape.finish(color=color, fill=fill, width=width)

    def draw_polyline(self, points: Any, color: Any = (0,), width: float = 1) -> None:
        self.shape.draw_polyline(points)
        self.shape.finish(color=color, width=width, closePath=False)

    def insert_text(
        self, point: Any, text: str | list[str], fontsize: float = 11, fontname: str = "helv",
        color: Any = None, lineheight: float | None = None,
    ) -> None:
        self.shape.insert_text(point, text, fontsize=fontsize, fontname=fontname, color=color, lineheight=lineheight)

    def commit(self) -> None:
        self.shape.commit()


class _TextBox:
    """Writes wrapped lines top-down inside a column; refuses paragraphs that do not fit whole."""

    def __init__(self, page: _Canvas, x0: float, x1: float, y: float, bottom: float) -> None:
        self.page, self.x0, self.x1, self.y, self.bottom = page, x0, x1, y, bottom

    def wrap(self, text: str, size: float, font: str) -> list[str]:
        limit = self.x1 - self.x0
        space = _text_width(" ", font, size)
        lines: list[str] = []
        current: list[str] = []
        width = 0.0
        for word in text.split():
            w = _text_width(word, font, size)
            if current and width + space + w > limit:
                lines.append(" ".join(current))
                current, width = [word], w
            else:
                width += (space if current else 0.0) + w
                current.append(word)
        if current:
            lines.append(" ".join(current))
        return lines

    def write(
        self,
        text: str,
        size: float = 10.0,
        font: str = "helv",
        colour: tuple[float, float, float] = (0.1, 0.1, 0.1),
        gap: float = 6.0,
        leading: float = 1.3,
    ) -> bool:
        lines = self.wrap(text, size, font)
        height = len(lines) * size * leading
        if self.y + height > self.bottom:
            return False
        self.page.insert_text(
            (self.x0, self.y + size), lines, fontsize=size, fontname=font, color=colour, lineheight=leading
        )
        self.y += height + gap
        return True


def _filler(rng: random.Random, vocab: _Vocab, sentences: int) -> str:
    pool = vocab.filler + _GENERIC_FILLER
    return " ".join(rng.sample(pool, min(sentences, len(pool))))


def _fill(box: _TextBox, rng: random.Random, vocab: _Vocab, low: int, high: int) -> None:
    """Filler paragraphs down to a random 55-100% of the column (sections end mid-page)."""
    stop = box.bottom - (box.bottom - box.y) * rng.uniform(0.0, 0.45)
    while box.y < stop and box.write(_filler(rng, vocab, rng.randint(low, high)), font=vocab.font):
        pass


def _header_footer(page: _Canvas, plan: _DocPlan, label: str) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    page.draw_line((_MARGIN, 40), (w - _MARGIN, 40), color=vocab.colour, width=0.8)
    page.insert_text((_MARGIN, 34), f"{plan.organisation}  |  {plan.kind} {plan.year}", fontsize=7, color=(0.4, 0.4, 0.4))
    page.insert_text((w / 2 - 10, h - 28), f"Page {label}", fontsize=7, color=(0.4, 0.4, 0.4))


def _draw_title(page: _Canvas, plan: _DocPlan, rng: random.Random) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    page.draw_rect(pymupdf.Rect(0, 0, w, 150), color=None, fill=vocab.colour)
    centre = pymupdf.Point(w - 100, 75)
    page.draw_circle(centre, 38, color=(1, 1, 1), width=3)
    for angle in range(0, 360, 45):
        rad = math.radians(angle + rng.randint(0, 20))
        page.draw_line(centre, centre + (30 * math.cos(rad), 30 * math.sin(rad)), color=(1, 1, 1), width=1.5)
    page.insert_text((_MARGIN, 90), plan.organisation, fontsize=14, fontname="hebo", color=(1, 1, 1))
    box = _TextBox(page, _MARGIN, w - _MARGIN, 240, h - 120)
    box.write(plan.title, size=26, font="hebo", colour=(0.05, 0.05, 0.15), gap=24, leading=1.2)
    box.write(f"{plan.kind} | {plan.domain.capitalize()} | {plan.year}", size=13, colour=(0.3, 0.3, 0.3), gap=40)
    box.write(f"Prepared by the staff of {plan.organisation}.", size=11, colour=(0.3, 0.3, 0.3))
    page.draw_line((_MARGIN, h - 100), (w - _MARGIN, h - 100), color=vocab.colour, width=2)
    page.insert_text((_MARGIN, h - 80), f"Reference {plan.doc_id.upper()}  -  published {plan.year}", fontsize=9)


def _draw_contents(page: _Canvas, plan: _DocPlan, labels: Sequence[str]) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    page.insert_text((_MARGIN, 90), "Contents", fontsize=20, fontname="hebo", color=vocab.colour)
    y = 130.0
    for i, p in enumerate(plan.pages):
        if p.heading is None or y > h - 80:
            continue
        page.insert_text((_MARGIN, y), p.heading, fontsize=11, fontname=vocab.font)
        length = _text_width(p.heading, vocab.font, 11)
        page.draw_line((_MARGIN + length + 6, y), (w - _MARGIN - 30, y), color=(0.6, 0.6, 0.6), width=0.5, dashes="[1 3] 0")
        page.insert_text((w - _MARGIN - 20, y), labels[i], fontsize=11)
        y += 22


def _draw_text_page(page: _Canvas, plan: _DocPlan, spec: _PagePlan, rng: random.Random) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    box = _TextBox(page, _MARGIN, w - _MARGIN, 60, h - 50)
    if spec.heading:
        box.write(spec.heading, size=16, font="hebo", colour=vocab.colour, gap=10)
    box.write(_filler(rng, vocab, rng.randint(2, 4)), font=vocab.font)
    for topic in spec.evidence:
        text = topic.fill(rng.choice(_EVIDENCE), rng) + " " + _filler(rng, vocab, 1)
        if not box.write(text, font=vocab.font):  # pragma: no cover - a fresh page always has room
            raise RuntimeError(f"{plan.doc_id}: evidence paragraph does not fit")
    _fill(box, rng, vocab, 3, 6)


def _draw_small_print(page: _Canvas, plan: _DocPlan, spec: _PagePlan, rng: random.Random) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    page.insert_text((_MARGIN, 64), "Notes, terms and disclaimers", fontsize=9, fontname="hebo")
    mid = w / 2
    columns = [_TextBox(page, _MARGIN, mid - 8, 76, h - 50), _TextBox(page, mid + 8, w - _MARGIN, 76, h - 50)]
    notes = [topic.fill(rng.choice(_EVIDENCE), rng) for topic in spec.evidence]
    n = 1
    last = rng.randint(10, 22)  # how many notes this page has (evidence notes come first)
    for col in columns:
        while notes or n <= last:
            is_evidence = bool(notes)
            text = notes[0] if is_evidence else " ".join(rng.choice(_SMALL_PRINT) for _ in range(rng.randint(2, 4)))
            if not col.write(f"{n}. {text}", size=5.5, font=vocab.font, gap=3, leading=1.2):
                if is_evidence and col is columns[-1]:  # pragma: no cover - a fresh page always has room
                    raise RuntimeError(f"{plan.doc_id}: small-print evidence does not fit")
                break
            if is_evidence:
                notes.pop(0)
            n += 1


def _table_rows(rng: random.Random, vocab: _Vocab, years: Sequence[int]) -> list[list[str]]:
    rows = []
    for r in range(rng.randint(4, 7)):
        values = [rng.uniform(5, 950) for _ in years]
        change = (values[-1] - values[0]) / values[0] * 100
        rows.append([f"{rng.choice(vocab.units)} {chr(65 + r)}", *(f"{v:,.1f}" for v in values), f"{change:+.1f}%"])
    return rows


def _draw_table_page(page: _Canvas, plan: _DocPlan, spec: _PagePlan, rng: random.Random, number: int) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    box = _TextBox(page, _MARGIN, w - _MARGIN, 60, h - 50)
    box.write(_filler(rng, vocab, 2), font=vocab.font, gap=14)
    years = [plan.year - 3 + i for i in range(3)]
    measure = spec.topic.measure if spec.topic else rng.choice(vocab.measures)
    subject = spec.topic.phrase if spec.topic else rng.choice(("all units", "the whole period", "each category"))
    caption = f"Table {number}. {_cap(measure)} for {subject}, {years[0]} to {years[-1]}"
    box.write(caption, size=10, font="hebo", gap=6)
    header = [rng.choice(vocab.units), *(str(y) for y in years), "Change"]
    rows = _table_rows(rng, vocab, years)
    col_w = (w - 2 * _MARGIN) / len(header)
    row_h = 18.0
    top = box.y
    page.draw_rect(pymupdf.Rect(_MARGIN, top, w - _MARGIN, top + row_h), color=None, fill=vocab.colour, fill_opacity=0.25)
    for r, row in enumerate([header, *rows]):
        y = top + r * row_h
        for c, cell in enumerate(row):
            page.insert_text((_MARGIN + c * col_w + 4, y + 12.5), cell, fontsize=9, fontname="hebo" if r == 0 else "helv")
        page.draw_line((_MARGIN, y + row_h), (w - _MARGIN, y + row_h), color=(0.5, 0.5, 0.5), width=0.5)
    bottom = top + row_h * (len(rows) + 1)
    page.draw_rect(pymupdf.Rect(_MARGIN, top, w - _MARGIN, bottom), color=(0.2, 0.2, 0.2), width=0.8)
    for c in range(1, len(header)):
        page.draw_line((_MARGIN + c * col_w, top), (_MARGIN + c * col_w, bottom), color=(0.7, 0.7, 0.7), width=0.4)
    box.y = bottom + 8
    box.write(f"Source: {plan.organisation}. Values are end-of-period figures.", size=7, colour=(0.4, 0.4, 0.4), gap=14)
    _fill(box, rng, vocab, 3, 5)


def _draw_figure_page(page: _Canvas, plan: _DocPlan, spec: _PagePlan, rng: random.Random, number: int) -> None:
    w, h = plan.size
    vocab = _VOCAB[plan.domain]
    box = _TextBox(page, _MARGIN, w - _MARGIN, 60, h - 50)
    box.write(_filler(rng, vocab, 2), font=vocab.font, gap=14)
    area = pymupdf.Rect(_MARGIN + 30, box.y, w - _MARGIN - 10, box.y + 260)
    style = rng.choice(("bars", "lines", "flow"))
    if style == "flow":
        n = rng.randint(3, 5)
        bw = (area.width - (n - 1) * 20) / n
        for i in range(n):
            r = pymupdf.Rect(area.x0 + i * (bw + 20), area.y0 + 100, area.x0 + i * (bw + 20) + bw, area.y0 + 160)
            page.draw_rect(r, color=vocab.colour, fill=(0.95, 0.95, 0.97), width=1.2, radius=0.15)
            page.insert_text((r.x0 + 6, r.y0 + 34), f"Stage {i + 1}", fontsize=9)
            if i:
                page.draw_line((r.x0 - 18, r.y0 + 30), (r.x0 - 2, r.y0 + 30), color=(0.2, 0.2, 0.2), width=1.2)
                page.draw_polyline([(r.x0 - 7, r.y0 + 26), (r.x0 - 2, r.y0 + 30), (r.x0 - 7, r.y0 + 34)], color=(0.2, 0.2, 0.2))
    else:
        page.draw_line(area.bl, area.tl, color=(0, 0, 0), width=0.8)
        page.draw_line(area.bl, area.br, color=(0, 0, 0), width=0.8)
        for t in range(5):
            y = area.y1 - t * area.height / 4
            page.draw_line((area.x0 - 4, y), (area.x0, y), color=(0, 0, 0), width=0.5)
            page.insert_text((area.x0 - 26, y + 3), str(t * 25), fontsize=7)
        values = [rng.uniform(0.1, 0.95) for _ in range(rng.randint(5, 9))]
        step = area.width / len(values)
        if style == "bars":
            for i, v in enumerate(values):
                bar = pymupdf.Rect(area.x0 + i * step + 6, area.y1 - v * area.height, area.x0 + (i + 1) * step - 6, area.y1)
                page.draw_rect(bar, color=None, fill=vocab.colour, fill_opacity=0.4 + 0.6 * v)
        else:
            for series in range(2):
                pts = [(area.x0 + (i + 0.5) * step, area.y1 - max(0.05, v - 0.2 * series) * area.height) for i, v in enumerate(values)]
                page.draw_polyline(pts, color=vocab.colour if series == 0 else (0.5, 0.5, 0.5), width=1.6)
                for p in pts:
                    page.draw_circle(p, 2.2, color=None, fill=vocab.colour)
    box.y = area.y1 + 14
    measure = spec.topic.measure if spec.topic else rng.choice(vocab.measures)
    about = spec.topic.phrase if spec.topic else "the reporting period"
    box.write(f"Figure {number}. {_cap(measure)} and {about}", size=10, font="hebo", gap=12)
    _fill(box, rng, vocab, 3, 5)


def _page_labels(n_pages: int) -> list[str]:
    roman = ("i", "ii")
    return [roman[i] if i < 2 else str(i - 1) for i in range(n_pages)]


def _render_document(plan: _DocPlan, seed: int) -> bytes:
    """Draw one planned document and return its PDF bytes (deterministic: fixed dates, no new /ID)."""
    rng = random.Random(f"docpc-synthetic-draw:{seed}:{plan.doc_id}")
    labels = _page_labels(plan.n_pages)
    doc = pymupdf.open()
    tables = figures = 0
    for i, spec in enumerate(plan.pages):
        page = _Canvas(doc.new_page(width=plan.size[0], height=plan.size[1]))
        if spec.kind == "title":
            _draw_title(page, plan, rng)
            page.commit()
            continue
        _header_footer(page, plan, labels[i])
        if spec.kind == "contents":
            _draw_contents(page, plan, labels)
        elif spec.kind == "text":
            _draw_text_page(page, plan, spec, rng)
        elif spec.kind == "smallprint":
            _draw_small_print(page, plan, spec, rng)
        elif spec.kind == "table":
            tables += 1
            _draw_table_page(page, plan, spec, rng, tables)
        else:
            figures += 1
            _draw_figure_page(page, plan, spec, rng, figures)
        page.commit()
    doc.set_page_labels(
        [
            {"startpage": 0, "prefix": "", "style": "r", "firstpagenum": 1},
            {"startpage": 2, "prefix": "", "style": "D", "firstpagenum": 1},
        ]
    )
    doc.set_metadata(
        {
            "title": plan.title,
            "author": plan.organisation,
            "subject": f"{plan.domain} {plan.kind}",
            "creator": "docpc_retrievers.eval.synthetic",
            "producer": "docpc_retrievers.eval.synthetic",
            "creationDate": _FIXED_DATE,
            "modDate": _FIXED_DATE,
        }
    )
    data = doc.tobytes(garbage=3, deflate=True, no_new_id=True)
    doc.close()
    return data


def _evidence_pages(plan: _DocPlan) -> dict[str, list[int]]:
    """Topic id -> 1-based pages whose text layer holds its phrase (evidence, tables, figures)."""
    out: dict[str, list[int]] = {t: [] for t in plan.topics}
    for number, page in enumerate(plan.pages, 1):
        for topic in page.evidence:
            out[topic.topic_id].append(number)
        if page.topic is not None:
            out[page.topic.topic_id].append(number)
    return {t: sorted(set(p)) for t, p in out.items()}


# ------------------------------------------------------------------------------------ writing


@dataclass(frozen=True)
class SyntheticSummary:
    """What :func:`generate_corpus` wrote."""

    root: Path
    size: str
    seed: int
    documents: int
    pages: int
    queries: dict[str, int]
    long_documents: int
    deep_placements: int

    def to_dict(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "size": self.size,
            "seed": self.seed,
            "documents": self.documents,
            "pages": self.pages,
            "queries": dict(self.queries),
            "long_documents": self.long_documents,
            "deep_placements": self.deep_placements,
        }


def generate_corpus(out: str | Path, size: str = "tiny", *, seed: int = 0, overwrite: bool = False) -> SyntheticSummary:
    """Write a synthetic labelled corpus in the BEIR layout into ``out``; same size and seed, same bytes.

    Refuses a non-empty ``out`` unless ``overwrite`` (then the folder's generated
    parts are replaced).
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    spec = SIZES[size]
    root = Path(out).expanduser().resolve()
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{root} is not empty (pass overwrite=True / --overwrite to replace it)")
        for name in ("pdfs", "qrels"):
            shutil.rmtree(root / name, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    docs, topics = _plan_documents(seed, spec)
    corpus_lines: list[str] = []
    for plan in docs:
        rel = Path("pdfs") / plan.domain / f"{plan.doc_id}.pdf"
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_render_document(plan, seed))
        record = {
            "_id": plan.doc_id,
            "title": plan.title,
            "file": rel.as_posix(),
            "metadata": {
                "domain": plan.domain,
                "pages": plan.n_pages,
                "topics": dict(sorted(plan.topics.items())),
                "evidence_pages": _evidence_pages(plan),
                "deep_topics": plan.deep,
            },
        }
        corpus_lines.append(json.dumps(record, sort_keys=True))
    (root / "corpus.jsonl").write_text("\n".join(corpus_lines) + "\n", encoding="utf-8")

    query_lines: list[str] = []
    (root / "qrels").mkdir(exist_ok=True)
    counts: dict[str, int] = {}
    for split, templates in _QUERY_TEMPLATES.items():
        rows = ["query-id\tcorpus-id\tscore"]
        rng = random.Random(f"docpc-synthetic-queries:{seed}:{split}")
        for topic in topics:
            qid = f"{split}-{topic.topic_id}"
            text = topic.fill(rng.choice(templates), rng)
            query_lines.append(
                json.dumps(
                    {
                        "_id": qid,
                        "text": text,
                        "domain": topic.domain,
                        "metadata": {"topic": topic.topic_id, "phrase": topic.phrase, "split": split},
                    },
                    sort_keys=True,
                )
            )
            for plan in docs:
                if topic.topic_id in plan.topics:
                    rows.append(f"{qid}\t{plan.doc_id}\t{plan.topics[topic.topic_id]}")
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        counts[split] = len(topics)
    (root / "queries.jsonl").write_text("\n".join(query_lines) + "\n", encoding="utf-8")

    summary = SyntheticSummary(
        root=root,
        size=size,
        seed=seed,
        documents=len(docs),
        pages=sum(d.n_pages for d in docs),
        queries=counts,
        long_documents=sum(1 for d in docs if d.n_pages >= 20),
        deep_placements=sum(len(d.deep) for d in docs),
    )
    manifest = {"generator": "docpc_retrievers.eval.synthetic", "version": GENERATOR_VERSION, **summary.to_dict()}
    manifest.pop("root")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    logger.info("wrote %d documents (%d pages) and %s queries to %s", summary.documents, summary.pages, counts, root)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m docpc_retrievers.eval.synthetic OUT --size tiny|small [--seed N] [--overwrite]``."""
    parser = argparse.ArgumentParser(
        prog="python -m docpc_retrievers.eval.synthetic",
        description="Write a deterministic DocViRe-style labelled PDF corpus (BEIR layout).",
    )
    parser.add_argument("out", type=Path, help="output folder (must be empty unless --overwrite)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="tiny (24 docs) or small (280 docs)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing corpus in OUT")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        summary = generate_corpus(args.out, args.size, seed=args.seed, overwrite=args.overwrite)
    except FileExistsError as exc:
        parser.error(str(exc))
    print(json.dumps(summary.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
