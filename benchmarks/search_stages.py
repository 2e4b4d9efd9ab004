"""Where a search's time goes, stage by stage, on real token vectors: the summaries, the approximate int8 pass (and
within it, copying the candidates' rows), and the exact float32 pass over the shortlist.

Run once per pool factor to see which stage twice the rows make slower:

    python benchmarks/search_stages.py --docs 10000 --queries 30 --pool-factor 1
    python benchmarks/search_stages.py --docs 10000 --queries 30 --pool-factor 2

Each stage is timed by wrapping the function the search calls (``CentroidIndex.top``, ``approximate_scores``,
``exact_scores``, the rows' copy); copy time is summed over the pass's threads, so it can exceed the pass's own.
Rows come from search_bench's in-memory ``StoredRows`` (a numpy copy, where the store's cache copies with torch).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_vectors
import search_bench
import search_systems
from machine import cpu_name

from docpc_retrievers.store.search import centroids, ranking

STAGES = ("summaries", "approximate pass", "rows copied (threads' sum)", "exact shortlist")


@contextlib.contextmanager
def timed(spent: dict[str, float], owner: Any, attr: str, stage: str) -> Iterator[None]:
    """``owner.attr`` replaced by a wrapper adding its wall time to ``spent[stage]``."""
    original: Callable[..., Any] = getattr(owner, attr)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[stage] += time.perf_counter() - start

    setattr(owner, attr, wrapper)
    try:
        yield
    finally:
        setattr(owner, attr, original)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--pool-factor", type=int, choices=(1, 2), default=1)
    ap.add_argument("--cache", type=Path, default=real_vectors.DEFAULT_CACHE)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ids, vectors, _, sets = search_bench.real_sets(argparse.Namespace(
        corpus="real", docs=args.docs, queries=args.queries, cache=args.cache, seed=0, pool_factor=args.pool_factor))
    rows = search_bench.StoredRows(ids, vectors)
    search = search_systems.build("search", rows, ids, vectors)
    spent: dict[str, float] = collections.defaultdict(float)
    print(f"real vectors, {len(ids):,} documents, pool factor {args.pool_factor} ({rows.codes.shape[0]:,} rows), "
          f"CPU: {cpu_name()}; mean ms a query")
    with contextlib.ExitStack() as stack:
        stack.enter_context(timed(spent, centroids.CentroidIndex, "top", STAGES[0]))
        stack.enter_context(timed(spent, ranking, "approximate_scores", STAGES[1]))
        stack.enter_context(timed(spent, rows, "rows", STAGES[2]))
        stack.enter_context(timed(spent, ranking, "exact_scores", STAGES[3]))
        search(sets["short"][0][0], None)  # warm: first-use costs are not a query's
        for name in ("short", "sentence"):
            per: dict[str, list[float]] = collections.defaultdict(list)
            total: list[float] = []
            for q in sets[name][0]:
                spent.clear()
                start = time.perf_counter()
                search(q, None)
                total.append(time.perf_counter() - start)
                for stage in STAGES:
                    per[stage].append(spent[stage])
            tokens = statistics.mean(len(q) for q in sets[name][0])
            print(f"{name} ({len(total)} queries, {tokens:.1f} tokens): whole search p50 "
                  f"{1e3 * statistics.median(total):.1f}, mean {1e3 * statistics.mean(total):.1f}")
            for stage in STAGES:
                print(f"  {stage:<28}{1e3 * float(np.mean(per[stage])):8.1f}")


if __name__ == "__main__":
    main()
