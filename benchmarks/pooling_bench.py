"""Pooling benchmark: colpali-engine's HierarchicalTokenPooler against docpc's pool_vectors, side by side.

Both cut Ward linkage over the rows of ``1 - X Xᵀ`` into ``n // factor``
clusters; docpc computes the rows' distances through the ``dim``-wide Gram
form instead of handing scipy the ``n x n`` matrix. Per document of
``--vectors`` unit vectors (drawn around shared topics, as a grid's tokens
are), on one core (BLAS and torch held to one thread): milliseconds of each,
their ratio, and how many documents got identical pooled vectors. Ranking
quality after pooling is measured by ``store_bench.py --skip-scale`` (the
clusters are the same, so are the scores).

    .venv/bin/python benchmarks/pooling_bench.py
    .venv/bin/python benchmarks/pooling_bench.py --vectors 760 --docs 30 --factors 2,3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from docpc_retrievers.encoders.pooling import pool_vectors


def _document(rng: np.random.Generator, n: int, dim: int = 128) -> np.ndarray:
    topics = int(rng.integers(20, 120))
    centres = rng.standard_normal((topics, dim))
    x = centres[rng.integers(0, topics, n)] + rng.uniform(0.4, 1.2) * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=760, help="vectors per document (a 2x2 ColQwen2 grid: ~760)")
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--factors", default="2,3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    rng = np.random.default_rng(args.seed)
    docs = [_document(rng, args.vectors) for _ in range(args.docs)]
    reference = HierarchicalTokenPooler()
    out: dict[str, dict[str, float]] = {}
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        for factor in (int(f) for f in args.factors.split(",")):
            pool_vectors(docs[0], factor)  # imports and first call outside the timing
            reference.pool_embeddings([torch.from_numpy(docs[0])], pool_factor=factor)
            ours, theirs, same = [], [], 0
            for d in docs:
                t0 = time.perf_counter()
                pooled, _ = pool_vectors(d, factor)
                ours.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                ref = reference.pool_embeddings([torch.from_numpy(d)], pool_factor=factor)[0].numpy()
                theirs.append(time.perf_counter() - t0)
                same += int(pooled.shape == ref.shape and np.allclose(pooled, ref, atol=1e-5))
            row = {"colpali_ms": statistics.median(theirs) * 1000, "docpc_ms": statistics.median(ours) * 1000,
                   "identical_docs": same, "docs": len(docs)}
            row["speedup"] = row["colpali_ms"] / row["docpc_ms"]
            out[f"pool_{factor}"] = row
    print(f"pooling {args.vectors} vectors per document, one core, median of {args.docs} documents")
    print(f"{'factor':>6} {'colpali-engine ms':>18} {'docpc ms':>9} {'speedup':>8} {'identical':>10}  target")
    for name, row in out.items():
        print(f"{name.removeprefix('pool_'):>6} {row['colpali_ms']:18.1f} {row['docpc_ms']:9.1f} {row['speedup']:7.1f}x "
              f"{row['identical_docs']:>4}/{row['docs']:<5}  <= 15 ms: {'met' if row['docpc_ms'] <= 15 else 'NOT met'}")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
