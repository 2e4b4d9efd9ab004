"""What a grid preview costs a render worker and the store, in each WebP form, on the same grids side by side.

    python benchmarks/grid_preview_bench.py --varied 96            # generated varied PDFs (benchmarks/varied_pdfs.py)
    python benchmarks/grid_preview_bench.py --pdfs FOLDER          # or any folder of PDFs

Why: on an H200 run of 1,200 varied PDFs the render workers spent 291 s making previews against 26 s rendering
(lossless WebP, 243 ms a grid on photo and scan grids), and every preview's bytes go through Chroma's write, which
costs per character. Each document's default 2x2 grid is composed once; each form then encodes every grid (the
order of forms alternated per grid), and prints per form: milliseconds a grid (median and mean), kilobytes a grid,
the payload characters a commit writes (base85), and the PSNR of the decoded preview against the grid, by kind of
document (text and line art, with photos, scanned). ``--commit`` also commits the same documents (their text,
744 x 128 random unit vectors as a 768-token grid has, and the preview in each of ``lossless`` and ``auto``) into
fresh embedded stores, 8 a commit, packed ahead as indexing does, rounds alternated, and prints the milliseconds
a document the writing thread spent (medians of the rounds). Ratios are against ``lossless`` (every grid, before);
``auto`` is the store's choice (``documents/preview.py``).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name
from varied_pdfs import write_corpus

from docpc_retrievers.config import IndexSettings
from docpc_retrievers.documents.preview import encode_grid
from docpc_retrievers.documents.represent import represent_pdf
from docpc_retrievers.errors import PDFLoadError


def _webp(**options: Any) -> Callable[[Image.Image], bytes]:
    def encode(image: Image.Image) -> bytes:
        buf = io.BytesIO()
        image.save(buf, format="WEBP", **options)
        return buf.getvalue()
    return encode


FORMS: dict[str, Callable[[Image.Image], bytes]] = {
    "lossless": lambda image: encode_grid(image, "lossless"),  # every grid, before
    "auto": encode_grid,  # the store's choice: lossless for text grids, q90_m2 for pictures and scans
    "lossless_m0": _webp(lossless=True, quality=0, method=0),
    "q90_m4": _webp(quality=90, method=4),
    "q90_m2": lambda image: encode_grid(image, "lossy"),  # every grid in the store's lossy form
    "q90_m0": _webp(quality=90, method=0),
    "q85_m4": _webp(quality=85, method=4),
    "q80_m4": _webp(quality=80, method=4),
}


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 RGB arrays (inf when identical)."""
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def kind_of(doc_kind: str, image: Image.Image) -> str:
    """``scanned`` (from the corpus manifest), ``pictures`` (over 4,096 colours in a quarter-size copy: photos or
    colour charts), else ``text`` (text and line art). Independent of the store's own choice (``auto``)."""
    if doc_kind == "scanned":
        return "scanned"
    return "text" if image.reduce(4).getcolors(maxcolors=4096) is not None else "pictures"


