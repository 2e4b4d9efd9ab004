"""Generate a folder of varied PDFs for indexing benchmarks: 1-200 pages, text, vector drawings, photos, scans.

Why: copies of one small folder render alike and hide what a real folder costs (long documents, scanned pages,
embedded images). Each document draws its own page count (most short, a long tail up to 200), page size (A4,
Letter, landscape, slides) and page kinds: text columns, charts and diagrams drawn as vectors, pages with embedded
photos, and whole scanned documents (one JPEG per page). Deterministic for a seed; written in parallel.

    python benchmarks/varied_pdfs.py OUT --documents 1200 --seed 0
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

SIZES = [(595, 842), (612, 792), (842, 595), (960, 540)]  # A4, Letter, A4 landscape, 16:9 slides
SYLLABLES = ["ka", "lo", "mer", "tis", "an", "de", "vo", "rum", "sel", "tra", "qui", "no", "ben", "pha", "cor", "est"]


def page_count(rng: random.Random) -> int:
    """Most documents short, a long tail: 40% 1-5 pages, 35% 6-30, 20% 31-100, 5% 101-200."""
    roll = rng.random()
    if roll < 0.40:
        return rng.randint(1, 5)
    if roll < 0.75:
        return rng.randint(6, 30)
    if roll < 0.95:
        return rng.randint(31, 100)
    return rng.randint(101, 200)


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(n))


def _photo(rng: random.Random, width: int, height: int, *, scan: bool = False) -> bytes:
    """A JPEG: smooth colour noise (a photo) or a grey page with text-like strokes (a scan)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    gen = np.random.default_rng(rng.randrange(1 << 30))
    if scan:
        image = Image.fromarray((235 + gen.normal(0, 6, (height, width))).clip(0, 255).astype("uint8"), "L")
        draw = ImageDraw.Draw(image)
        y = 80
        while y < height - 80:
            x = 70
            while x < width - 120:
                w = int(gen.integers(20, 90))
                draw.rectangle([x, y, x + w, y + 14], fill=int(gen.integers(20, 70)))
                x += w + 12
            y += int(gen.integers(24, 34))
        image = image.filter(ImageFilter.GaussianBlur(0.8)).rotate(float(gen.normal(0, 0.6)), fillcolor=235)
    else:
        small = gen.integers(0, 255, (max(2, height // 40), max(2, width // 40), 3)).astype("uint8")
        image = Image.fromarray(small, "RGB").resize((width, height), Image.BICUBIC)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=70 if scan else 80)
    return out.getvalue()


def _draw_chart(page: Any, rng: random.Random, rect: Any) -> None:
    import pymupdf

    page.draw_rect(rect, color=(0, 0, 0), width=0.6)
    bars = rng.randint(4, 12)
    step = rect.width / (bars + 1)
    for b in range(bars):
        h = rect.height * rng.uniform(0.1, 0.9)
        x = rect.x0 + step * (b + 0.5)
        page.draw_rect(pymupdf.Rect(x, rect.y1 - h, x + step * 0.6, rect.y1),
                       color=None, fill=(rng.random(), rng.random(), rng.random()))
    points = [pymupdf.Point(rect.x0 + rect.width * i / 20, rect.y0 + rect.height * (0.5 + 0.4 * math.sin(i / 3 + rng.random())))
              for i in range(21)]
    page.draw_polyline(points, color=(0.8, 0.1, 0.1), width=1.2)
    for _ in range(rng.randint(2, 6)):
        c = pymupdf.Point(rng.uniform(rect.x0, rect.x1), rng.uniform(rect.y0, rect.y1))
        page.draw_circle(c, rng.uniform(4, 20), color=(0, 0, 0.6), width=0.8)


def write_document(args: tuple[Path, int, int]) -> dict[str, Any]:
    """One PDF: ``(folder, index, seed)`` -> its file name, pages and kind."""
    import pymupdf

    folder, index, seed = args
    rng = random.Random(seed * 1_000_003 + index)
    pages = page_count(rng)
    width, height = rng.choice(SIZES)
    scanned = rng.random() < 0.10
    doc = pymupdf.open()
    photos: list[int] = []  # xrefs of this document's photos, reused across its pages
    scan_xrefs: list[int] = []
    for n in range(pages):
        page = doc.new_page(width=width, height=height)
        full = page.rect
        if scanned:
            if len(scan_xrefs) < 3:
                scan_xrefs.append(page.insert_image(full, stream=_photo(rng, 1240, int(1240 * height / width), scan=True)))
            else:
                page.insert_image(full, xref=rng.choice(scan_xrefs))
            continue
        margin = 48
        page.insert_text((margin, margin), f"{_words(rng, 4).title()} - page {n + 1}", fontsize=16, fontname="hebo")
        kind = rng.random()
        body = pymupdf.Rect(margin, margin + 20, full.width - margin, full.height - margin)
        if kind < 0.2:  # chart or diagram over half the page
            top = pymupdf.Rect(body.x0, body.y0, body.x1, body.y0 + body.height / 2)
            _draw_chart(page, rng, top)
            body = pymupdf.Rect(body.x0, top.y1 + 12, body.x1, body.y1)
        elif kind < 0.35:  # an embedded photo
            if len(photos) < 3:
                photos.append(page.insert_image(pymupdf.Rect(body.x0, body.y0, body.x1, body.y0 + body.height * 0.45),
                                                stream=_photo(rng, 800, 500)))
            else:
                page.insert_image(pymupdf.Rect(body.x0, body.y0, body.x1, body.y0 + body.height * 0.45),
                                  xref=rng.choice(photos))
            body = pymupdf.Rect(body.x0, body.y0 + body.height * 0.45 + 12, body.x1, body.y1)
        columns = 2 if body.width > 400 and rng.random() < 0.5 else 1
        gap = 16
        col_w = (body.width - gap * (columns - 1)) / columns
        for c in range(columns):
            box = pymupdf.Rect(body.x0 + c * (col_w + gap), body.y0, body.x0 + c * (col_w + gap) + col_w, body.y1)
            page.insert_textbox(box, _words(rng, rng.randint(120, 420)), fontsize=rng.choice([8, 9, 10, 11]),
                                fontname="helv")
    name = f"doc-{index:05d}.pdf"
    doc.save(folder / name, garbage=3, deflate=True)
    doc.close()
    return {"file": name, "pages": pages, "kind": "scanned" if scanned else "born-digital"}


def write_corpus(folder: Path, documents: int, *, seed: int = 0, workers: int | None = None) -> dict[str, Any]:
    """Write ``documents`` PDFs into ``folder`` (in parallel); returns a summary and writes ``corpus.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        made = list(pool.map(write_document, [(folder, i, seed) for i in range(documents)], chunksize=8))
    pages = [m["pages"] for m in made]
    summary = {
        "documents": documents, "seed": seed, "pages": sum(pages), "mean_pages": round(sum(pages) / documents, 2),
        "max_pages": max(pages), "scanned": sum(m["kind"] == "scanned" for m in made),
        "bytes": sum((folder / m["file"]).stat().st_size for m in made),
    }
    (folder / "corpus.json").write_text(json.dumps({"summary": summary, "documents": made}, indent=1))
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--documents", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    print(json.dumps(write_corpus(args.out, args.documents, seed=args.seed, workers=args.workers)))


if __name__ == "__main__":
    main()
