"""Write-path benchmark: a folder of real PDFs indexed several ways, side by side in one run.

For each variant (``--variants``), a fresh embedded store gets the whole
folder with the tiny random checkpoint (no download; encoding is cheap, so
what is measured is everything around the encoder), and the run prints:
wall seconds, seconds per stage as indexing reports them (render, preview,
encode, pool, commit: stages overlap, so they add up to more than the wall
time), and bytes per document on disk by part (Chroma's files, the local
cache, grid previews inside Chroma's payload). Variants:

* ``default``: what ``docpc index`` does today (default workers, pool factor 2, previews);
* ``workers0``: the same rendered in this process;
* ``workers1``: one render worker;
* ``colpali-pooler``: default, pooling with colpali-engine's own HierarchicalTokenPooler (the pooler before 0.3);
* ``no-grids``: no previews (``--no-grids``);
* ``pool3``: pool factor 3.

``--before REF`` adds a first row: the default variant run by the code of git
ref ``REF`` (checked out into a temporary worktree, run in a subprocess), so
before and after are measured in one run on the same machine. Every file is
read once and a few are indexed before the first timed row, so no row pays for
a cold page cache or the first model load.

A folder of long real manuals: Debian's TeX Live documentation
(``apt-get install texlive-latex-base-doc texlive-latex-recommended-doc``,
464 PDFs, about 15,000 pages, under ``/usr/share/doc/texlive-doc``)::

    .venv/bin/python benchmarks/write_path_bench.py --corpus /usr/share/doc/texlive-doc --before 9b7d5e2
    .venv/bin/python benchmarks/write_path_bench.py --corpus ../shared/corpus/py-pdf-sample-files --variants default,workers0
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("default", "workers0", "workers1", "colpali-pooler", "no-grids", "pool3")


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _colpali_pool(vectors: Any, pool_factor: int) -> Any:
    """The pooler before 0.3: colpali-engine's HierarchicalTokenPooler, then means and anchors per cluster."""
    import numpy as np
    import torch
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    x = np.asarray(vectors, dtype=np.float32)
    if pool_factor == 1 or x.shape[0] < 2:
        return x, None
    out = HierarchicalTokenPooler().pool_embeddings([torch.from_numpy(x)], pool_factor=pool_factor, return_dict=True)
    rows, anchors = [], []
    for members in (m[0].numpy() for _, m in sorted(out.cluster_id_to_indices[0].items())):
        if members.size:
            centre = x[members].mean(axis=0)
            centre /= max(float(np.linalg.norm(centre)), 1e-12)
            rows.append(centre)
            anchors.append(int(members[int(np.argmax(x[members] @ centre))]))
    return np.stack(rows).astype(np.float32), np.asarray(anchors, dtype=np.uint16)


def run_variant(name: str, corpus: Path, checkpoint: Path, work: Path) -> dict[str, Any]:
    """Index ``corpus`` into a fresh store the way ``name`` says; timings and bytes per document by part."""
    from docpc_retrievers import indexing
    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.index import DocPCIndex

    settings = IndexSettings(pool_factor=3) if name == "pool3" else IndexSettings()
    workers = {"workers0": 0, "workers1": 1}.get(name)
    original = indexing.pool_vectors
    if name == "colpali-pooler":
        indexing.pool_vectors = _colpali_pool  # type: ignore[assignment]
    store = work / name
    try:
        t0 = time.perf_counter()
        with DocPCIndex(store, model=str(checkpoint), settings=settings, writable=True,
                        store_grids=name != "no-grids") as index:
            report = index.add_pdfs([corpus], workers=workers)
            wall = time.perf_counter() - t0
            docs = len(index)
            info = index.info()
    finally:
        indexing.pool_vectors = original
    chroma, cache = _bytes(store / "chroma"), _bytes(store / "cache")
    return {
        "variant": name, "wall_s": wall, "documents": docs, "failed": len(report.failed),
        **{k: v for k, v in report.timings.items() if k != "total_s"},
        "kb_per_doc": {"total": _bytes(store) / docs / 1000, "chroma": chroma / docs / 1000,
                       "cache": cache / docs / 1000, "grid_previews": info["bytes_grid_images"] / docs / 1000},
    }


def _before(ref: str, corpus: Path, checkpoint: Path, work: Path) -> dict[str, Any]:
    """The default variant run by the code of git ref ``ref``, in a subprocess on a temporary worktree."""
    repo = Path(__file__).resolve().parents[1]
    tree = work / "before-tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-f", str(tree), ref], check=True,
                   capture_output=True)
    try:
        out = work / "before.json"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, __file__, "--one", "default", "--corpus", str(corpus), "--checkpoint",
                        str(checkpoint), "--json", str(out)], check=True, env=env)
        row = json.loads(out.read_text())
        row["variant"] = f"before ({ref})"
        return row
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _warm(corpus: Path, checkpoint: Path, work: Path) -> None:
    """Read every PDF once and index a few: no timed row pays for a cold page cache or the first model load."""
    files = sorted(corpus.rglob("*.pdf"))
    for f in files:
        f.read_bytes()
    sample = work / "warm-sample"
    sample.mkdir()
    for f in files[:6]:
        shutil.copy(f, sample / f"{len(list(sample.iterdir()))}-{f.name}")
    run_variant("default", sample, checkpoint, work / "warm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="folder of PDFs")
    parser.add_argument("--variants", default="default,workers0,workers1,colpali-pooler,no-grids",
                        help=f"comma-separated, run in this order ({', '.join(VARIANTS)})")
    parser.add_argument("--before", metavar="REF", help="first row: the default variant run by this git ref's code")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)  # a single row, for --before
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        work = Path(tempfile.mkdtemp(prefix="docpc-write-bench-one-"))
        try:
            _warm(args.corpus, args.checkpoint, work)
            args.json.write_text(json.dumps(run_variant(args.one, args.corpus, args.checkpoint, work)))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    from docpc_retrievers.testing import build_tiny_colqwen2

    work = Path(tempfile.mkdtemp(prefix="docpc-write-bench-"))
    try:
        checkpoint = build_tiny_colqwen2(work / "tiny")
        rows = [_before(args.before, args.corpus, checkpoint, work)] if args.before else []
        _warm(args.corpus, checkpoint, work)
        for name in args.variants.split(","):
            if name not in VARIANTS:
                raise SystemExit(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
            rows.append(run_variant(name, args.corpus, checkpoint, work))
            shutil.rmtree(work / name, ignore_errors=True)
            row = rows[-1]
            print(f"{name}: {row['documents']} documents ({row['failed']} failed) in {row['wall_s']:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0]["wall_s"]
    stages = ("render_s", "preview_s", "encode_s", "pool_s", "commit_s")
    print(f"\n{os.cpu_count()} cores; stages overlap (workers render and make previews while the encoder runs)")
    print(f"{'variant':<22}{'wall s':>8}{'vs first':>9}" + "".join(f"{s.removesuffix('_s'):>9}" for s in stages)
          + f"{'KB/doc':>9}{'chroma':>8}{'cache':>7}{'grids':>7}")
    for row in rows:
        kb = row["kb_per_doc"]
        print(f"{row['variant']:<22}{row['wall_s']:8.1f}{row['wall_s'] / base:8.2f}x"
              + "".join(f"{row.get(s, 0.0):9.1f}" for s in stages)
              + f"{kb['total']:9.0f}{kb['chroma']:8.0f}{kb['cache']:7.0f}{kb['grid_previews']:7.0f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
