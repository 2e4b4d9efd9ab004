"""First-stage benchmark: which candidate generator keeps the exact top 10, and what the kept one costs at 1M.

Part 1, designs (``--docs`` documents of 380 vectors from store_bench's skewed
generator, exact float32 MaxSim as the truth, ``--queries`` per set): the share
of each query's exhaustive top 10 that a design's candidates hold, for

* ``centroids``: today's first stage, 16 k-means centroids per document scored
  by late interaction, at 256 / 1,024 / 4,096 candidates;
* ``muvera``: a MUVERA-style fixed-dimensional encoding (8 repetitions x 16
  SimHash buckets x 32 projected dims = 4,096, the most hosted Chroma takes),
  searched *exactly* by inner product: an upper bound for what Chroma's HNSW
  or SPANN index over those embeddings would return;
* ``centroid-records``: each summary centroid as its own record, each query
  token's exact nearest centroids pooled per document (design (b)'s upper
  bound: an engine-side ANN index returns at best these);
* ``token-ivf`` (with ``faiss-cpu``): every stored vector in a faiss IVF index
  with 4-bit scalar quantisation, each query token's nearest vectors pooled per
  document, at nprobe 32 and 128.

Part 2, scale (``--scale-docs``, default 1,000,000): synthetic 16-centroid
summaries written through ``CentroidIndex.save`` in chunks, then opened in a
fresh process as the store opens them (a memory map): open time, resident
memory split into anonymous and file-backed pages, p50/p90 of ``top(q, 256)``
for 20-30-token queries, and the share of the exact 16-centroid top 256 the
coarse pass keeps (no document vectors exist at this size, so this is the
first stage's own loss, not recall against MaxSim). Both for the coarse pass
with every query token and with the merged query (``COARSE_QUERY_ROWS``),
alternating query by query. ``--scale-generator cone`` summarises documents
of the held-back generator instead (per-set figures for its para/broad/pad
queries); ``--scale-folder`` keeps the built summaries for later runs.

    .venv/bin/python benchmarks/first_stage_bench.py                 # both parts
    .venv/bin/python benchmarks/first_stage_bench.py --skip-scale --docs 10000
    .venv/bin/python benchmarks/first_stage_bench.py --skip-designs --scale-generator cone --scale-folder /tmp/s1m
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_bench import DIM, SyntheticCorpus  # noqa: E402

from docpc_retrievers.store.search.centroids import CentroidIndex, document_centroids  # noqa: E402

SETS = ("usual", "topic", "short", "long")
DEPTHS = (256, 1024, 4096)


def _truth(docs: np.ndarray, queries: dict[str, list[np.ndarray]]) -> dict[str, list[set[int]]]:
    import torch

    n, v, _ = docs.shape
    flat = torch.from_numpy(docs.reshape(n * v, DIM))
    return {name: [set(torch.topk((torch.from_numpy(q) @ flat.T).view(len(q), n, v).amax(2).sum(0), 10).indices.tolist())
                   for q in qs] for name, qs in queries.items()}


def _recall(order: np.ndarray, truth: set[int], depth: int) -> float:
    return len(truth & set(order[:depth].tolist())) / len(truth)


def _pooled_token_scores(vals: np.ndarray, owners: np.ndarray, n_docs: int) -> np.ndarray:
    """Per document, sum over query tokens of its best retrieved similarity (else the token's worst retrieved one)."""
    approx = np.repeat(vals[:, -1:], n_docs, axis=1).astype(np.float32)
    for t in range(len(vals)):
        ok = owners[t] >= 0
        np.maximum.at(approx[t], owners[t][ok], vals[t][ok])
    seen = np.zeros(n_docs, dtype=bool)
    seen[owners[owners >= 0]] = True
    score = approx.sum(axis=0)
    score[~seen] = -np.inf
    return score


def _fde(x: np.ndarray, planes: np.ndarray, proj: np.ndarray, is_query: bool) -> np.ndarray:
    reps, _, bits = planes.shape
    buckets, width = 2**bits, proj.shape[2]
    out = []
    for r in range(reps):
        codes = (x @ planes[r]) > 0
        b = codes.astype(int) @ (2 ** np.arange(bits))
        p = x @ proj[r]
        blocks = np.zeros((buckets, width), np.float32)
        np.add.at(blocks, b, p)
        if not is_query:
            count = np.bincount(b, minlength=buckets)
            blocks[count > 0] /= count[count > 0, None]
            for empty in np.flatnonzero(count == 0):  # fill from the vector nearest in Hamming distance
                target = (empty >> np.arange(bits)) & 1
                blocks[empty] = p[np.argmin(np.abs(codes.astype(int) - target).sum(1))]
        out.append(blocks.ravel())
    return np.concatenate(out)


def designs(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    corpus = SyntheticCorpus(seed=args.seed, skew=1.1)
    docs = np.stack([corpus.document(args.vectors) for _ in range(args.docs)])
    step = max(1, args.docs // args.queries)
    made = corpus.query_sets([docs[i] for i in range(step // 2, args.docs, step)][: args.queries])
    queries = {name: made[name] for name in SETS}
    truth = _truth(docs, queries)
    n = args.docs
    out: dict[str, Any] = {"docs": n, "vectors": args.vectors, "queries_per_set": args.queries}

    cents = torch.from_numpy(np.stack([document_centroids(d, 16) for d in docs]).reshape(n * 16, DIM))
    row: dict[str, Any] = {}
    for name, qs in queries.items():
        orders = [np.argsort(-(torch.from_numpy(q) @ cents.T).view(len(q), n, 16).amax(2).sum(0).numpy()) for q in qs]
        row[name] = {d: statistics.mean(_recall(o, t, d) for o, t in zip(orders, truth[name])) for d in DEPTHS}
    out["centroids"] = row

    rng = np.random.default_rng(args.seed)
    planes = rng.standard_normal((8, DIM, 4)).astype(np.float32)
    proj = (rng.choice([-1.0, 1.0], size=(8, DIM, 32)) / np.sqrt(32)).astype(np.float32)
    fdes = np.stack([_fde(d, planes, proj, False) for d in docs])
    out["muvera"] = {name: {d: statistics.mean(_recall(np.argsort(-(fdes @ _fde(q, planes, proj, True))), t, d)
                                               for q, t in zip(qs, truth[name])) for d in DEPTHS}
                     for name, qs in queries.items()}

    row = {}
    for k in (100, 400):
        for name, qs in queries.items():
            rec = []
            for q, t in zip(qs, truth[name]):
                vals, idx = torch.topk(torch.from_numpy(q) @ cents.T, k, dim=1)
                score = _pooled_token_scores(vals.numpy(), (idx // 16).numpy(), n)
                rec.append(_recall(np.argsort(-score), t, 256))
            row.setdefault(f"{k} per token", {})[name] = {256: statistics.mean(rec)}
    out["centroid_records"] = row

    try:
        import faiss
    except ImportError:
        out["token_ivf"] = "faiss-cpu not installed"
        return out
    flat = np.ascontiguousarray(docs.reshape(n * args.vectors, DIM))
    lists = 2048
    ivf = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(DIM), DIM, lists, faiss.ScalarQuantizer.QT_4bit,
                                        faiss.METRIC_INNER_PRODUCT)
    t0 = time.perf_counter()
    ivf.train(flat[rng.choice(len(flat), min(len(flat), 100_000), replace=False)])
    ivf.add(flat)
    row = {"build_s": time.perf_counter() - t0, "bytes_per_doc": ivf.sa_code_size() * args.vectors + 8 * args.vectors}
    for nprobe in (32, 128):
        ivf.nprobe = nprobe
        for name, qs in queries.items():
            rec, lat = [], []
            for q, t in zip(qs, truth[name]):
                t0 = time.perf_counter()
                vals, ids = ivf.search(q, 4096)
                score = _pooled_token_scores(vals, np.where(ids >= 0, ids // args.vectors, -1), n)
                lat.append(time.perf_counter() - t0)
                rec.append(_recall(np.argsort(-score), t, 256))
            row.setdefault(f"nprobe {nprobe}", {})[name] = {256: statistics.mean(rec), "p50_ms": statistics.median(lat) * 1e3}
    out["token_ivf"] = row
    return out


def _summaries(rng: np.random.Generator, topics: np.ndarray, popularity: np.ndarray, n: int) -> np.ndarray:
    """``[n, 16, DIM]`` unit centroids: each document mixes 2-6 topics drawn by popularity."""
    picks = rng.choice(len(topics), size=(n, 16), p=popularity)
    x = topics[picks] + 0.35 * rng.standard_normal((n, 16, DIM)).astype(np.float32) / np.sqrt(DIM)
    return (x / np.linalg.norm(x, axis=2, keepdims=True)).astype(np.float32)


def _cone_summaries(job: tuple[int, int, int, int]) -> np.ndarray:
    """``[n, 16, DIM]`` k-means summaries of ``n`` held-back-generator documents of ``vectors`` vectors (one worker's share)."""
    from held_back_corpus import ConeCorpus

    seed, start, n, vectors = job
    corpus = ConeCorpus(DIM, seed=seed)
    corpus.rng = np.random.default_rng((seed, start))  # same themes in every worker, its own documents
    return np.stack([document_centroids(corpus.document(vectors), 16) for _ in range(n)]).astype(np.float32)


def build_scale(args: argparse.Namespace, folder: Path) -> None:
    index = CentroidIndex(16, DIM)
    chunk = 250_000
    if args.scale_generator == "cone":
        from concurrent.futures import ProcessPoolExecutor

        from held_back_corpus import ConeCorpus

        piece = 25_000
        with ProcessPoolExecutor(max_workers=2) as pool:
            for start in range(0, args.scale_docs, chunk):
                size = min(chunk, args.scale_docs - start)
                jobs = [(args.seed, s, min(piece, start + size - s), args.scale_vectors) for s in range(start, start + size, piece)]
                index.add_block([f"{start + i:032x}" for i in range(size)], np.concatenate(list(pool.map(_cone_summaries, jobs))))
                index.save(folder)
        corpus = ConeCorpus(DIM, seed=args.seed)
        corpus.rng = np.random.default_rng((args.seed, args.scale_docs + 1))  # documents the index does not hold
        sets = corpus.query_sets([corpus.document(args.scale_vectors) for _ in range(args.scale_queries // 3)])
        names = [name for name in ("para", "broad", "pad") for _ in sets[name]]
        queries = [q for name in ("para", "broad", "pad") for q in sets[name]]
        (folder.parent / "query_sets.json").write_text(json.dumps(names))
        np.save(folder.parent / "queries.npy", np.array(queries, dtype=object), allow_pickle=True)
        return
    rng = np.random.default_rng(args.seed)
    topics = rng.standard_normal((300, DIM)).astype(np.float32)
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    weights = 1.0 / np.arange(1, 301) ** 1.1
    for start in range(0, args.scale_docs, chunk):
        size = min(chunk, args.scale_docs - start)
        index.add_block([f"{start + i:032x}" for i in range(size)], _summaries(rng, topics, weights / weights.sum(), size))
        index.save(folder)  # merges the mapped snapshot and the new chunk, slab by slab
    queries = []
    for _ in range(args.scale_queries):
        t = int(rng.integers(20, 31))
        picks = rng.choice(300, size=t, p=weights / weights.sum())
        q = topics[picks] + 0.9 * rng.standard_normal((t, DIM)).astype(np.float32) / np.sqrt(DIM)
        queries.append(q / np.linalg.norm(q, axis=1, keepdims=True))
    np.save(folder.parent / "queries.npy", np.array(queries, dtype=object), allow_pickle=True)


def _memory() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(line.split()[1]) / 1024
    return out


def scale_reader(folder: Path) -> None:
    """In a fresh process: open the snapshot as the store does, time queries, measure memory and coarse-pass loss."""
    import torch

    from docpc_retrievers.store.search import centroids

    t0 = time.perf_counter()
    index = CentroidIndex(16, DIM)
    assert index.load(folder) is not None
    out: dict[str, Any] = {"open_s": time.perf_counter() - t0, "docs": len(index), "memory_after_open_mb": _memory()}
    queries = list(np.load(folder.parent / "queries.npy", allow_pickle=True))
    index.top(queries[0], 256)  # the first query faults the pages in
    # Side by side: the coarse pass with every query token (before) and with the merged query (now), alternating
    # query by query so both see the same machine.
    merged_rows = centroids.COARSE_QUERY_ROWS
    lat: dict[str, list[float]] = {"every_token": [], "merged": []}
    found: dict[str, list[list[str]]] = {"every_token": [], "merged": []}
    for q in queries:
        for name, rows in (("every_token", 0), ("merged", merged_rows)):
            centroids.COARSE_QUERY_ROWS = rows
            t0 = time.perf_counter()
            found[name].append(index.top(q, 256))
            lat[name].append(time.perf_counter() - t0)
    centroids.COARSE_QUERY_ROWS = merged_rows
    out["p50_ms"], out["p90_ms"] = statistics.median(lat["merged"]) * 1e3, float(np.percentile(lat["merged"], 90)) * 1e3
    out["every_token_p50_ms"] = statistics.median(lat["every_token"]) * 1e3
    out["every_token_p90_ms"] = float(np.percentile(lat["every_token"], 90)) * 1e3
    out["merged_query_rows"] = merged_rows
    out["memory_after_queries_mb"] = _memory()
    exact_tops: dict[int, set[str]] = {}

    def keeps(i: int, name: str) -> float:
        """Share of query ``i``'s exact 16-centroid top 256 (every document scored, once per query) a variant kept."""
        if i not in exact_tops:
            scores = index._score(queries[i], "fine", None)
            exact_tops[i] = {index._ids[j] for j in np.argsort(-scores)[:256]}
        return len(exact_tops[i] & set(found[name][i])) / 256

    sampled = range(0, len(queries), max(1, len(queries) // 6))  # 6 queries: scoring every document is slow
    kept = {name: [keeps(i, name) for i in sampled] for name in lat}
    out["coarse_pass_keeps"] = statistics.mean(kept["merged"])
    names_file = folder.parent / "query_sets.json"
    if names_file.exists():  # per set: p50 and keeps of both variants over every query of the set
        names = json.loads(names_file.read_text())
        for set_name in dict.fromkeys(names):
            rows = [i for i, n in enumerate(names) if n == set_name]
            out[f"set_{set_name}"] = {
                f"{k}_{m}": v for k in lat for m, v in (
                    ("p50_ms", statistics.median(lat[k][i] for i in rows) * 1e3),
                    ("keeps", statistics.mean(keeps(i, k) for i in rows)))}
    out["every_token_coarse_pass_keeps"] = statistics.mean(kept["every_token"])
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--vectors", type=int, default=380)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--scale-docs", type=int, default=1_000_000)
    ap.add_argument("--scale-queries", type=int, default=30)
    ap.add_argument("--scale-generator", choices=("random", "cone"), default="random",
                    help="random: 16 independent topic draws per summary (the original); cone: k-means summaries of "
                         "held_back_corpus.py documents, queried with its para/broad/pad sets (a third each)")
    ap.add_argument("--scale-vectors", type=int, default=200, help="vectors per cone document summarised")
    ap.add_argument("--skip-designs", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--scale-folder", type=Path, default=None,
                    help="keep the scale part's summaries here (reused when already built, for before/after runs)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reader", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reader:
        scale_reader(Path(args.reader))
        return
    result: dict[str, Any] = {}
    if not args.skip_designs:
        result["designs"] = designs(args)
        print(json.dumps(result["designs"], indent=1))
    if not args.skip_scale:
        with tempfile.TemporaryDirectory(prefix="docpc-first-stage-", dir=args.workdir) as tmp:
            folder = (args.scale_folder or Path(tmp)) / "first_stage"
            t0 = time.perf_counter()
            if not (folder / "current.json").exists():
                build_scale(args, folder)
            built = time.perf_counter() - t0
            proc = subprocess.run([sys.executable, __file__, "--reader", str(folder)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            result["scale"] = {"build_s": built, **json.loads(proc.stdout.strip().splitlines()[-1])}
            result["scale"]["snapshot_bytes_per_doc"] = sum(p.stat().st_size for p in folder.rglob("*")) / args.scale_docs
            print(json.dumps(result["scale"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