def commit_costs(grids: list[tuple[str, Image.Image]], texts: list[str], rounds: int) -> dict[str, Any]:
    """The writing thread's milliseconds a document and the commit stream's documents a second, per preview form."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from docpc_retrievers.store.multivector import MultiVectorStore

    rng = np.random.default_rng(0)
    vectors = [v / np.linalg.norm(v, axis=1, keepdims=True)
               for v in (rng.standard_normal((744, 128)).astype(np.float32) for _ in grids)]
    previews = {form: [FORMS[form](image) for _, image in grids] for form in ("lossless", "auto")}
    got: dict[str, list[tuple[float, float]]] = {form: [] for form in previews}
    for r in range(rounds):
        for form in (list(previews) if r % 2 == 0 else list(reversed(list(previews)))):
            folder = tempfile.mkdtemp(prefix="docpc-preview-commit-")
            store = MultiVectorStore(folder, writable=True)
            store.set_settings({"encoder": {"model": "bench", "dim": 128}, "index": {}})
            batches = [range(s, min(s + 8, len(grids))) for s in range(0, len(grids), 8)]

            def prepare(b: range, form: str = form, store: MultiVectorStore = store) -> Any:
                return store.prepare_add([f"d{i:04d}" for i in b], [vectors[i] for i in b],
                                         [{"source": f"/bench/d{i:04d}.pdf"} for i in b],
                                         texts=[texts[i] for i in b], grids=[previews[form][i] for i in b])

            writing, t0 = 0.0, time.perf_counter()
            with ThreadPoolExecutor(max_workers=2) as packer:
                ahead = [packer.submit(prepare, b) for b in batches[:2]]  # two commits ahead, as indexing packs
                for i in range(len(batches)):
                    prepared = ahead[i].result()
                    if i + 2 < len(batches):
                        ahead.append(packer.submit(prepare, batches[i + 2]))
                    started = time.perf_counter()
                    store.add_prepared(prepared)
                    writing += time.perf_counter() - started
            seconds = time.perf_counter() - t0
            assert store.count() == len(grids)
            store.close()
            shutil.rmtree(folder, ignore_errors=True)
            got[form].append((1000 * writing / len(grids), len(grids) / seconds))
    return {form: {"writing_ms_per_doc": statistics.median(w for w, _ in runs),
                   "docs_per_s": statistics.median(d for _, d in runs),
                   "preview_kb_mean": statistics.fmean(len(b) for b in previews[form]) / 1024}
            for form, runs in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pdfs", type=Path, default=None, help="a folder of PDFs (else --varied generated ones)")
    ap.add_argument("--varied", type=int, default=96, help="how many varied PDFs to generate (seed 0)")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--commit", type=int, default=0, metavar="ROUNDS", help="also time the store's writes")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="docpc-preview-") as tmp:
        kinds: dict[str, str] = {}
        if args.pdfs is None:
            folder = Path(tmp)
            write_corpus(folder, args.varied, seed=0)
            kinds = {d["file"]: d["kind"] for d in json.loads((folder / "corpus.json").read_text())["documents"]}
        else:
            folder = args.pdfs
        grids: list[tuple[str, Image.Image]] = []
        texts: list[str] = []
        for path in sorted(folder.rglob("*.pdf")):
            try:
                doc = represent_pdf(path, IndexSettings())
            except PDFLoadError:  # a file that does not render is simply not a sample
                continue
            if doc.grid is not None:
                image = doc.grid.image.convert("RGB")
                grids.append((kind_of(kinds.get(path.name, ""), image), image))
                texts.append(doc.text)

    rows: dict[str, dict[str, list[float]]] = {f: {"ms": [], "bytes": [], "psnr": [], "kind": []} for f in args.forms}
    for i, (kind, image) in enumerate(grids):
        truth = np.asarray(image)
        order = args.forms if i % 2 == 0 else list(reversed(args.forms))
        for form in order:
            t0 = time.perf_counter()
            data = FORMS[form](image)
            ms = (time.perf_counter() - t0) * 1000
            with Image.open(io.BytesIO(data)) as img:
                decoded = np.asarray(img.convert("RGB"))
            r = rows[form]
            r["ms"].append(ms)
            r["bytes"].append(len(data))
            r["psnr"].append(psnr(truth, decoded))
            r["kind"].append(kind)  # type: ignore[arg-type]

    base = rows[args.forms[0]]
    counts = {k: sum(1 for g in grids if g[0] == k) for k in ("text", "pictures", "scanned")}
    print(f"{len(grids)} grids ({counts}) of {grids[0][1].width}x{grids[0][1].height} on {cpu_name()}, "
          f"Pillow {Image.__version__}, Python {platform.python_version()}")
    print(f"{'form':<13}{'ms median':>10}{'ms mean':>9}{'x time':>8}{'KB mean':>9}{'x bytes':>8}"
          f"{'chars':>9}  PSNR dB (min / median) by kind")
    out: dict[str, Any] = {"grids": len(grids), "kinds": counts, "cpu": cpu_name(), "forms": {}}
    for form in args.forms:
        r = rows[form]
        ms_mean, kb = statistics.fmean(r["ms"]), statistics.fmean(r["bytes"]) / 1024
        by_kind = {}
        for k in counts:
            vals = [p for p, kk in zip(r["psnr"], r["kind"]) if kk == k]
            ms_k = [m for m, kk in zip(r["ms"], r["kind"]) if kk == k]
            kb_k = [b / 1024 for b, kk in zip(r["bytes"], r["kind"]) if kk == k]
            if vals:
                by_kind[k] = {"psnr_min": min(vals), "psnr_median": statistics.median(vals),
                              "ms_mean": statistics.fmean(ms_k), "kb_mean": statistics.fmean(kb_k)}
        psnr_text = "  ".join(
            f"{k} {v['psnr_min']:.1f}/{v['psnr_median']:.1f}" if math.isfinite(v["psnr_min"]) else f"{k} exact"
            for k, v in by_kind.items())
        print(f"{form:<13}{statistics.median(r['ms']):>10.1f}{ms_mean:>9.1f}"
              f"{ms_mean / statistics.fmean(base['ms']):>8.2f}{kb:>9.1f}"
              f"{statistics.fmean(r['bytes']) / statistics.fmean(base['bytes']):>8.2f}{kb * 1024 * 1.25 / 1000:>8.0f}k"
              f"  {psnr_text}")
        out["forms"][form] = {"ms_median": statistics.median(r["ms"]), "ms_mean": ms_mean, "kb_mean": kb,
                              "by_kind": by_kind}
    for k in counts:
        line = "  ".join(f"{f} {out['forms'][f]['by_kind'][k]['ms_mean']:.0f} ms {out['forms'][f]['by_kind'][k]['kb_mean']:.0f} KB"
                         for f in args.forms if k in out["forms"][f]["by_kind"])
        if line:
            print(f"  {k}: {line}")
    if args.commit:
        out["commit"] = commit_costs(grids, texts, args.commit)
        before = out["commit"]["lossless"]["writing_ms_per_doc"]
        print(f"commit, writing ms a document (median of {args.commit} rounds): " + "  ".join(
            f"{f} {v['writing_ms_per_doc']:.1f} ({v['writing_ms_per_doc'] / before:.2f}x), "
            f"{v['docs_per_s']:.1f} documents/s" for f, v in out["commit"].items()))
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1, default=lambda v: None if not math.isfinite(v) else v))


if __name__ == "__main__":
    main()
