"""Encoder-bound indexing speed on a GPU: ColQwen2's real architecture, random weights, bf16, grid vs page mode.

Two steps, so that the GPU machine needs neither PyMuPDF nor Chroma:

    # here: render the sample corpus as the index would (grid mode and page mode)
    .venv/bin/python benchmarks/gpu_encode_bench.py render ../shared/corpus/py-pdf-sample-files .gpu-bench
    # on the GPU machine (colpali-engine carried as a wheel): encode both, print documents/s
    python3 benchmarks/gpu_encode_bench.py encode .gpu-bench --batch-size 8

Documents/s is what an encoder-bound indexing run reaches (rendering and
commits overlapped): grids encoded per second in grid mode, and documents
whose every page was encoded per second in page mode. Weights are random:
speed is real, scores are meaningless.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def render(corpus: Path, out: Path) -> None:
    """Write each usable PDF's grid (2x2, first 4 pages) and every page (page mode) as lossless WebP."""
    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.discovery import discover_pdfs
    from docpc_retrievers.documents.represent import represent_pdf
    from docpc_retrievers.errors import PDFLoadError

    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for i, path in enumerate(discover_pdfs([corpus])):
        try:
            grid = represent_pdf(path, IndexSettings())
            pages = represent_pdf(path, IndexSettings(mode="page", pages=None))
        except PDFLoadError as exc:
            logging.warning("skipping %s", exc)
            continue
        assert grid.grid is not None
        entry = {"doc": path.name, "grid": f"d{i:03d}-grid.webp", "pages": []}
        grid.grid.image.save(out / entry["grid"], format="WEBP", lossless=True)
        for j, page in enumerate(pages.pages):
            name = f"d{i:03d}-p{j:03d}.webp"
            page.save(out / name, format="WEBP", lossless=True)
            entry["pages"].append(name)
        manifest.append(entry)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    pages = sum(len(e["pages"]) for e in manifest)
    print(f"{len(manifest)} documents, {pages} pages ({pages / len(manifest):.2f} per document) -> {out}")


def encode(folder: Path, batch_size: int, visual_tokens: int, repeats: int, device: str, architecture: str) -> None:
    """Grids and pages encoded, documents/s; then, side by side on the grids, the forward pass alone against
    ``encode_images`` with each batch prepared in series and prepared ahead (the device's busy share)."""
    import torch
    from PIL import Image

    from docpc_retrievers.encoders import ColPaliEncoder
    from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2

    manifest = json.loads((folder / "manifest.json").read_text())

    def load(name: str) -> Image.Image:
        with Image.open(folder / name) as img:
            return img.convert("RGB")

    grids = [load(e["grid"]) for e in manifest]
    pages = [load(p) for e in manifest for p in e["pages"]]
    ckpt = build_tiny_colqwen2(Path(f"/tmp/colqwen2-{architecture}-random"), seed=0, architecture=architecture)
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    encoders = {ahead: ColPaliEncoder(ckpt, device=device, dtype=dtype, batch_size=batch_size,
                                      max_num_visual_tokens=visual_tokens, prefetch=ahead) for ahead in (False, True)}
    enc = encoders[device != "cpu"]  # the default
    enc.encode_images(grids[:batch_size])  # warm-up (kernels, allocator)
    enc.encode_images(pages[:batch_size])

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def timed(run: Any, images: list[Image.Image]) -> float:
        runs = []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            run(images)
            sync()
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)

    def forward_alone(images: list[Image.Image]) -> None:
        for prepared in inputs:
            with torch.inference_mode():
                enc.model(**prepared)

    order = sorted(grids, key=lambda im: im.size[0] * im.size[1])  # as encode_images batches them
    inputs = []
    for start in range(0, len(order), batch_size):
        batch = enc.processor.process_images(order[start : start + batch_size])
        inputs.append({k: (v.to(device, dtype=enc.dtype) if v.is_floating_point() else v.to(device))
                       if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
    grid_s = timed(enc.encode_images, grids)
    page_s = timed(enc.encode_images, pages)
    alone_s = timed(forward_alone, grids)
    series_s = timed(encoders[False].encode_images, grids)
    ahead_s = timed(encoders[True].encode_images, grids)
    n = len(manifest)
    result = {
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads",
        "architecture": architecture,
        "documents": n,
        "pages_per_document": len(pages) / n,
        "max_num_visual_tokens": visual_tokens,
        "batch_size": batch_size,
        "grid_docs_per_s": n / grid_s,
        "page_docs_per_s": n / page_s,
        "speed_up": page_s / grid_s,
        "forward_alone_images_per_s": n / alone_s,
        "in_series_images_per_s": n / series_s,
        "prepared_ahead_images_per_s": n / ahead_s,
        "busy_share_in_series": alone_s / series_s,
        "busy_share_prepared_ahead": alone_s / ahead_s,
    }
    print(json.dumps(result, indent=2))
    print(f"{result['device']}: grid {result['grid_docs_per_s']:.1f} docs/s, page {result['page_docs_per_s']:.2f} docs/s "
          f"({result['speed_up']:.2f}x at {result['pages_per_document']:.2f} pages per document); grids: forward alone "
          f"{result['forward_alone_images_per_s']:.1f}/s, in series {result['in_series_images_per_s']:.1f}/s "
          f"({result['busy_share_in_series']:.2f} busy), prepared ahead {result['prepared_ahead_images_per_s']:.1f}/s "
          f"({result['busy_share_prepared_ahead']:.2f} busy)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    r = sub.add_parser("render")
    r.add_argument("corpus", type=Path)
    r.add_argument("out", type=Path)
    e = sub.add_parser("encode")
    e.add_argument("folder", type=Path)
    e.add_argument("--batch-size", type=int, default=8)
    e.add_argument("--visual-tokens", type=int, default=768, help="ColQwen2's default budget")
    e.add_argument("--repeats", type=int, default=3)
    e.add_argument("--device", default="cuda", help="cuda, or cpu for a check of the plumbing")
    e.add_argument("--architecture", default="qwen2-vl-2b", choices=("qwen2-vl-2b", "tiny"),
                   help="ColQwen2's real architecture at random weights, or the tests' tiny one")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.step == "render":
        render(args.corpus, args.out)
    else:
        encode(args.folder, args.batch_size, args.visual_tokens, args.repeats, args.device, args.architecture)


if __name__ == "__main__":
    sys.exit(main())
