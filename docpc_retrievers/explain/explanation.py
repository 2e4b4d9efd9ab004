"""What :meth:`DocPCIndex.explain` returns: the numbers behind a match and the pictures made from them.

An :class:`Explanation` displays itself in Jupyter (``_repr_html_``,
``_repr_png_``), writes its pictures as PNG files (:meth:`Explanation.save`)
and renders as a self-contained HTML fragment (images embedded as data
URIs) for ``docpc show`` reports.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from PIL import Image

from docpc_retrievers.image_bytes import png_bytes
from docpc_retrievers.explain.contributions import TokenContribution, contribution_shares

__all__ = ["Explanation", "PageCrop", "PagePicture", "image_data_uri"]


def image_data_uri(image: Image.Image, *, fmt: str = "JPEG") -> str:
    """An image as a ``data:`` URI (JPEG for pictures of pages: a tenth of PNG's size)."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format=fmt, quality=85) if fmt == "JPEG" else image.save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def _page_name(page: int, label: str) -> str:
    """``p4`` or, when the PDF labels the page otherwise, ``p4 (iii)``."""
    return f"p{page}" if label in ("", str(page)) else f"p{page} ({label})"


@dataclass(frozen=True)
class PageCrop:
    """Where on a page the match is, at full resolution.

    ``source`` is ``pdf`` (rendered from the source PDF) or ``grid`` (cut from
    the stored grid because the source was not reachable: ``note`` says why).
    ``region``: the crop as fractions ``(x0, y0, x1, y1)`` of the page.
    """

    page: int
    label: str
    image: Image.Image = field(repr=False)
    source: Literal["pdf", "grid"]
    region: tuple[float, float, float, float]
    note: str | None = None


@dataclass(frozen=True)
class PagePicture:
    """A page image explained on its own (page mode, and the pages of a reranked hit), re-encoded at ``page_size``."""

    page: int
    label: str
    score: float
    contributions: list[TokenContribution] = field(repr=False)
    overlay: Image.Image = field(repr=False)


@dataclass(frozen=True)
class Explanation:
    """Why a document matched a query.

    ``score``: the hit's score (after reranking, the fused score the hit carries;
    without a hit, MaxSim of the query against the stored vectors). ``grid_score``
    (grid mode): that MaxSim over the stored grid vectors, the sum the
    contributions make. ``shares``: each selected page's share of it (1-based
    page numbers). ``contributions``: one term per query token, with the grid
    patch that won it; ``excluded`` ones (prompt, augmentation) are left out of
    the pictures and listed. ``overlay``: the grid with heat and outlined,
    labelled pages; ``crops``: the top pages at full resolution; ``pages``:
    page-image explanations (page mode, reranked hits). ``notes`` say what
    could not be shown and why.
    """

    doc_id: str
    query: str
    score: float
    mode: str
    title: str | None
    source: str | None
    shares: dict[int, float]
    contributions: list[TokenContribution] = field(repr=False)
    overlay: Image.Image | None = field(default=None, repr=False)
    crops: list[PageCrop] = field(default_factory=list)
    pages: list[PagePicture] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    grid_score: float | None = None

    @property
    def included(self) -> list[TokenContribution]:
        return [c for c in self.contributions if c.included]

    @property
    def excluded(self) -> list[TokenContribution]:
        """Prompt and augmentation tokens: their terms are in the score, not in the pictures."""
        return [c for c in self.contributions if not c.included]

    def breakdown(self) -> dict[str, float]:
        """Where the score went, as shares of its positive terms adding up to 1, by the one definition every front
        end uses (explain/shares.py, ``split_terms``): ``page N`` for words' terms won on a page, then ``query
        prompt tokens``, ``image prompt rows`` and ``empty cells``. In page mode, each page's share of the page
        scores."""
        if self.mode == "page":
            return {f"page {p}": v for p, v in sorted(self.shares.items(), key=lambda kv: -kv[1])}
        pages, other = contribution_shares(self.contributions)
        out = {f"page {p}": v for p, v in sorted(pages.items(), key=lambda kv: -kv[1])}
        out.update(sorted(other.items(), key=lambda kv: -kv[1]))
        return out

    def token_rows(self) -> list[tuple[str, float, str]]:
        """One row per query token: ``(token, term, where it was won)``, in query order."""
        def where(c: TokenContribution) -> str:
            if not c.included:
                return "prompt (left out of the pictures)"
            if c.page is not None:
                return f"page {c.page}"
            return "empty cell" if c.patch is not None else "image prompt row"
        return [(c.text, c.value, where(c)) for c in self.contributions]

    @property
    def images(self) -> list[tuple[str, Image.Image]]:
        """Every picture with a file-friendly name, overlay first."""
        out: list[tuple[str, Image.Image]] = []
        if self.overlay is not None:
            out.append(("overlay", self.overlay))
        out += [(f"page-{p.page}-overlay", p.overlay) for p in self.pages]
        out += [(f"page-{c.page}-crop", c.image) for c in self.crops]
        return out

    def save(self, folder: str | Path, *, prefix: str = "") -> list[Path]:
        """Write every picture as PNG under ``folder``; returns the paths."""
        root = Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        written = []
        for name, image in self.images:
            path = root / f"{prefix}{name}.png"
            image.save(path, format="PNG")
            written.append(path)
        return written

    def to_html(self, *, rank: int | None = None, max_width: int = 560) -> str:
        """A self-contained HTML fragment: heading, numbers, overlay, crops, page pictures, excluded tokens."""
        e = html.escape
        head = f"#{rank} " if rank is not None else ""
        parts = [f'<section class="hit" data-doc="{e(self.doc_id)}">']
        parts.append(f"<h2>{e(head)}{e(self.title or self.doc_id)}</h2>")
        parts.append(
            f'<p class="meta">score <b>{self.score:.4f}</b> &middot; {e(self.mode)} mode &middot; '
            f"<code>{e(self.source or '')}</code> &middot; id <code>{e(self.doc_id)}</code></p>"
        )
        if self.shares:
            cells = "".join(f"<li>p{p}: {s:.0%}</li>" for p, s in sorted(self.shares.items(), key=lambda kv: (-kv[1], kv[0])))
            parts.append(f'<ul class="shares">{cells}</ul>')
        figures: list[tuple[Image.Image, str, int]] = []
        if self.overlay is not None:
            figures.append((self.overlay, "grid: heat of the patches that won the query's tokens; pages outlined", max_width))
        figures += [(p.overlay, f"{_page_name(p.page, p.label)} encoded alone: score {p.score:.4f}", max_width // 2)
                    for p in self.pages]
        figures += [(c.image, f"{_page_name(c.page, c.label)}, {'from the PDF' if c.source == 'pdf' else 'cut from the stored grid'}",
                     max_width // 2) for c in self.crops]
        for image, caption, width in figures:
            parts.append(
                f'<figure><img src="{image_data_uri(image)}" alt="{e(caption)}" style="max-width:{width}px">'
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
        parts_of_score = self.breakdown()
        if parts_of_score:
            went = ", ".join(f"{k} {v:.0%}" for k, v in parts_of_score.items())
            parts.append(f'<p class="breakdown">where the score went: {e(went)} (100% in all)</p>')
        rows = "".join(
            f"<tr><td>{e(t)}</td><td>{v:.3f}</td><td>{e(w)}</td></tr>" for t, v, w in self.token_rows()
        )
        if rows:
            parts.append(
                '<details class="tokens"><summary>per query token</summary><table>'
                f"<tr><th>token</th><th>term</th><th>won on</th></tr>{rows}</table></details>"
            )
        excluded = self.excluded
        if excluded:
            total = sum(c.value for c in excluded)
            parts.append(
                f'<p class="excluded">{len(excluded)} prompt/augmentation token(s) left out of the pictures '
                f"(their terms add {total:.4f} to the score).</p>"
            )
        parts += [f'<p class="note">{e(n)}</p>' for n in self.notes]
        parts.append("</section>")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_png_(self) -> bytes | None:
        pictures = self.images
        return png_bytes(pictures[0][1]) if pictures else None
