"""Store benchmark: insert rate, two-stage search latency and recall, bytes on disk.

Synthetic ColQwen-like embeddings: 760 unit vectors x 128 dims per document,
drawn around a few hundred shared topic centroids (each document mixes a few
topics); queries are 20-30 noisy copies of a target document's vectors.
Prints every figure beside its target. Run:

    .venv/bin/python benchmarks/store_bench.py            # full: 2,000 insert, 10,000 search
    .venv/bin/python benchmarks/store_bench.py --docs 2000 --insert-docs 500 --queries 10   # quick
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from docpc_retrievers.store.multivector import MultiVectorStore

DIM = 128
VECTORS_PER_DOC = 760


class SyntheticCorpus:
    """Topic-structured unit vectors, reproducible from a seed."""

    def __init__(self, n_topics: int = 300, seed: int = 0, noise: float = 0.7) -> None:
        self.rng = np.random.default_rng(seed)
        c = self.rng.standard_normal((n_topics, DIM)).astype(np.float32)
        self.centroids = c / np.linalg.norm(c, axis=1, keepdims=True)
        self.noise = noise

    def _unit(self, x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    def document(self) -> np.ndarray:
        topics = self.rng.choice(len(self.centroids), size=int(self.rng.integers(2, 7)), replace=False)
        weights = self.rng.dirichlet(np.ones(len(topics)))
        picks = self.rng.choice(topics, size=VECTORS_PER_DOC, p=weights)
        n = self.rng.standard_normal((VECTORS_PER_DOC, DIM)).astype(np.float32)
        return self._unit(self.centroids[picks] + self.noise * self._unit(n))

    def query(self, target: np.ndarray) -> np.ndarray:
        t = int(self.rng.integers(20, 31))
        rows = target[self.rng.choice(len(target), size=t, replace=False)]
        n = self.rng.standard_normal((t, DIM)).astype(np.float32)
        return self._unit(rows + 0.5 * self._unit(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000, help="documents in the search benchmark")
    ap.add_argument("--insert-docs", type=int, default=2_000, help="documents timed for the insert rate")
    ap.add_argument("--batch", type=int, default=64, help="documents per add() call (one commit)")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=None, help="override the store's n_candidates")
    ap.add_argument("--centroids", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    corpus = SyntheticCorpus(seed=args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="docpc-store-bench-"))
    try:
        store = MultiVectorStore(tmp / "store", writable=True, n_centroids=args.centroids)
        if args.candidates:
            store.n_candidates = args.candidates
        targets: dict[str, np.ndarray] = {}
        insert_seconds = 0.0
        n_done = 0
        while n_done < args.docs:
            n = min(args.batch, args.docs - n_done)
            ids = [f"doc-{n_done + i:06d}" for i in range(n)]
            vecs = [corpus.document() for _ in range(n)]
            metas = [{"source": f"/data/{i}.pdf", "title": i, "total_pages": 10, "selected_pages": [0, 1, 2, 3]} for i in ids]
            t0 = time.perf_counter()
            store.add(ids, vecs, metas)
            dt = time.perf_counter() - t0
            if n_done < args.insert_docs:
                insert_seconds += dt
            for i, v in zip(ids, vecs):
                if len(targets) < args.queries and corpus.rng.random() < 0.05:
                    targets[i] = v
            n_done += n
        insert_rate = min(args.insert_docs, args.docs) / insert_seconds
        bytes_total = store.bytes_on_disk()
        store.close()

        # Reopen read-only, as a search process would.
        t0 = time.perf_counter()
        reader = MultiVectorStore(tmp / "store", n_centroids=args.centroids)
        if args.candidates:
            reader.n_candidates = args.candidates
        reader.count()
        open_seconds = time.perf_counter() - t0
        latencies, recalls, exhaustive_latencies = [], [], []
        for target_id, target in targets.items():
            q = corpus.query(target)
            t0 = time.perf_counter()
            hits = reader.search(q, args.top_k)
            latencies.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            exact = reader.search(q, args.top_k, exhaustive=True)
            exhaustive_latencies.append(time.perf_counter() - t0)
            recalls.append(len({h.id for h in hits} & {h.id for h in exact}) / max(len(exact), 1))
        raw_fp32 = VECTORS_PER_DOC * DIM * 4
        per_doc = bytes_total / args.docs
        p50 = statistics.median(latencies) * 1000
        print(f"store benchmark: {args.docs} documents x {VECTORS_PER_DOC} vectors x {DIM} dims, "
              f"{len(targets)} queries, top-{args.top_k}; first stage: {args.centroids} centroids/doc -> "
              f"{reader.n_candidates} candidates screened in fp16 -> top-{args.top_k}+{reader.rescore_margin} scored exactly")
        print(f"insert rate          {insert_rate:8.1f} docs/s over {min(args.insert_docs, args.docs)} docs   (target >= 50)   {'OK' if insert_rate >= 50 else 'MISS'}")
        print(f"search p50           {p50:8.1f} ms  (p90 {np.percentile(latencies, 90) * 1000:.1f} ms)   (target <= 100)   {'OK' if p50 <= 100 else 'MISS'}")
        print(f"recall@{args.top_k} vs exhaustive {statistics.mean(recalls):8.4f}   (target >= 0.99)   {'OK' if statistics.mean(recalls) >= 0.99 else 'MISS'}")
        print(f"exhaustive p50       {statistics.median(exhaustive_latencies) * 1000:8.1f} ms  (speed-up {statistics.median(exhaustive_latencies) / statistics.median(latencies):.1f}x)")
        print(f"bytes on disk / doc  {per_doc:10.0f}  vs fp32 raw {raw_fp32}  ({per_doc / raw_fp32:.2f}x)")
        print(f"reopen + load        {open_seconds:8.2f} s")
        reader.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
