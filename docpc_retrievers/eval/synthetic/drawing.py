"""Drawing kit: measured text, a page canvas and text boxes that flow filler paragraphs."""

from __future__ import annotations

import random
from typing import Any

import pymupdf

from docpc_retrievers.eval.synthetic.planning import _GENERIC_FILLER, _Vocab

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
