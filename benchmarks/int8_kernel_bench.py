"""The int8 product kernels on this CPU, side by side: speed, exactness, and what 7-bit queries cost a shortlist.

Every int8 product of a search (the approximate pass over candidates' rows, the int8 summaries) goes through
scoring/kernels.py: oneDNN's quantized linear layer or ``torch._int_mm``, whichever is exact and faster here. On
CPUs without VNNI (AVX2 only) oneDNN sums pairs of byte products in 16 bits, which saturate unless the query stays
within +-64, and ``_int_mm`` has no fast kernel; the store then rounds queries to 7 bits and keeps oneDNN.

Part 1 times, on the same rows and query tokens: ``_int_mm`` with 8-bit queries (what such a CPU ran before),
oneDNN with 8-bit queries (with whether it is exact here), oneDNN with 7-bit queries, and float32 / bfloat16
products after converting the rows (the other fallback), and prints each beside the kernel the store picks.

Part 2 measures what rounding the query to 7 instead of 8 bits costs the approximate pass, on topic-structured
documents (store_bench.py's generator) and its query sets: the share of the exact top 10 (float32 MaxSim over the
same int8 rows, what the exact pass computes) kept in the approximate pass's best 64 (the exact pass's input) among
``--candidates`` documents, and the scores' mean relative error.

    python benchmarks/int8_kernel_bench.py [--rows 65536] [--candidates 1280] [--queries 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_bench import SyntheticCorpus

from docpc_retrievers.scoring import kernels
from docpc_retrievers.scoring.maxsim import quantized_query
from docpc_retrievers.store.codec import quantize

SHORTLIST = 64
"""Candidates the approximate pass hands to the exact pass (store/search/two_stage.py's SHORTLIST_EXACT)."""


def _median_ms(run: Callable[[], object], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def kernel_speeds(n_rows: int, repeats: int) -> None:
    """Part 1: each kernel over ``n_rows`` int8 rows for 5- and 25-token queries."""
    import torch

    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(-127, 128, (n_rows, 128), dtype=torch.int8, generator=gen)
    peak = kernels.onednn_exact_peak()
    picked = kernels.int8_kernel()
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads; "
          f"oneDNN exact for queries within +-{peak or 'none'}; the store uses "
          f"{'oneDNN' if picked is kernels._onednn else '_int_mm'} with queries within +-{kernels.query_peak()}")
    for tokens in (5, 25):
        q8 = torch.randint(-127, 128, (tokens, 128), dtype=torch.int8, generator=gen).numpy()
        q7 = np.clip(q8, -64, 64)
        qf = torch.from_numpy(q8.astype(np.float32))
        expected = rows.to(torch.int64) @ torch.from_numpy(q8).to(torch.int64).T
        line = [f"{n_rows:,} rows x {tokens:2d} tokens:",
                f"_int_mm 8-bit {_median_ms(lambda q8=q8: kernels._int_mm(rows, q8), repeats):7.1f} ms"]
        try:
            onednn8 = _median_ms(lambda q8=q8: kernels._onednn(rows, q8), repeats)
            exact = torch.equal(kernels._onednn(rows, q8).to(torch.int64), expected)
            line.append(f"oneDNN 8-bit {onednn8:6.1f} ms ({'exact' if exact else 'NOT exact'})")
            line.append(f"oneDNN 7-bit {_median_ms(lambda q7=q7: kernels._onednn(rows, q7), repeats):6.1f} ms")
        except (RuntimeError, AttributeError, TypeError):
            line.append("oneDNN: not in this build")
        for dtype in (torch.float32, torch.bfloat16):
            q = qf.to(dtype)
            line.append(f"{str(dtype).split('.')[-1]} {_median_ms(lambda dtype=dtype, q=q: rows.to(dtype) @ q.T, repeats):6.1f} ms")
        print("  ".join(line))


def _maxsim_int(q8: np.ndarray, token_scales: np.ndarray, rows: np.ndarray, row_scales: np.ndarray,
                docs: int, per_doc: int) -> np.ndarray:
    """Approximate MaxSim ``[docs]`` from the exact integer products of int8 query tokens and int8 ``rows`` (held
    as float32)."""
    sims = (rows @ q8.astype(np.float32).T).astype(np.float64) * row_scales[:, None]  # integers below 2**24: exact
    return (sims.reshape(docs, per_doc, -1).max(axis=1) * token_scales[None, :]).sum(axis=1)


def shortlist_cost(n_candidates: int, n_queries: int, seed: int) -> None:
    """Part 2: the exact top 10 kept in the approximate best 64, 8-bit against 7-bit queries."""
    corpus = SyntheticCorpus(seed=seed, skew=1.1)
    per_doc = 380
    docs = [corpus.document(per_doc) for _ in range(n_candidates)]
    packed = [quantize(d) for d in docs]
    rows = np.concatenate([p[0] for p in packed])
    row_scales = np.concatenate([np.asarray(p[1], dtype=np.float64).reshape(-1) for p in packed])
    rows = rows.astype(np.float32)
    floats = rows * row_scales[:, None].astype(np.float32)
    targets = [docs[i] for i in corpus.rng.choice(n_candidates, size=n_queries, replace=False)]
    sets = corpus.query_sets(targets)
    print(f"\n{n_candidates:,} candidates of {per_doc} int8 rows, {n_queries} queries per set: share of the exact "
          f"top 10 in the approximate best {SHORTLIST} / mean relative score error")
    for name, queries in sets.items():
        if name.startswith("filter"):  # topic queries again (their filter does not apply here)
            continue
        kept: dict[int, list[float]] = {127: [], 64: []}
        error: dict[int, list[float]] = {127: [], 64: []}
        for query in queries:
            exact = (floats @ query.T).reshape(n_candidates, per_doc, -1).max(axis=1).sum(axis=1)
            top10 = set(np.argsort(-exact, kind="stable")[:10].tolist())
            for peak in (127, 64):
                q8, scales = quantized_query(query, peak)
                approx = _maxsim_int(q8, scales.numpy(), rows, row_scales, n_candidates, per_doc)
                best = set(np.argsort(-approx, kind="stable")[:SHORTLIST].tolist())
                kept[peak].append(len(top10 & best) / 10)
                error[peak].append(float(np.mean(np.abs(approx - exact) / np.abs(exact))))
        print(f"  {name:<10} 8-bit {statistics.mean(kept[127]):.3f} / {statistics.mean(error[127]):.1e}   "
              f"7-bit {statistics.mean(kept[64]):.3f} / {statistics.mean(error[64]):.1e}")


def main(argv: list[str] | None = None) -> Any:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65_536, help="int8 rows per timed product")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--candidates", type=int, default=1280, help="documents the approximate pass ranks")
    ap.add_argument("--queries", type=int, default=30, help="queries per set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_speed:
        kernel_speeds(args.rows, args.repeats)
    shortlist_cost(args.candidates, args.queries, args.seed)


if __name__ == "__main__":
    main()
