"""Page templates: title, contents, text, small print, tables and figures; one document rendered to PDF bytes."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pymupdf

from docpc_retrievers.eval.synthetic.drawing import (
    _Canvas,
    _fill,
    _filler,
    _text_width,
    _TextBox,
)
from docpc_retrievers.eval.synthetic.planning import (
    _EVIDENCE,
    _FIXED_DATE,
    _MARGIN,
    _SMALL_PRINT,
    _VOCAB,
    _cap,
    _DocPlan,
    _PagePlan,
    _Vocab,
)


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
