"""Insert rate and bytes on disk per document, this checkout against others, side by side in one run.

Each checkout (a folder holding a ``docpc_retrievers`` package; ``.`` is this one) inserts the same documents into
a fresh embedded store in its own process, in turns, ``--rounds`` times. Documents are real token vectors when
their cache exists (benchmarks/real_vectors.py, pooled by 2 as the indexer pools), else store_bench's synthetic
ones. Bytes on disk count the whole store folder after close (Chroma's files and the cache).

    git worktree add /tmp/before <commit>
    python benchmarks/insert_bench.py . /tmp/before --docs 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def documents(n: int, real: bool) -> list[np.ndarray]:
    sys.path.insert(0, str(HERE))
    if real:
        import real_vectors
        import search_bench

        corpus = real_vectors.build(10_000, real_vectors.DEFAULT_CACHE)
        key = f"{corpus.manifest['units_key']}-{corpus.manifest['documents']}"
        return search_bench.pooled(corpus.vectors, real_vectors.DEFAULT_CACHE / f"pooled-{key}.npz")[:n]
    from store_bench import SyntheticCorpus

    corpus = SyntheticCorpus(seed=0, skew=1.1)
    return [corpus.document(380) for _ in range(n)]


def insert(folder: Path, vectors_file: Path, batch: int) -> dict[str, float]:
    """In this process: the checkout's store takes the documents ``batch`` at a time."""
    from docpc_retrievers.store.multivector import MultiVectorStore

    with np.load(vectors_file) as z:
        vectors = np.split(z["rows"], np.cumsum(z["lengths"])[:-1])
    started = time.perf_counter()
    with MultiVectorStore(folder, writable=True) as store:
        for s in range(0, len(vectors), batch):
            ids = [f"{i:032x}" for i in range(s, min(s + batch, len(vectors)))]
            store.add(ids, vectors[s : s + batch], [{"source": f"/d/{i}.pdf", "title": i[-6:]} for i in ids])
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"docs_per_s": len(vectors) / seconds, "bytes_per_doc": size / len(vectors)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkouts", nargs="*", default=["."])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--synthetic", action="store_true", help="synthetic vectors even where real ones are cached")
    ap.add_argument("--run", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(insert(Path(args.run[0]), Path(args.run[1]), args.batch)))
        return
    from machine import cpu_name

    real = not args.synthetic and real_vectors_cached()
    docs = documents(args.docs, real)
    results: dict[str, list[dict[str, float]]] = {c: [] for c in args.checkouts}
    with tempfile.TemporaryDirectory(prefix="docpc-insert-bench-") as tmp:
        vectors_file = Path(tmp) / "docs.npz"
        np.savez(vectors_file, rows=np.concatenate(docs).astype(np.float32), lengths=[len(d) for d in docs])
        for r in range(args.rounds):
            for c in args.checkouts:
                env = dict(os.environ, PYTHONPATH=str(Path(c).resolve()), ANONYMIZED_TELEMETRY="False")
                store = Path(tmp) / f"store-{r}-{abs(hash(c))}"
                out = subprocess.run([sys.executable, __file__, "--run", str(store), str(vectors_file),
                                      "--batch", str(args.batch)], env=env, capture_output=True, text=True, check=True)
                results[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.docs} {'real' if real else 'synthetic'} documents of {statistics.mean(len(d) for d in docs):.0f} "
          f"vectors, batches of {args.batch}, {args.rounds} rounds alternating; CPU: {cpu_name()}")
    base = statistics.median(r["docs_per_s"] for r in results[args.checkouts[0]])
    for c, runs in results.items():
        rate = statistics.median(r["docs_per_s"] for r in runs)
        size = statistics.median(r["bytes_per_doc"] for r in runs)
        print(f"{c}: {rate:.1f} documents/s ({rate / base:.2f}x the first), {size / 1024:.1f} KiB per document on disk")


def real_vectors_cached() -> bool:
    import real_vectors

    return any(real_vectors.DEFAULT_CACHE.glob("*/manifest.json"))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
