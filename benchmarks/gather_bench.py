"""How the approximate pass copies candidates' rows out of the mapped cache: numpy's concatenate against torch's.

The approximate pass (store/search/exact.py) scores a query's candidates in blocks on two threads; each block first
copies its documents' int8 rows out of the memory-mapped cache into a scratch buffer (store/payload.py). numpy's
concatenate holds the GIL through that copy, so the two threads took turns; torch's releases it. This builds a
real local cache (packed vectors of random documents, appended to a file and mapped back), then runs the same
approximate pass over the same random candidates with each copy, alternating, and prints both side by side with
their ratio and a check that the scores agree.

The same pass with torch's copy is also this machine's speed check (:func:`machine_check`): its time follows the
memory bandwidth the search's latencies depend on, which on the shared benchmark machine moved by up to 40% from
one day to the next for the same code and data. ``store_bench.py`` prints it beside its latencies.

    python benchmarks/gather_bench.py [--docs 20000] [--rows 380] [--candidates 1280] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

REFERENCE_MS = {5: 15.1, 25: 17.9}
"""The pass's torch-copy medians (5 and 25 query tokens, the defaults below) on the 2-core benchmark machine on
2026-11-25, the day the search's latency targets were tuned and met (docs/store.md)."""

Gather = Callable[[list[np.ndarray], np.ndarray], None]


@contextmanager
def random_cache(docs: int, rows: int, dim: int = 128, seed: int = 0) -> Iterator[tuple[Any, list[str]]]:
    """A real local cache of ``docs`` random documents of ``rows`` unit vectors, in a temporary folder: its
    :class:`~docpc_retrievers.store.payload.VectorReader` and the documents' ids."""
    from docpc_retrievers.store import payload
    from docpc_retrievers.store.cache import VectorCache
    from docpc_retrievers.store.codec import pack_vectors

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        cache = VectorCache(Path(tmp), "bench")
        ids = [f"doc{i}" for i in range(docs)]
        for start in range(0, docs, 1000):
            batch = {}
            for doc_id in ids[start : start + 1000]:
                vectors = rng.standard_normal((rows, dim)).astype(np.float32)
                batch[doc_id] = pack_vectors(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
            cache.put(batch)
        cache.save()
        counts = dict.fromkeys(ids, rows)
        try:
            yield payload.VectorReader(None, cache, Path(tmp), dim, counts, {}), ids  # type: ignore[arg-type]  # no misses
        finally:
            cache.close()


def timed_passes(reader: Any, ids: list[str], gathers: Mapping[str, Gather], *, tokens: int, candidates: int,
                 repeats: int, seed: int = 0) -> dict[str, float]:
    """Median ms of the approximate pass over ``candidates`` random documents per ``gathers`` copy, alternating
    (each round's first pass maps its pages and is not timed); SystemExit if the copies' scores differ."""
    from docpc_retrievers.blas_threads import single_blas_thread
    from docpc_retrievers.store import payload
    from docpc_retrievers.store.search.exact import approximate_scores

    rng, kept = np.random.default_rng(seed), payload._gather
    timings: dict[str, list[float]] = {name: [] for name in gathers}
    try:
        for repeat in range(repeats + 1):
            query = rng.standard_normal((tokens, reader.dim)).astype(np.float32)
            chosen = [ids[i] for i in rng.choice(len(ids), candidates, replace=False)]
            scores = []
            for name, gather in gathers.items():
                payload._gather = gather
                with single_blas_thread():
                    start = time.perf_counter()
                    scores.append(approximate_scores(query, chosen, reader))
                    if repeat:
                        timings[name].append(time.perf_counter() - start)
            if any(not np.array_equal(scores[0], s) for s in scores[1:]):
                raise SystemExit("the copies gave different scores")
    finally:
        payload._gather = kept
    return {name: statistics.median(v) * 1e3 for name, v in timings.items()}


def machine_check(docs: int = 20_000, rows: int = 380, candidates: int = 1280, repeats: int = 20) -> dict[str, float]:
    """This machine's speed: the approximate pass (torch's copy, as searches run it) at 5 and 25 query tokens, in
    ms, and ``slower``: their mean ratio to :data:`REFERENCE_MS` (1.3: 30% slower than the reference day)."""
    from docpc_retrievers.store import payload

    out: dict[str, float] = {}
    with random_cache(docs, rows) as (reader, ids):
        for tokens in REFERENCE_MS:
            got = timed_passes(reader, ids, {"torch": payload._gather}, tokens=tokens, candidates=candidates,
                               repeats=repeats)
            out[f"{tokens} tokens ms"] = round(got["torch"], 1)
    out["slower"] = round(statistics.mean(out[f"{t} tokens ms"] / ms for t, ms in REFERENCE_MS.items()), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20_000, help="documents in the cache (380 rows: 1 GB at 20k)")
    parser.add_argument("--rows", type=int, default=380)
    parser.add_argument("--candidates", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    from docpc_retrievers.store import payload
    from docpc_retrievers.store.search.exact import SHORTLIST_THREADS

    def numpy_gather(pieces: list[np.ndarray], out: np.ndarray) -> None:
        np.concatenate(pieces, out=out)

    gathers: dict[str, Gather] = {"numpy concatenate": numpy_gather, "torch cat": payload._gather}
    with random_cache(args.docs, args.rows) as (reader, ids):
        print(f"{args.docs} documents of {args.rows} rows cached, {args.candidates} candidates per query, "
              f"{SHORTLIST_THREADS} threads")
        for tokens, reference in REFERENCE_MS.items():
            before, now = timed_passes(reader, ids, gathers, tokens=tokens, candidates=args.candidates,
                                       repeats=args.repeats, seed=tokens).values()
            print(f"{tokens:>3} tokens: numpy concatenate {before:6.1f} ms, torch cat {now:6.1f} ms, "
                  f"ratio {before / now:4.2f}x (medians of {args.repeats}, same scores; the reference day's torch "
                  f"cat: {reference} ms)")


if __name__ == "__main__":
    main()
