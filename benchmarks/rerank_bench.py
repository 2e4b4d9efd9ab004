"""Rerank and page-mode benchmark: what grid-then-page reranking costs, and grid vs page-level indexing.

Prints, side by side from one run:

1. For N in {5, 10, 20, 50} reranked documents: pages encoded per query, the
   latency reranking adds per query (cold cache), and the same query set run
   again (warm cache: pages encoded and added latency).
2. A grid-mode and a page-mode index of the same corpus, same encoder:
   images encoded, vectors stored, bytes on disk, indexing seconds, and the
   ratios page/grid.

The encoder is the tiny random test checkpoint (no download): numbers are for
plumbing cost on this machine, not retrieval quality. Run:

    .venv/bin/python benchmarks/rerank_bench.py                      # corpus: the generated 'small' set
    .venv/bin/python benchmarks/rerank_bench.py --corpus DIR --queries 10
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from docpc_retrievers import DocPCIndex, IndexSettings
from docpc_retrievers.encoders import ColPaliEncoder
from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2

QUERIES = [
    "annual report revenue table",
    "introduction and overview",
    "results of the experiment",
    "legal terms and conditions",
    "figure showing growth",
    "contents",
    "summary of findings",
    "budget allocation by department",
    "safety procedures",
    "references and bibliography",
]


def _corpus(arg: str | None, work: Path) -> Path:
    if arg:
        return Path(arg)
    from docpc_retrievers.eval.synthetic import generate_corpus  # the generated DocViRe-style corpus

    return generate_corpus(work / "synthetic", "small").root / "pdfs"


def _timed_index(path: Path, corpus: Path, encoder: ColPaliEncoder, settings: IndexSettings) -> tuple[DocPCIndex, float]:
    t0 = time.perf_counter()
    index = DocPCIndex.from_pdfs([corpus], path, encoder=encoder, settings=settings)
    return index, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="folder of PDFs (default: the generated 'small' set, 280 documents)")
    ap.add_argument("--queries", type=int, default=5, help="queries per measurement")
    ap.add_argument("--budget", type=int, default=4, help="pages per reranked document")
    ap.add_argument("--n", default="5,10,20,50", help="rerank depths to measure")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, force=True)

    work = Path(tempfile.mkdtemp(prefix="docpc-rerank-bench-"))
    try:
        corpus = _corpus(args.corpus, work)
        encoder = ColPaliEncoder(build_tiny_colqwen2(work / "tiny"), device="cpu")
        grid, grid_s = _timed_index(work / "grid", corpus, encoder, IndexSettings())
        page, page_s = _timed_index(work / "page", corpus, encoder, IndexSettings(mode="page", pages=None))
        gi, pi = grid.info(), page.info()
        print(f"corpus: {corpus} ({gi['documents']} documents); encoder: tiny random ColQwen2 on CPU")
        print()
        print(f"{'':24}{'grid (2x2)':>14}{'page (all)':>14}{'page/grid':>11}")
        for label, g, p in (
            ("images encoded", gi["images_encoded"], pi["images_encoded"]),
            ("vectors stored", gi["vectors"], pi["vectors"]),
            # Index bytes: records + vectors; the grid previews for LLMs are counted on their own row.
            ("bytes on disk (index)", gi["bytes_on_disk"] - gi["bytes_grid_images"], pi["bytes_on_disk"]),

            ("indexing seconds", grid_s, page_s),
        ):
            fmt = "{:>14.2f}" if isinstance(g, float) else "{:>14,}"
            print(f"{label:24}" + fmt.format(g) + fmt.format(p) + f"{p / g:>10.2f}x")
        print(f"(grid mode also keeps its composed grids as PNG previews for LLMs: {gi['bytes_grid_images']:,} bytes)")
        page.close()

        queries = (QUERIES * (1 + args.queries // len(QUERIES)))[: args.queries]
        print()
        print(f"rerank (page budget {args.budget}), {len(queries)} queries per row; latency is added time per query")
        print(f"{'N':>4}{'pages/query cold':>18}{'added ms cold':>15}{'pages/query warm':>18}{'added ms warm':>15}")
        for n in (int(v) for v in args.n.split(",")):
            grid.clear_page_cache()
            rows = []
            for _warm in (False, True):
                before = grid.reranker.pages_encoded
                base, extra = [], []
                for q in queries:
                    t0 = time.perf_counter()
                    grid.search(q, top_k=min(10, n))
                    t1 = time.perf_counter()
                    grid.search(q, top_k=min(10, n), rerank=True, rerank_top_n=n, page_budget=args.budget)
                    t2 = time.perf_counter()
                    base.append(t1 - t0)
                    extra.append((t2 - t1) - (t1 - t0))
                pages = (grid.reranker.pages_encoded - before) / len(queries)
                rows.append((pages, statistics.median(extra) * 1000))
            (pc, lc), (pw, lw) = rows
            print(f"{n:>4}{pc:>18.1f}{lc:>15.0f}{pw:>18.1f}{lw:>15.0f}")
        grid.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
