"""The store itself on real token vectors: embedded against a ``chroma run`` server, same documents, same queries.

Where ``search_bench.py`` measures the search over rows held in memory, this inserts the real-vector corpus
(``real_vectors.py``, unpooled as new stores keep it, or ``--pool-factor 2``) into real stores through
``MultiVectorStore.add``: one embedded, one on a ``chroma run`` server on loopback (it ships with chromadb). A
reader then opens each store with an empty local cache, so everything it searches comes back from Chroma, and
runs every query set (the filtered ones through ``where``), then every set again on the now warm cache. Recall@10
is of the exhaustive MaxSim ranking over the same int8 rows (``search_bench``'s truth, cached), so both stores
should agree with it and with each other.

    .venv/bin/python benchmarks/store_real_bench.py --docs 10000 --queries 30 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import real_vectors  # noqa: E402
import search_bench  # noqa: E402
from machine import cpu_name  # noqa: E402

log = logging.getLogger("store_real_bench")

_WHERE = {"-f5": {"bucket": {"$lt": 10}}, "-f05": {"bucket": {"$eq": 0}}}


def _fill(store: Any, ids: list[str], vectors: list[np.ndarray], buckets: np.ndarray, batch: int) -> float:
    """Insert every document; documents a second."""
    t0 = time.perf_counter()
    for s in range(0, len(ids), batch):
        e = min(len(ids), s + batch)
        store.add(ids[s:e], vectors[s:e], [{"source": f"/data/{i}.pdf", "bucket": int(b)}
                                          for i, b in zip(ids[s:e], buckets[s:e])])
        if (e // batch) % 20 == 0:
            log.info("%d of %d documents stored", e, len(ids))
    return len(ids) / (time.perf_counter() - t0)


def _searches(store: Any, sets: dict[str, tuple[list, Any]], truth: dict[str, list[list[str]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (qs, _) in sets.items():
        where = next((w for suffix, w in _WHERE.items() if name.endswith(suffix)), None)
        lat, rec, tops = [], [], []
        for q, best in zip(qs, truth[name]):
            t0 = time.perf_counter()
            got = [h.id for h in store.search(q, top_k=10, where=where)]
            lat.append(time.perf_counter() - t0)
            rec.append(len(set(got) & set(best)) / max(1, len(best)))
            tops.append(got)
        out[name] = {"recall10": statistics.mean(rec), "p50_ms": 1000 * statistics.median(lat),
                     "p90_ms": 1000 * float(np.percentile(lat, 90)), "tops": tops}
    return out


def run(path: Path, server: tuple[str, int] | None, ids: list[str], vectors: list[np.ndarray], buckets: np.ndarray,
        sets: dict[str, tuple[list, Any]], truth: dict[str, list[list[str]]], args: argparse.Namespace
        ) -> dict[str, Any]:
    from docpc_retrievers.store.multivector import MultiVectorStore

    where = {} if server is None else {"host": server[0], "port": server[1], "collection": "bench"}
    with MultiVectorStore(path, writable=True, **where) as store:
        store.set_settings({"encoder": {"model_id": "real-vectors"}, "index": {"pool_factor": args.pool_factor}})
        rate = _fill(store, ids, vectors, buckets, args.batch)
    shutil.rmtree(path / "cache", ignore_errors=True)  # a reader elsewhere: everything comes from Chroma
    t0 = time.perf_counter()
    with MultiVectorStore(path, **where) as store:
        store.count()
        store.search(sets[next(iter(sets))][0][0], top_k=10)  # the first search loads every document
        load_s = time.perf_counter() - t0
        result = _searches(store, sets, truth)
        warm = _searches(store, sets, truth)  # the same queries again: every candidate's rows now cached
    return {"insert_docs_per_s": rate, "open_and_load_s": load_s, "sets": result, "warm": warm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--pool-factor", type=int, choices=(1, 2), default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cache", type=Path, default=real_vectors.DEFAULT_CACHE)
    ap.add_argument("--workdir", type=Path, default=None, help="where the stores go (a temporary folder)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.corpus = "real"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ids, vectors, buckets, sets = search_bench.real_sets(args)
    truth = search_bench.cached_truth(args, sets, search_bench.StoredRows(ids, vectors))
    from docpc_retrievers.testing.chroma_server import chroma_server

    result: dict[str, Any] = {"cpu": cpu_name(), "docs": len(ids), "pool_factor": args.pool_factor, "runs": {}}
    tmp = Path(tempfile.mkdtemp(prefix="docpc-store-real-", dir=args.workdir))
    try:
        log.info("embedded store")
        result["runs"]["embedded"] = run(tmp / "embedded", None, ids, vectors, buckets, sets, truth, args)
        shutil.rmtree(tmp / "embedded", ignore_errors=True)
        log.info("chroma run server on loopback")
        with chroma_server(tmp / "served") as srv:
            result["runs"]["chroma run"] = run(tmp / "client", (srv.host, srv.port), ids, vectors, buckets, sets,
                                               truth, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    same = {name: result["runs"]["embedded"]["sets"][name]["tops"] == result["runs"]["chroma run"]["sets"][name]["tops"]
            for name in sets}
    lines = [f"real vectors, {len(ids):,} documents, pool factor {args.pool_factor}, CPU: {result['cpu']}", "",
             "| set | embedded: recall@10, p50 / p90 ms | chroma run: recall@10, p50 / p90 ms | same top 10s "
             "| second pass, embedded / chroma run: p50 / p90 ms |",
             "|---|---|---|---|---|"]
    for name in sets:
        cells = [f"{r['sets'][name]['recall10']:.3f}, {r['sets'][name]['p50_ms']:.1f} / {r['sets'][name]['p90_ms']:.1f}"
                 for r in result["runs"].values()]
        warm = " / ".join(f"{r['warm'][name]['p50_ms']:.1f} / {r['warm'][name]['p90_ms']:.1f}"
                          for r in result["runs"].values())
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {'yes' if same[name] else 'no'} | {warm} |")
    for where, r in result["runs"].items():
        lines.append(f"\n{where}: inserted {r['insert_docs_per_s']:.1f} documents/s; opened and loaded from Chroma "
                     f"alone in {r['open_and_load_s']:.1f} s")
    print("\n".join(lines))
    if args.json:
        for r in result["runs"].values():
            for m in [*r["sets"].values(), *r["warm"].values()]:
                m.pop("tops")
        result["same_top10"] = same
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
