"""The int8 product kernels on this CPU, side by side: speed, exactness, and what 7-bit queries cost a shortlist.

Every int8 product of a search (the approximate pass over candidates' rows, the int8 summaries) goes through
scoring/kernels.py: oneDNN's quantized linear layer, ``torch._int_mm`` or a float32 product, whichever the machine
timed fastest (by a margin) once. On CPUs without VNNI (AVX2 only) oneDNN sums pairs of byte products in 16 bits,
which saturate unless the query stays within +-64; queries are then rounded to 7 bits for every kernel.

Part 1 prints, for the machine it runs on, a table of every exact kernel on the same rows and query tokens
(and bfloat16 products, not exact, for reference), with the kernel the store chose marked.

Part 2 measures what rounding the query to 7 instead of 8 bits costs the approximate pass, on topic-structured
documents (store_bench.py's generator) and its query sets: the share of the exact top 10 (float32 MaxSim over the
same int8 rows, what the exact pass computes) kept in the approximate pass's best 64 (the exact pass's input) among
``--candidates`` documents, and the scores' mean relative error.

Part 3 (``--summary-docs N``) times the first stage's scan, ``N`` documents' 16 int8 summaries, as the store runs
it (scoring/kernels.py's kernel, 32k rows a call) beside fbgemm's quantized linear layer with the roles swapped:
the summaries packed once as the layer's weight and the query as its input (shifted to unsigned 7 bits, so AVX2's
16-bit pair sums cannot saturate), checked exact against ``torch._int_mm``. It prints what packing costs: the
time, which a reader would add to its open, and the packed copy, which would sit in its anonymous memory.

    python benchmarks/int8_kernel_bench.py [--rows 65536] [--candidates 1280] [--queries 30] [--summary-docs 100000]
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
"""Candidates the approximate pass hands to the exact pass (SearchConfig.shortlist)."""


def _median_ms(run: Callable[[], object], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def kernel_speeds(n_rows: int, repeats: int) -> None:
    """Part 1: every exact kernel here over ``n_rows`` int8 rows (32k a call, as a search multiplies) for 5-, 25-
    and 32-token queries, as a markdown table beside the machine's choice; bfloat16 products (not exact) for
    reference."""
    import torch

    from docpc_retrievers.machine import this_cpu

    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(-127, 128, (n_rows, 128), dtype=torch.int8, generator=gen)
    chunks = [rows[s : s + 32_768] for s in range(0, n_rows, 32_768)]
    choice = kernels.int8_kernel_choice()
    available = kernels.available_kernels()
    cpu = this_cpu()
    print(f"CPU: {cpu.model} ({cpu.cores} cores; {' '.join(cpu.flags)}); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"oneDNN exact for queries within +-{kernels.onednn_exact_peak() or 'none'}; queries rounded to "
          f"+-{kernels.query_peak()}; the store uses {choice.choice} ({choice.how})\n")
    names = [*available, "bfloat16"]
    print(f"| {n_rows:,} int8 rows x 128, median of {repeats} ms | " + " | ".join(
        f"{n}{' (chosen)' if n == choice.choice else ''}" for n in names) + " |")
    print("|---" + "|---:" * len(names) + "|")
    peak = kernels.query_peak()
    for tokens in (5, 25, 32):
        q8 = torch.randint(-peak, peak + 1, (tokens, 128), dtype=torch.int8, generator=gen).numpy()
        qb = torch.from_numpy(q8.astype(np.float32)).to(torch.bfloat16)
        runs = {name: (lambda k=k, q8=q8: [k(c, q8) for c in chunks]) for name, k in available.items()}
        runs["bfloat16"] = lambda qb=qb: [c.to(torch.bfloat16) @ qb.T for c in chunks]
        ms = {name: _median_ms(run, repeats if name != "onednn" or choice.choice == "onednn" else 1)
              for name, run in runs.items()}
        fastest = min(v for n, v in ms.items() if n != "bfloat16")
        print(f"| {tokens} query tokens | " + " | ".join(
            f"{ms[n]:,.1f} ({ms[n] / fastest:.1f}x)" for n in names) + " |")
    print("\n(x: against the fastest exact kernel in the same row)")


SUMMARY_ROWS = 16
"""Centroid summaries per document (store/search/centroids.py)."""
CHUNK_ROWS = 32_768


def summary_scan(n_docs: int, repeats: int) -> None:
    """Part 3: the summaries' scan through the store's kernel against fbgemm with the summaries as packed weight."""
    import torch

    gen = torch.Generator().manual_seed(2)
    rows = torch.randint(-127, 128, (n_docs * SUMMARY_ROWS, 128), dtype=torch.int8, generator=gen)
    chunks = [rows[s:s + CHUNK_ROWS] for s in range(0, rows.shape[0], CHUNK_ROWS)]
    print(f"\nthe summaries' scan: {n_docs:,} documents x {SUMMARY_ROWS} int8 rows, {CHUNK_ROWS:,} rows a call, "
          f"median of {repeats} ms")
    try:
        torch.backends.quantized.engine = "fbgemm"
        start = time.perf_counter()
        packed = [torch.ops.quantized.linear_prepack(torch._make_per_tensor_quantized_tensor(c, 1.0, 0), None)
                  for c in chunks]
        pack_s = time.perf_counter() - start
        swapped = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32
    except (RuntimeError, AttributeError) as exc:
        print(f"  fbgemm: not in this build ({exc})")
        return
    print(f"  fbgemm packing: {pack_s:.2f} s, a packed copy of {rows.numel() / 2**20:,.0f} MiB")

    def store_kernel(q8: np.ndarray) -> None:
        for c in chunks:
            kernels.int8_products_exact(c, q8)

    def fbgemm(q8: np.ndarray) -> None:
        x = torch.from_numpy(q8.astype(np.float32))  # zero point 64: the input bytes are q + 64, within 1..127
        for w in packed:
            swapped(x, 1.0, 64, w)

    for tokens in (5, 10, 25):
        q8 = torch.randint(-63, 64, (tokens, 128), dtype=torch.int8, generator=gen).numpy()
        q8[0] = 63
        exact = torch.equal(swapped(torch.from_numpy(q8.astype(np.float32)), 1.0, 64, packed[0]).T.to(torch.int64),
                            kernels._int_mm(chunks[0], q8).to(torch.int64))
        times: dict[str, list[float]] = {"store": [], "fbgemm": []}
        for _ in range(repeats):  # alternating, so a moment of load falls on both
            for name, run in (("store", store_kernel), ("fbgemm", fbgemm)):
                start = time.perf_counter()
                run(q8)
                times[name].append(1e3 * (time.perf_counter() - start))
        store_ms, fb_ms = (statistics.median(times[k]) for k in ("store", "fbgemm"))
        print(f"  {tokens:2d} tokens: the store's kernel {store_ms:6.1f} ms, fbgemm swapped {fb_ms:6.1f} ms "
              f"({'exact' if exact else 'NOT exact'}), ratio {store_ms / fb_ms:.2f}x")


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
    ap.add_argument("--skip-shortlist", action="store_true")
    ap.add_argument("--summary-docs", type=int, default=0, help="documents for part 3, the summaries' scan (0: skip)")
    args = ap.parse_args(argv)
    if not args.skip_speed:
        kernel_speeds(args.rows, args.repeats)
    if not args.skip_shortlist:
        shortlist_cost(args.candidates, args.queries, args.seed)
    if args.summary_docs:
        summary_scan(args.summary_docs, args.repeats)


if __name__ == "__main__":
    main()
