"""A store in shards against the same documents in one store, in one run: identical top 10, p50 / p90, and what the
merge itself costs.

Both stores hold the same synthetic documents (store_bench's skewed topic generator, 760 vectors of 128 dimensions
a document, as a 2x2 grid gives); each query is answered by both, and the sharded answer is compared with the
single store's id by id. The merge's own cost is timed apart (``merge_top_k`` over the shards' answers).

    python benchmarks/shards_bench.py --docs 10000 --shards 4                       # embedded, in this process
    python benchmarks/shards_bench.py --docs 100000 --shards 4 --chroma-run        # behind a `chroma run` it starts
    python benchmarks/shards_bench.py --docs 10000 --shards 4 --chroma-run --searchers   # and a reader that holds
                                                                    # nothing, asking one `docpc serve-shard` a shard

With ``--searchers`` a third column is a reader with no data of its own: its open time, its first answer's time and
the bytes it received for it, and its p50 / p90 against the others.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name
from store_bench import SyntheticCorpus

from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.shards import ShardedStore, merge_top_k

log = logging.getLogger("shards_bench")


def fill(stores: list[Any], corpus: SyntheticCorpus, n_docs: int, vectors: int = 760,
         batch: int = 250) -> list[np.ndarray]:
    """The same documents into every store, a batch at a time; returns a few documents to draw queries from."""
    targets: list[np.ndarray] = []
    for start in range(0, n_docs, batch):
        stop = min(n_docs, start + batch)
        docs = [corpus.document(vectors) for _ in range(start, stop)]
        ids = [f"{i:032x}" for i in range(start, stop)]
        metas = [{"source": f"/bench/{i}.pdf", "bucket": i % 20} for i in range(start, stop)]
        for store in stores:
            store.add(ids, docs, metas)
        if len(targets) < 64:
            targets.append(docs[0])
        if (stop // batch) % 20 == 0:
            log.info("%d documents written", stop)
    return targets


def timed(search: Any, q: np.ndarray, **kwargs: Any) -> tuple[list[Any], float]:
    t0 = time.perf_counter()
    hits = search(q, top_k=10, **kwargs)
    return hits, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--vectors", type=int, default=760,
                    help="vectors a document (760: an unpooled 2x2 grid; about 253 with pool factor 3)")
    ap.add_argument("--sets", nargs="+", help="only these query sets (default: every set of the generator)")
    ap.add_argument("--chroma-run", action="store_true", help="both stores behind one `chroma run` it starts")
    ap.add_argument("--searchers", action="store_true",
                    help="also start one `docpc serve-shard` per shard and measure a reader that holds nothing "
                    "(needs --chroma-run: the searchers are other processes)")
    ap.add_argument("--exact", type=int, default=5,
                    help="queries a set also answered exhaustively by both stores: the merge checked where both are "
                    "exact, and each one's default answer against that truth")
    ap.add_argument("--threads", type=int,
                    help="threads each searcher searches with (default: this machine's cores shared among them)")
    ap.add_argument("--keep", type=Path,
                    help="build the stores in this folder and keep them; a later run given the same folder searches "
                    "them again without writing")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line a Chroma request otherwise
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for scratch in ("thin", "warm-up", "replica", "other-writer"):
            shutil.rmtree(args.keep / scratch, ignore_errors=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="shards-bench-"))
    built = work / "bench.json"
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.shards)
    server = None
    try:
        where: dict[str, Any] = {}
        if args.chroma_run:
            from docpc_retrievers.testing.chroma_server import ChromaServer

            server = ChromaServer(work / "chroma-data")
            server.start()
            where = {"host": server.host, "port": server.port}
        one = MultiVectorStore(work / "one", writable=True, collection="one", **where)
        sharded = ShardedStore(work / "sharded", shards=args.shards, writable=True, collection="sharded", **where)
        corpus = SyntheticCorpus(seed=0, skew=1.1)
        if built.exists():  # kept from an earlier run: the same documents, and the generator where it stood
            kept = json.loads(built.read_text())
            if (kept["docs"], kept["shards"], kept["vectors"]) != (args.docs, args.shards, args.vectors):
                raise SystemExit(f"{work} holds {kept['docs']} documents of {kept['vectors']} vectors in "
                                 f"{kept['shards']} shards")
            corpus.rng.bit_generator.state = kept["rng"]
            targets = list(np.load(work / "targets.npy"))
            log.info("searching the stores kept in %s", work)
        else:
            t0 = time.perf_counter()
            targets = fill([one, sharded], corpus, args.docs, args.vectors)
            log.info("written in %.0f s", time.perf_counter() - t0)
            if args.keep:
                np.save(work / "targets.npy", np.stack(targets))
                built.write_text(json.dumps({"docs": args.docs, "shards": args.shards, "vectors": args.vectors,
                                             "rng": corpus.rng.bit_generator.state}))
        sets = corpus.query_sets(targets[: args.queries])
        if args.sets:
            sets = {name: qs for name, qs in sets.items() if name in args.sets}
        for q in next(iter(sets.values()))[:2]:  # warm both: first-use costs are not a query's
            one.search(q, top_k=10)
            sharded.search(q, top_k=10)
        result: dict[str, Any] = {"cpu": cpu_name(), "docs": args.docs, "shards": args.shards, "vectors": args.vectors,
                                  "searcher_threads": threads if args.searchers else None,
                                  "chroma_run": args.chroma_run, "sets": {}}
        thin = None
        if args.searchers:
            if server is None:
                raise SystemExit("--searchers needs --chroma-run (the searchers are other processes)")
            procs = start_searchers(work, args.shards, server.host, server.port, threads)
            # the searchers are long-lived: warm (their shard's vectors fetched) and asked by a first reader, as a
            # running deployment's are; the reader measured next is new and holds nothing
            wait_warm([url for _, url in procs])
            with ShardedStore(work / "warm-up", searchers=[url for _, url in procs], collection="sharded",
                              **where) as warm:
                for q in next(iter(sets.values()))[:2]:
                    warm.search(q, top_k=5)
            t0 = time.perf_counter()
            thin = ShardedStore(work / "thin", searchers=[url for _, url in procs], collection="sharded", **where)
            opened = time.perf_counter() - t0
            received = count_bytes(thin)
            first_q = next(iter(sets.values()))[0]
            t0 = time.perf_counter()
            thin.search(first_q, top_k=5, with_text=True, with_vectors=True)
            result["thin_reader"] = {"open_s": opened, "first_answer_s": time.perf_counter() - t0,
                                     "first_answer_bytes": received[0]}
            log.info("thin reader: %s", result["thin_reader"])
        for name, qs in sets.items():
            kwargs = {"where": {"bucket": 0}} if name.startswith("filter") else {}
            same, t_one, t_sharded, t_merge, t_thin, same_thin = 0, [], [], [], [], 0
            exact_same, recall_one, recall_sharded = 0, [], []
            for q in qs[: args.exact]:  # both exhaustive: the merge is exact where each shard's answer is
                ea = one.search(q, top_k=10, exhaustive=True, **kwargs)
                eb = sharded.search(q, top_k=10, exhaustive=True, **kwargs)
                exact_same += [(h.id, round(h.score, 4)) for h in ea] == [(h.id, round(h.score, 4)) for h in eb]
                truth = {h.id for h in ea}
                recall_one.append(len(truth & {h.id for h in one.search(q, top_k=10, **kwargs)}) / max(1, len(truth)))
                recall_sharded.append(len(truth & {h.id for h in sharded.search(q, top_k=10, **kwargs)})
                                      / max(1, len(truth)))
            for q in qs:
                a, ta = timed(one.search, q, **kwargs)
                b, tb = timed(sharded.search, q, **kwargs)
                same += [(h.id, round(h.score, 5)) for h in a] == [(h.id, round(h.score, 5)) for h in b]
                t_one.append(ta)
                t_sharded.append(tb)
                if thin is not None:
                    c, tc = timed(thin.search, q, **kwargs)
                    same_thin += [(h.id, round(h.score, 5)) for h in c] == [(h.id, round(h.score, 5)) for h in a]
                    t_thin.append(tc)
                answers = [s.search(q, top_k=10, **kwargs) for s in sharded.shards]
                m0 = time.perf_counter()
                merge_top_k(answers, 10)
                t_merge.append(time.perf_counter() - m0)
            row = {"queries": len(qs), "identical_top10": same / len(qs),
                   "one_p50_ms": 1000 * statistics.median(t_one), "one_p90_ms": 1000 * float(np.percentile(t_one, 90)),
                   "sharded_p50_ms": 1000 * statistics.median(t_sharded),
                   "sharded_p90_ms": 1000 * float(np.percentile(t_sharded, 90)),
                   "merge_p50_ms": 1000 * statistics.median(t_merge)}
            if recall_one:
                row.update(exact_queries=len(recall_one), exhaustive_identical=exact_same / len(recall_one),
                           one_recall10=statistics.mean(recall_one), sharded_recall10=statistics.mean(recall_sharded))
            if t_thin:
                row.update(thin_identical_top10=same_thin / len(qs), thin_p50_ms=1000 * statistics.median(t_thin),
                           thin_p90_ms=1000 * float(np.percentile(t_thin, 90)))
            result["sets"][name] = row
            log.info("%s: %s", name, row)
        if thin is not None:
            result["replica"] = start_replica(work, procs[0][1], server.host, server.port,  # type: ignore[union-attr]
                                              threads)
            log.info("replica: %s", result["replica"])
            result["follow"] = follow_writes(work, thin, corpus, [one, sharded], args.vectors, where)
            log.info("follow: %s", result["follow"])
        one.close()
        sharded.close()
        if thin is not None:
            thin.close()
            for proc, _ in procs:
                proc.terminate()
                proc.wait(timeout=30)
        print(report(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def start_searcher(cache: Path, shard: int, host: str, port: int, threads: int, *extra: str) -> tuple[Any, str]:
    """One ``docpc serve-shard`` of ``shard`` with its own cache folder and ``threads`` threads; (process, address)
    once it listens."""
    import re
    import subprocess

    exe = Path(sys.executable).with_name("docpc")
    proc = subprocess.Popen([str(exe), "serve-shard", "--store", str(cache), "--shard", str(shard), "--host", host,
                             "--port", str(port), "--collection", "sharded", "--threads", str(threads), *extra],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"ready at (http://\S+)", line)
    if found is None:
        proc.kill()
        raise SystemExit(f"shard {shard}'s searcher did not start: {line!r}")
    return proc, found.group(1)


def start_searchers(work: Path, shards: int, host: str, port: int, threads: int) -> list[tuple[Any, str]]:
    """One searcher per shard (they share this machine's cores)."""
    return [start_searcher(work / f"searcher-{i}", i, host, port, threads) for i in range(shards)]


def start_replica(work: Path, source: str, host: str, port: int, threads: int) -> dict[str, Any]:
    """A new searcher of shard 0 started from ``source``'s snapshot: until it listens, until it is warm, its peak
    resident memory and the bytes its cache holds."""
    import re

    import httpx

    t0 = time.perf_counter()
    proc, url = start_searcher(work / "replica", 0, host, port, threads, "--from", source)
    try:
        listening = time.perf_counter() - t0
        wait_warm([url])
        warm = time.perf_counter() - t0
        health = httpx.get(f"{url}/health", timeout=60).json()
        status = Path(f"/proc/{proc.pid}/status")  # Linux; elsewhere the peak is not reported
        peak = re.search(r"VmHWM:\s+(\d+)", status.read_text()) if status.exists() else None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    held = sum(f.stat().st_size for f in (work / "replica").rglob("*") if f.is_file())
    source_docs = httpx.get(f"{source}/health", timeout=60).json()["documents"]
    return {"documents": health["documents"], "source_documents": source_docs, "listening_s": listening,
            "warm_s": warm, "peak_rss_mb": int(peak.group(1)) / 1024 if peak else None, "cache_bytes": held}


def follow_writes(work: Path, thin: ShardedStore, corpus: SyntheticCorpus, stores: list[Any], vectors: int,
                  where: dict[str, Any]) -> dict[str, Any]:
    """Another writer adds a document and deletes one; whether the reader holding nothing sees both on its next
    search. The one store is changed alike, so kept stores stay the same documents."""
    added = corpus.document(vectors)
    q_added = corpus.query(added)
    victim = corpus.query(added)  # any query: its best hit is deleted
    gone = stores[1].search(victim, top_k=1)[0].id
    new_id = f"f{time.time_ns():031x}"[:32]
    meta = {"source": f"/bench/added-{new_id}.pdf", "bucket": 99}
    with ShardedStore(work / "other-writer", writable=True, collection="sharded", **where) as writer:
        t0 = time.perf_counter()
        writer.add([new_id], [added], [meta])
        writer.delete([gone])
        written = time.perf_counter() - t0
    stores[0].add([new_id], [added], [meta])
    stores[0].delete([gone])
    t0 = time.perf_counter()
    found = [h.id for h in thin.search(q_added, top_k=10)]
    seen = time.perf_counter() - t0
    after = [h.id for h in thin.search(victim, top_k=10)]
    return {"write_s": written, "next_search_s": seen, "added_found_first": found[:1] == [new_id],
            "deleted_gone": gone not in after}


def wait_warm(urls: list[str], timeout: float = 3600.0) -> None:
    """Until no searcher is still fetching its shard's vectors in the background."""
    import httpx

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if not any(httpx.get(f"{u}/health", timeout=60).json().get("prefetching") for u in urls):
            log.info("searchers warm after %.0f s", time.perf_counter() - t0)
            return
        time.sleep(2)
    raise SystemExit("the searchers did not finish fetching their shards")


def count_bytes(store: ShardedStore) -> list[int]:
    """A counter of the bytes the store's searcher client receives (its responses' bodies), updated in place."""
    received = [0]
    assert store.remote is not None

    def hook(response: Any) -> None:
        response.read()
        received[0] += len(response.content)

    store.remote.client.event_hooks["response"].append(hook)
    return received


def _mb(value: float | None) -> str:
    return "not read here" if value is None else f"{value:.0f} MB"


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['docs']:,} synthetic documents, {result['shards']} shards"
             f"{' behind chroma run' if result['chroma_run'] else ', embedded'}; CPU: {result['cpu']}", "",
             "| set | identical top 10 | exhaustive: identical | recall@10 one / sharded | one store p50 / p90 ms "
             "| sharded p50 / p90 ms | sharded p50 / one's | merge p50 ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in result["sets"].items():
        exact = (f"{r['exhaustive_identical']:.3f} ({r['exact_queries']}) | {r['one_recall10']:.3f} / "
                 f"{r['sharded_recall10']:.3f}") if "exact_queries" in r else "- | -"
        lines.append(f"| {name} | {r['identical_top10']:.3f} | {exact} | {r['one_p50_ms']:.1f} / {r['one_p90_ms']:.1f} | "
                     f"{r['sharded_p50_ms']:.1f} / {r['sharded_p90_ms']:.1f} | "
                     f"{r['sharded_p50_ms'] / r['one_p50_ms']:.2f}x | {r['merge_p50_ms']:.3f} |")
    thin = result.get("thin_reader")
    lines[0] += f"; {result.get('vectors', 760)} vectors a document"
    if thin:
        lines += ["", f"A reader holding nothing (one searcher a shard, {result.get('searcher_threads')} thread(s) "
                      f"each): opened in {thin['open_s']:.2f} s; its first "
                      f"answer (top 5 with texts and vectors) in {thin['first_answer_s']:.2f} s, receiving "
                      f"{thin['first_answer_bytes'] / 1e6:.2f} MB.", "",
                  "| set | identical top 10 | p50 / p90 ms | p50 / one store's |", "|---|---:|---:|---:|"]
        for name, r in result["sets"].items():
            lines.append(f"| {name} | {r['thin_identical_top10']:.3f} | {r['thin_p50_ms']:.1f} / "
                         f"{r['thin_p90_ms']:.1f} | {r['thin_p50_ms'] / r['one_p50_ms']:.2f}x |")
    replica, follow = result.get("replica"), result.get("follow")
    if replica:
        lines += ["", f"A new replica of shard 0 ({replica['source_documents']:,} documents) from its searcher's "
                      f"snapshot: listening after {replica['listening_s']:.1f} s, warm after {replica['warm_s']:.1f} s, "
                      f"peak resident memory {_mb(replica['peak_rss_mb'])}, cache {replica['cache_bytes'] / 1e9:.2f} GB, "
                      f"{replica['documents']:,} documents."]
    if follow:
        lines += ["", f"Another writer added one document and deleted one ({follow['write_s']:.2f} s); the reader's "
                      f"next search ({follow['next_search_s']:.2f} s) ranked the added one first: "
                      f"{follow['added_found_first']}; the deleted one gone: {follow['deleted_gone']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
