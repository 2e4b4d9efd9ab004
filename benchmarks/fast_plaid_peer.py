"""fast-plaid (PLAID on CPU) as a peer in `store_bench.py --peers`, run by an interpreter that has it.

fast-plaid's wheels are built against one torch release each (1.7.0.2110: torch 2.11), not the torch
this project pins, so it runs in its own environment and talks to the benchmark through files:

    python -m venv /tmp/fpvenv && /tmp/fpvenv/bin/pip install torch==2.11.0 fast-plaid==1.7.0.2110 numpy
    .venv/bin/python benchmarks/store_bench.py --skip-quality --skip-scale --peers \
        --fast-plaid-python /tmp/fpvenv/bin/python

This script imports nothing from docpc_retrievers. Input folder: `docs.npy` (all vectors, float32,
[total, dim]), `lengths.npy` (vectors per document), `queries.npz` (one array per query, named
`<set>__<i>`). It builds an index, searches every query one at a time (search time only), and writes
`result.json`: build seconds, bytes on disk, and per query its top-10 document numbers and seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from fast_plaid import search


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--nbits", type=int, default=4, help="residual bits per dimension (fast-plaid's default)")
    ap.add_argument("--n-ivf-probe", type=int, default=8, help="IVF cells probed per query token (default)")
    ap.add_argument("--n-full-scores", type=int, default=4096, help="documents scored in full (default)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's choice")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    flat = torch.from_numpy(np.load(args.folder / "docs.npy"))
    lengths = np.load(args.folder / "lengths.npy").tolist()
    docs = list(torch.split(flat, lengths))
    queries = np.load(args.folder / "queries.npz")
    index_dir = args.folder / "fast-plaid"
    index = search.FastPlaid(index=str(index_dir), device="cpu")
    t0 = time.perf_counter()
    index.create(documents_embeddings=docs, nbits=args.nbits)
    build_s = time.perf_counter() - t0
    first = torch.from_numpy(queries[queries.files[0]])
    index.search(queries_embeddings=[first], top_k=10, show_progress=False)  # warm-up
    found: dict[str, dict[str, object]] = {}
    for name in queries.files:
        q = torch.from_numpy(queries[name])
        t0 = time.perf_counter()
        hits = index.search(queries_embeddings=[q], top_k=10, n_ivf_probe=args.n_ivf_probe,
                            n_full_scores=args.n_full_scores, show_progress=False)[0]
        found[name] = {"s": time.perf_counter() - t0, "top10": [int(doc) for doc, _ in hits]}
    size = sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file())
    out = {"build_s": build_s, "bytes": size, "nbits": args.nbits, "n_ivf_probe": args.n_ivf_probe,
           "n_full_scores": args.n_full_scores, "threads": torch.get_num_threads(), "queries": found}
    (args.folder / "result.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
