"""A composed grid as the preview bytes the store keeps: WebP, lossless for text, quality 90 for photos and scans.

Grids of text and line art are kept lossless, so small text stays exactly as
rendered: WebP because it is 5-13x smaller than PNG there (24-25 KB against
205-314 KB for a 2x2 grid of the sample corpus), compression effort 1 of 6
(42 ms a text-dense grid against 56 ms at effort 4, for files 0.5% larger);
lossy WebP would be larger on them (108 KB against 67 on varied text grids).

Grids holding photographs or scans are where lossless WebP is slow and large:
on 120 varied PDFs, 274 ms and 180 KB a grid with photos, 336 ms and 366 KB
a scanned one (a render worker's preview took 92% of its time on an H200
run). Those are kept as WebP at quality 90, effort 2: 43 and 52 ms, 147 and
182 KB, 40-45 dB PSNR (no difference to the eye; the text on those pages
stays legible). Over the 120 grids: 0.56x the time, 0.79x the bytes, and
0.91x the time a commit spends writing them (``benchmarks/grid_preview_bench.py``,
``benchmarks/results/2026-12-06-grid-previews.md``). Indexing makes previews
in the render workers (two or more), beside the grid itself.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

__all__ = ["FLAT_SHARE", "GRID_MIME_TYPE", "LOSSY_QUALITY", "PICTURE_COLOURS", "encode_grid", "preview_form"]

GRID_MIME_TYPE = "image/webp"

PICTURE_COLOURS = 4096
"""More colours than this in the grid shrunk 4x (box filter) mark photographs or colour gradients: rendered text,
charts and diagrams stay below it even with anti-aliasing."""

FLAT_SHARE = 0.8
"""At least this share of pixels equal to their left neighbour (sampled every 8th row): long flat runs, as rendered
text and line art have (0.81-0.99 on text pages); a scan's paper grain falls far below (0.35-0.64) even in grey."""

LOSSY_QUALITY = 90
"""WebP quality of a picture grid's preview (40-45 dB PSNR on photos and scans)."""


def preview_form(image: Image.Image) -> str:
    """``"lossless"`` for a grid of text and line art, ``"lossy"`` for one holding photographs or scans.

    Lossless when the grid shrunk 4x has at most :data:`PICTURE_COLOURS` colours and :data:`FLAT_SHARE` of its
    pixels repeat their left neighbour: there lossless WebP is smaller than lossy and not much slower. It takes a
    few milliseconds (about 5 ms a default 1024 x 1324 grid on 2 cores), against 40-340 ms for the encoding.
    """
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    small = rgb.reduce(4) if min(rgb.size) >= 8 else rgb
    if small.getcolors(maxcolors=PICTURE_COLOURS) is None:
        return "lossy"
    rows = np.asarray(rgb)[::8]
    if rows.shape[1] < 2:
        return "lossless"
    flat = float((rows[:, 1:] == rows[:, :-1]).all(axis=2).mean())
    return "lossless" if flat >= FLAT_SHARE else "lossy"


def encode_grid(image: Image.Image, form: str | None = None) -> bytes:
    """A grid image as WebP bytes, in ``form`` (``"lossless"`` or ``"lossy"``; None: :func:`preview_form`).

    Deterministic: the same pixels give the same bytes.
    """
    chosen = form or preview_form(image)
    buf = io.BytesIO()
    if chosen == "lossless":
        image.save(buf, format="WEBP", lossless=True, quality=80, method=1)
    elif chosen == "lossy":
        image.save(buf, format="WEBP", quality=LOSSY_QUALITY, method=2)
    else:
        raise ValueError(f"unknown preview form {chosen!r}; choose lossless or lossy")
    return buf.getvalue()
