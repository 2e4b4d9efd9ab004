"""How deep the centroid summaries must be read: the share of the exact top 10 found within the summaries' best N.

For each query of the real sets (no filter), every document's summary score is computed exactly (float32) and the
ranks of the exhaustive top 10 (search_bench's cached truth) are read off: recall@10 of a first stage that keeps N
candidates, for N from 256 to 16,384, at each number of centroids per document. This is what sets
``SearchConfig.n_centroids`` and the candidate counts (docs/store.md, "The search").

    python benchmarks/search_bench.py --corpus real --docs 100000 --queries 30   # once: caches the truth
    python benchmarks/summary_depth.py --docs 100000 --queries 30 --centroids 16 32
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_vectors
import search_bench
from machine import cpu_name

from docpc_retrievers.store.search import document_centroids

DEPTHS = (256, 1024, 2048, 4096, 8192, 16384)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--centroids", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--cache", type=Path, default=real_vectors.DEFAULT_CACHE)
    args = ap.parse_args()
    args.corpus, args.seed = "real", 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ids, vectors, _, sets = search_bench.real_sets(args)
    truth = search_bench.cached_truth(args, sets, search_bench.StoredRows(ids, vectors))
    slot = {d: i for i, d in enumerate(ids)}
    print(f"real vectors, {len(ids):,} documents, CPU: {cpu_name()}\n")
    print("| centroids | set | " + " | ".join(f"top {n:,}" for n in DEPTHS) + " |")
    print("|---" * (len(DEPTHS) + 2) + "|")
    for nc in args.centroids:
        summaries = np.stack([np.resize(document_centroids(v, nc), (nc, v.shape[1])) for v in vectors])  # [n, c, d]
        flat = summaries.reshape(-1, summaries.shape[2])
        for name in (n for n in sets if "-f" not in n):
            ranks = []
            for q, best in zip(sets[name][0], truth[name]):
                scores = (flat @ q.T.astype(np.float32)).reshape(len(ids), nc, -1).max(axis=1).sum(axis=1)
                rank = np.empty(len(ids), np.int64)
                rank[np.argsort(-scores, kind="stable")] = np.arange(len(ids))
                ranks.append([rank[slot[d]] for d in best])
            found = np.array(ranks)
            print(f"| {nc} | {name} | " + " | ".join(f"{(found < n).mean():.3f}" for n in DEPTHS) + " |", flush=True)


if __name__ == "__main__":
    main()
