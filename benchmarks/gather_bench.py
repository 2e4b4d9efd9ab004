"""How the approximate pass copies candidates' rows out of the mapped cache: numpy's concatenate against torch's.

The approximate pass (store/search/exact.py) scores a query's candidates in blocks on two threads; each block first
copies its documents' int8 rows out of the memory-mapped cache into a scratch buffer (store/payload.py). numpy's
concatenate holds the GIL through that copy, so the two threads took turns; torch's releases it. This builds a
real local cache (packed vectors of random documents, appended to a file and mapped back), then runs the same
approximate pass over the same random candidates with each copy, alternating, and prints both side by side with
their ratio and a check that the scores agree.

    python benchmarks/gather_bench.py [--docs 20000] [--rows 380] [--candidates 1280] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20_000, help="documents in the cache (380 rows: 1 GB at 20k)")
    parser.add_argument("--rows", type=int, default=380)
    parser.add_argument("--candidates", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    from docpc_retrievers.blas_threads import single_blas_thread
    from docpc_retrievers.store import payload
    from docpc_retrievers.store.cache import VectorCache
    from docpc_retrievers.store.codec import pack_vectors
    from docpc_retrievers.store.search.exact import (
        SHORTLIST_THREADS,
        approximate_scores,
    )

    dim, rng = 128, np.random.default_rng(0)
    torch_gather = payload._gather

    def numpy_gather(pieces: list[np.ndarray], out: np.ndarray) -> None:
        np.concatenate(pieces, out=out)

    with tempfile.TemporaryDirectory() as tmp:
        cache = VectorCache(Path(tmp), "bench")
        ids = [f"doc{i}" for i in range(args.docs)]
        for start in range(0, args.docs, 1000):
            batch = {}
            for doc_id in ids[start : start + 1000]:
                vectors = rng.standard_normal((args.rows, dim)).astype(np.float32)
                batch[doc_id] = pack_vectors(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
            cache.put(batch)
        cache.save()
        counts = dict.fromkeys(ids, args.rows)
        reader = payload.VectorReader(None, cache, Path(tmp), dim, counts, {})  # type: ignore[arg-type]  # no misses
        print(f"{args.docs} documents of {args.rows} rows cached, {args.candidates} candidates per query, "
              f"{SHORTLIST_THREADS} threads")
        for tokens in (5, 25):
            timings: dict[str, list[float]] = {"numpy concatenate": [], "torch cat": []}
            scores: dict[str, np.ndarray] = {}
            for repeat in range(args.repeats + 1):
                query = rng.standard_normal((tokens, dim)).astype(np.float32)
                candidates = [ids[i] for i in rng.choice(args.docs, args.candidates, replace=False)]
                for name, gather in (("numpy concatenate", numpy_gather), ("torch cat", torch_gather)):
                    payload._gather = gather
                    with single_blas_thread():
                        start = time.perf_counter()
                        scores[name] = approximate_scores(query, candidates, reader)
                        if repeat:  # the first round maps the pages
                            timings[name].append(time.perf_counter() - start)
                if not np.array_equal(scores["numpy concatenate"], scores["torch cat"]):
                    raise SystemExit("the two copies gave different scores")
            payload._gather = torch_gather
            before, now = (statistics.median(v) * 1e3 for v in timings.values())
            print(f"{tokens:>3} tokens: numpy concatenate {before:6.1f} ms, torch cat {now:6.1f} ms, "
                  f"ratio {before / now:4.2f}x (medians of {args.repeats}, same scores)")
        cache.close()


if __name__ == "__main__":
    main()
