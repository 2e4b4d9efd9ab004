"""What cheaper search settings buy in latency and cost in recall, side by side on one kept store.

The latency line at 100k documents (p50 <= 100 ms on 2 cores) holds on a CPU with VNNI and not on one without; one
answer would be to trade recall. This runs a store kept by ``store_bench.py --keep`` (its folder holds ``store/`` and
``queries-*.npy``) under several settings, rounds alternating their order, and prints p50 / p90 ms per round and
recall@10 against exhaustive MaxSim over the same stored vectors. A setting is ``N`` (``n_candidates``: every
candidate count of a search scales with it; the store's default is 256) with ``c`` appended to force the coarse
pass over the summaries (``centroids.FULL_SCAN_MAX = 0``: each document's 4 merged centroids first, then the 16 for a
shortlist; the design for more than 131,072 documents). The exhaustive top 10 of each set is computed first (10-20
minutes a set of 20 queries at 100k on 2 cores) and kept in ``RUN/truth-SET.json`` for the next run.

    python benchmarks/recall_trade_bench.py RUN [--sets usual hard topic short] [--settings 256 256c 128c 64c]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from store_bench import SET_FILTERS

from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search import centroids


def _truth(store: MultiVectorStore, name: str, queries: list[np.ndarray], path: Path) -> list[set[str]]:
    """Each query's exhaustive top 10 (read from ``path`` when it holds as many, else computed and written there)."""
    if path.is_file():
        saved = json.loads(path.read_text())
        if len(saved) == len(queries):
            return [set(t) for t in saved]
    started = time.perf_counter()
    top = [[h.id for h in store.search(q, top_k=10, exhaustive=True, where=SET_FILTERS.get(name))] for q in queries]
    path.write_text(json.dumps(top))
    print(f"{name}: exhaustive top 10 of {len(queries)} queries in {time.perf_counter() - started:.0f} s -> {path}",
          flush=True)
    return [set(t) for t in top]


def _setting(text: str) -> tuple[int, bool]:
    coarse = text.endswith("c")
    return int(text.removesuffix("c")), coarse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a folder kept by store_bench.py --keep (store/ and queries-*.npy)")
    ap.add_argument("--sets", nargs="+", default=["usual", "hard", "topic", "short"], help="query sets to run")
    ap.add_argument("--settings", nargs="+", default=["256", "256c", "128", "128c", "64c"],
                    help="n_candidates, with c to force the coarse pass (default: 256 256c 128 128c 64c)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over every setting, alternating their order")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = [_setting(s) for s in args.settings]
    sets = {name: list(np.load(args.run / f"queries-{name}.npy", allow_pickle=True)) for name in args.sets}
    readers = {nc: MultiVectorStore(args.run / "store", n_candidates=nc) for nc in {nc for nc, _ in settings}}
    first = next(iter(readers.values()))
    truth = {name: _truth(first, name, qs, args.run / f"truth-{name}.json") for name, qs in sets.items()}
    full_scan_max = centroids.FULL_SCAN_MAX
    results: dict[str, dict[str, Any]] = {}
    try:
        for store in readers.values():  # kernel choice, page-in
            for q in sets[args.sets[0]][:3]:
                store.search(q, top_k=10)
        for rnd in range(args.rounds):
            for nc, coarse in settings if rnd % 2 == 0 else settings[::-1]:
                centroids.FULL_SCAN_MAX = 0 if coarse else full_scan_max
                label = f"{nc}{' coarse' if coarse else ''}"
                for name, queries in sets.items():
                    lat, recall = [], []
                    for q, best in zip(queries, truth[name]):
                        t = time.perf_counter()
                        hits = readers[nc].search(q, top_k=10, where=SET_FILTERS.get(name))
                        lat.append(time.perf_counter() - t)
                        recall.append(len(best & {h.id for h in hits}) / max(1, len(best)))
                    row = results.setdefault(label, {}).setdefault(name, {"p50": [], "p90": [], "recall": []})
                    row["p50"].append(round(statistics.median(lat) * 1000, 1))
                    row["p90"].append(round(float(np.percentile(lat, 90)) * 1000, 1))
                    row["recall"].append(round(statistics.mean(recall), 3))
                    print(f"round {rnd} | {label:>12} | {name:<10} p50 {row['p50'][-1]:7.1f}  p90 {row['p90'][-1]:7.1f}  "
                          f"recall@10 {row['recall'][-1]:.3f}", flush=True)
    finally:
        centroids.FULL_SCAN_MAX = full_scan_max
        for store in readers.values():
            store.close()
    print("\nsetting      | " + " | ".join(f"{n}: p50 ms, recall@10" for n in args.sets))
    for label, by_set in results.items():
        cells = [f"{min(r['p50']):.0f}-{max(r['p50']):.0f}, {statistics.mean(r['recall']):.3f}" for r in by_set.values()]
        print(f"{label:<12} | " + " | ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
