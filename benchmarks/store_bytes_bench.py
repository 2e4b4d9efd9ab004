"""Bytes of a store folder by part, unpooled (pool factor 1, the default) against pooled by 2, in one run.

Real token vectors (benchmarks/real_vectors.py's cache; pooled by 2 as the indexer pools), inserted into fresh
embedded stores, then the folder taken apart: Chroma's SQLite file by table and index (SQLite's ``dbstat``: the
records, their metadata and its indexes, the full-text index over the stored strings, the write log
``embeddings_queue``, free pages), its write-ahead log, each collection's vector-index folder, and the local cache.

    .venv/bin/python benchmarks/store_bytes_bench.py --docs 2000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_name  # noqa: E402


def _vectors(n: int, factor: int) -> list[np.ndarray]:
    import real_vectors
    import search_bench

    corpus = real_vectors.build(5000 if n <= 5000 else 10_000, real_vectors.DEFAULT_CACHE)
    if factor == 1:
        return [np.asarray(v, dtype=np.float32) for v in corpus.vectors[:n]]
    key = f"{corpus.manifest['units_key']}-{corpus.manifest['documents']}"
    return search_bench.pooled(corpus.vectors, real_vectors.DEFAULT_CACHE / f"pooled-{key}.npz")[:n]


def _group(name: str) -> str:
    if name.startswith("embedding_fulltext_search"):
        return "full-text index over stored strings"
    if name.startswith("embeddings_queue"):
        return "write log (embeddings_queue)"
    if name.startswith("embedding_metadata") or name.startswith("sqlite_autoindex_embedding_metadata"):
        return "metadata rows and their indexes"
    if name.startswith("embeddings") or name.startswith("sqlite_autoindex_embeddings"):
        return "records (embeddings table)"
    return "other tables"


def parts(folder: Path, n: int) -> dict[str, float]:
    """Bytes per document of each part of the store folder."""
    out: dict[str, float] = defaultdict(float)
    chroma = folder / "chroma"
    db = chroma / "chroma.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        for name, size in con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            out[f"sqlite: {_group(name)}"] += size
        page = con.execute("PRAGMA page_size").fetchone()[0]
        out["sqlite: free pages"] += page * con.execute("PRAGMA freelist_count").fetchone()[0]
    for extra in ("chroma.sqlite3-wal", "chroma.sqlite3-shm"):
        if (chroma / extra).exists():
            out["sqlite write-ahead log"] += (chroma / extra).stat().st_size
    for seg in chroma.iterdir():
        if seg.is_dir():
            out["vector-index folders (hnsw)"] += sum(p.stat().st_size for p in seg.rglob("*") if p.is_file())
    cache = folder / "cache"
    out["local cache"] += sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
    out["whole folder"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {k: v / n for k, v in sorted(out.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 2], help="pool factors to build stores with")
    ap.add_argument("--pool-timing-docs", type=int, default=300,
                    help="documents whose pooling is timed (pooling itself is cached; its time is added per document)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import docpc_retrievers
    from docpc_retrievers.encoders.pooling import pool_vectors
    from docpc_retrievers.store.multivector import MultiVectorStore

    print(f"docpc_retrievers from {Path(docpc_retrievers.__file__).parent}", file=sys.stderr)
    results: dict[str, dict[str, float]] = {}
    vectors_per_doc: dict[str, float] = {}
    insert_rates: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="docpc-store-bytes-") as tmp:
        for factor in args.factors:
            docs = _vectors(args.docs, factor)
            pool_s = 0.0
            if factor > 1:  # what pooling costs a document at indexing time, timed on the unpooled rows
                raw = _vectors(min(args.pool_timing_docs, args.docs), 1)
                t0 = time.perf_counter()
                for v in raw:
                    pool_vectors(v, factor)
                pool_s = (time.perf_counter() - t0) / len(raw)
            folder = Path(tmp) / f"pool{factor}"
            t0 = time.perf_counter()
            with MultiVectorStore(folder, writable=True) as store:
                for s in range(0, len(docs), args.batch):
                    ids = [f"{i:032x}" for i in range(s, min(s + args.batch, len(docs)))]
                    store.add(ids, docs[s : s + args.batch],
                              [{"source": f"/data/docs/{i}.pdf", "title": f"document {i[-6:]}"} for i in ids])
            add_s = (time.perf_counter() - t0) / len(docs)
            insert_rates[f"pool {factor}"] = {"store_ms_per_doc": add_s * 1e3, "pool_ms_per_doc": pool_s * 1e3,
                                              "docs_per_s_with_pooling": 1 / (add_s + pool_s)}
            results[f"pool {factor}"] = parts(folder, len(docs))
            vectors_per_doc[f"pool {factor}"] = float(np.mean([len(d) for d in docs]))
    names = sorted({k for r in results.values() for k in r})
    print(f"{args.docs} real-vector documents, CPU: {cpu_name()}; KiB per document (vectors per document: "
          + ", ".join(f"{k} {v:.0f}" for k, v in vectors_per_doc.items()) + ")")
    print(f"{'part':48s}" + "".join(f"{k:>10s}" for k in results))
    for name in names:
        print(f"{name:48s}" + "".join(f"{r.get(name, 0.0) / 1024:10.1f}" for r in results.values()))
    for k, r in insert_rates.items():
        print(f"{k}: store {r['store_ms_per_doc']:.2f} ms a document + pooling {r['pool_ms_per_doc']:.2f} ms = "
              f"{r['docs_per_s_with_pooling']:.1f} documents/s")
    if args.json:
        args.json.write_text(json.dumps({"docs": args.docs, "cpu": cpu_name(), "vectors_per_doc": vectors_per_doc,
                                         "bytes_per_doc": results, "insert": insert_rates}, indent=1))


if __name__ == "__main__":
    main()
