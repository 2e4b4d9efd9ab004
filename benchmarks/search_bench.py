"""Search judged on real token vectors (and synthetic ones as a guard): recall@10 and latency, stage by stage.

Every system searches the same stored vectors in this process (unpooled as new stores keep them, or pooled by 2
with ``--pool-factor 2``; int8 with a scale per row as the store keeps them), with no Chroma in the way; the truth is exhaustive float32 MaxSim over
those stored vectors, under the same filter. Latency is reported as p50/p90 ms and as a ratio to the exhaustive
int8 scan measured in the same run, with the CPU's name beside it.

    python benchmarks/search_bench.py --corpus real --docs 10000 --systems search scan
    python benchmarks/search_bench.py --corpus real --docs 100000       # windows over the 10k documents' stream
    python benchmarks/search_bench.py --corpus synthetic --docs 10000   # store_bench's skewed topic generator

Real sets (benchmarks/real_vectors.py): ``short`` (held-out titles), ``sentence`` (held-out sentences), and
each under filters keeping about 5% (``-f5``) and 0.5% (``-f05``) of the documents. Above 10,000 documents the
documents are windows of 125-375 consecutive vectors over the 10k documents' pooled stream (a window of pooled
vectors stands for a pooled window of 250-750 tokens; pooling 100k windows anew would take longer than the run). Synthetic sets: store_bench's
skewed generator's sets (usual, hard, topic, short, long, padded, short_copy, short_mix, copy8, filter5, filter05).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_vectors
from machine import cpu_name

from docpc_retrievers.encoders.pooling import pool_vectors
from docpc_retrievers.store.codec import quantize

log = logging.getLogger("search_bench")


class StoredRows:
    """Documents' int8 rows and scales held in memory: the store's ``VectorSource`` without Chroma or a cache."""

    def __init__(self, ids: list[str], vectors: Sequence[np.ndarray]) -> None:
        self.ids = ids
        self.lengths = np.array([v.shape[0] for v in vectors])
        self.offsets = np.concatenate(([0], np.cumsum(self.lengths)))
        self.codes = np.empty((int(self.offsets[-1]), vectors[0].shape[1]), dtype=np.int8)  # filled in place: no
        self.scales = np.empty(int(self.offsets[-1]), dtype="<f2")                          # second copy at 100k
        for i, v in enumerate(vectors):
            a, b = self.offsets[i], self.offsets[i + 1]
            self.codes[a:b], self.scales[a:b] = quantize(v)
        self.slot = {d: i for i, d in enumerate(ids)}

    @classmethod
    def streamed(cls, ids: list[str], n_rows: int, dim: int, docs: Iterator[np.ndarray]) -> StoredRows:
        """Rows quantised as ``docs`` yields them, ``n_rows`` rows each, never holding the float vectors."""
        self = cls.__new__(cls)
        self.ids = ids
        self.lengths = np.full(len(ids), n_rows)
        self.offsets = np.arange(len(ids) + 1) * n_rows
        self.codes = np.empty((len(ids) * n_rows, dim), dtype=np.int8)
        self.scales = np.empty(len(ids) * n_rows, dtype="<f2")
        for i, v in enumerate(docs):
            self.codes[i * n_rows : (i + 1) * n_rows], self.scales[i * n_rows : (i + 1) * n_rows] = quantize(v)
            if (i + 1) % 10_000 == 0:
                log.info("generated and quantised %d documents", i + 1)
        self.slot = {d: i for i, d in enumerate(ids)}
        return self

    def doc_float(self, i: int) -> np.ndarray:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.codes[a:b].astype(np.float32) * self.scales[a:b, None].astype(np.float32)

    def doc_rows(self, doc: str) -> tuple[np.ndarray, np.ndarray]:
        i = self.slot[doc]
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.codes[a:b], self.scales[a:b]

    def rows(self, ids: list[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        kept = [d for d in ids if d in self.slot]
        slots = np.array([self.slot[d] for d in kept], dtype=np.int64)
        if not len(slots):
            return [], [], np.zeros((0, self.codes.shape[1]), np.int8), np.zeros(0, "<f2")
        starts, ends = self.offsets[slots].tolist(), self.offsets[slots + 1].tolist()
        codes = np.concatenate([self.codes[a:b] for a, b in zip(starts, ends)])
        scales = np.concatenate([self.scales[a:b] for a, b in zip(starts, ends)])
        return kept, [b - a for a, b in zip(starts, ends)], codes, scales

    def parts(self, doc_id: str) -> None:
        return None

    def float_vectors(self) -> list[np.ndarray]:
        return [self.doc_float(i) for i in range(len(self.ids))]


class Dequantised(Sequence[np.ndarray]):
    """The stored rows as float documents, made on access (a 100k-document synthetic set does not fit as floats)."""

    def __init__(self, rows: StoredRows) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows.ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.rows.doc_float(j) for j in range(*i.indices(len(self)))]
        return self.rows.doc_float(int(i) % len(self))


def exhaustive_tops(sets: dict[str, tuple[list, Any]], rows: StoredRows, k: int = 10,
                    docs_per_chunk: int = 256) -> dict[str, list[list[str]]]:
    """Exact float32 MaxSim over every stored (dequantised) row for every query of every set, under each set's
    filter: each chunk of documents is dequantised once and multiplied with all queries' tokens together."""
    import torch

    flat = [(name, i, q) for name, (qs, _) in sets.items() for i, q in enumerate(qs)]
    tokens = torch.from_numpy(np.concatenate([q for _, _, q in flat]).astype(np.float32))
    # about 1 GB of row-by-token products a chunk
    mean_rows = rows.codes.shape[0] / max(1, len(rows.ids))
    docs_per_chunk = max(1, min(docs_per_chunk, int(2**28 / (mean_rows * tokens.shape[0]))))
    bounds = np.cumsum([0] + [q.shape[0] for _, _, q in flat])
    owner = torch.from_numpy(np.repeat(np.arange(len(flat)), np.diff(bounds)))
    n_docs = len(rows.ids)
    scores = torch.empty((len(flat), n_docs), dtype=torch.float32)
    for s in range(0, n_docs, docs_per_chunk):
        e = min(n_docs, s + docs_per_chunk)
        a, b = int(rows.offsets[s]), int(rows.offsets[e])
        x = torch.from_numpy(rows.codes[a:b]).float() * torch.from_numpy(rows.scales[a:b].astype(np.float32))[:, None]
        sims = x @ tokens.T  # [rows of the chunk, all tokens]
        lengths = torch.from_numpy((rows.offsets[s + 1 : e + 1] - rows.offsets[s:e]).astype(np.int64))
        best = torch.segment_reduce(sims, "max", lengths=lengths, axis=0)  # [docs, all tokens]
        per_query = torch.zeros((e - s, len(flat)), dtype=torch.float32)
        per_query.index_add_(1, owner, best)
        scores[:, s:e] = per_query.T
        if (s // docs_per_chunk) % 20 == 0:
            log.info("exhaustive truth: %d of %d documents", e, n_docs)
    out: dict[str, list[list[str]]] = {name: [] for name in sets}
    for j, (name, _, _) in enumerate(flat):
        row = scores[j].numpy()
        allowed = sets[name][1]
        if allowed is not None:
            masked = np.full(n_docs, -np.inf, dtype=np.float32)
            masked[allowed] = row[allowed]
            row = masked
        top = np.argsort(-row, kind="stable")[:k]
        out[name].append([rows.ids[i] for i in top if row[i] > -np.inf])
    return out


def cached_truth(args: argparse.Namespace, sets: dict[str, tuple[list, Any]], rows: StoredRows
                 ) -> dict[str, list[list[str]]]:
    """The exhaustive truth, kept in the cache folder keyed by everything that decides it (a 100k rerun then
    measures systems only)."""
    digest = hashlib.sha256(rows.codes[:: max(1, rows.codes.shape[0] // 4096)].tobytes())
    digest.update(json.dumps({n: [len(qs), None if a is None else len(a)] for n, (qs, a) in sets.items()}).encode())
    for qs, _ in sets.values():
        for q in qs:
            digest.update(np.ascontiguousarray(q, dtype=np.float32).tobytes())
    path = args.cache / f"truth-{args.corpus}-{len(rows.ids)}-{digest.hexdigest()[:16]}.json"
    if path.exists():
        log.info("exhaustive truth from %s", path)
        return json.loads(path.read_text())
    truth = exhaustive_tops(sets, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(truth))
    return truth


def pooled(vectors: list[np.ndarray], cache: Path | None) -> list[np.ndarray]:
    """Each document pooled by 2 as the indexer pools (cached beside the corpus when ``cache`` is given)."""
    if cache is not None and cache.exists():
        z = np.load(cache)
        return np.split(z["rows"].astype(np.float32), np.cumsum(z["lengths"])[:-1])
    out = []
    for i, v in enumerate(vectors):
        out.append(pool_vectors(v.astype(np.float32), 2)[0])
        if (i + 1) % 5000 == 0:
            log.info("pooled %d documents", i + 1)
    if cache is not None:
        np.savez(cache, rows=np.concatenate(out).astype(np.float16), lengths=np.array([len(p) for p in out]))
    return out


def real_sets(args: argparse.Namespace) -> tuple[list[str], list[np.ndarray], np.ndarray, dict[str, tuple[list, Any]]]:
    corpus = real_vectors.build(min(args.docs, 10_000), args.cache, corpus=args.text)
    key = f"{corpus.manifest['units_key']}-{corpus.manifest['documents']}"
    if args.pool_factor == 2:
        corpus.vectors = pooled(corpus.vectors, args.cache / f"pooled-{key}.npz")
    else:
        corpus.vectors = [v.astype(np.float32) for v in corpus.vectors]
    if args.docs > corpus.manifest["documents"]:  # windows over the stream: pooled, half as many vectors each
        shortest, longest = corpus.manifest.get("tokens", (real_vectors.MIN_TOKENS, real_vectors.MAX_TOKENS))
        corpus = real_vectors.windows(corpus, args.docs, lengths=(shortest // args.pool_factor,
                                                                   longest // args.pool_factor))
    vectors = corpus.vectors
    ids = [f"{i:032x}" for i in range(len(vectors))]
    sets: dict[str, tuple[list, Any]] = {}
    for name, qs in corpus.queries.items():
        qs = qs[: args.queries]
        sets[name] = (qs, None)
        sets[f"{name}-f5"] = (qs, np.flatnonzero(corpus.buckets < 10))
        sets[f"{name}-f05"] = (qs, np.flatnonzero(corpus.buckets == 0))
    return ids, vectors, corpus.buckets, sets


def synthetic_sets(args: argparse.Namespace) -> tuple[list[str], Sequence[np.ndarray], np.ndarray,
                                                     dict[str, tuple[list, Any]]]:
    """store_bench's skewed generator: grids of 760 vectors, stored as they are (pool factor 1) or pooled by 2.
    Unpooled, the rows are quantised as they are generated (a :class:`Dequantised` view over them), the floats never
    all held."""
    from store_bench import SyntheticCorpus

    corpus = SyntheticCorpus(seed=args.seed, skew=1.1)
    every = max(1, args.docs // args.queries)
    targets: list[np.ndarray] = []
    ids = [f"{i:032x}" for i in range(args.docs)]

    def documents() -> Iterator[np.ndarray]:
        for i in range(args.docs):
            d = corpus.document(760)
            if i % every == every // 2 and len(targets) < args.queries:
                targets.append(d)
            yield d if args.pool_factor == 1 else pool_vectors(d, 2)[0]

    vectors: Sequence[np.ndarray]
    if args.pool_factor == 1:
        vectors = Dequantised(StoredRows.streamed(ids, 760, 128, documents()))
    else:
        vectors = list(documents())
    queries = corpus.query_sets(targets)
    buckets = np.random.default_rng(args.seed).integers(0, 1000, args.docs)
    filters = {"filter5": np.flatnonzero(buckets < 50), "filter05": np.flatnonzero(buckets < 5)}
    return ids, vectors, buckets, {name: (qs, filters.get(name)) for name, qs in queries.items()}


def recalls(q: np.ndarray, got: list[str], best: list[str], rows: StoredRows) -> tuple[float, float]:
    """Recall@10 of ``got`` against the exhaustive ``best``: by score (a hit counts when its exact score reaches the
    truth's 10th, as ann-benchmarks counts; documents that tie the 10th are all right answers, and overlapping
    windows tie exactly), and by id (the truth's own tie-break, the lower id first)."""
    if not best:
        return 1.0, 1.0
    by_id = len(set(got[:10]) & set(best)) / len(best)
    edge = exact_score(q, best[-1], rows)
    by_score = sum(exact_score(q, d, rows) >= edge - 1e-5 * max(1.0, abs(edge)) for d in got[: len(best)])
    return by_score / len(best), by_id


def exact_score(q: np.ndarray, doc: str, rows: StoredRows) -> float:
    """Float32 MaxSim of ``q`` over ``doc``'s stored (dequantised) rows: the truth's own score."""
    return float((rows.doc_float(rows.slot[doc]) @ np.asarray(q, dtype=np.float32).T).max(axis=0).sum())


def measure(search: Callable[[np.ndarray, set[str] | None], list[str]], sets: dict[str, tuple[list, Any]],
            ids: list[str], truth: dict[str, list[list[str]]], rows: StoredRows) -> dict[str, dict[str, float]]:
    out = {}
    for name, (qs, allowed_slots) in sets.items():
        allowed = None if allowed_slots is None else {ids[i] for i in allowed_slots}
        lat, rec, rec_ids = [], [], []
        for q, best in zip(qs, truth[name]):
            t0 = time.perf_counter()
            got = search(q, allowed)
            lat.append(time.perf_counter() - t0)
            by_score, by_id = recalls(q, got, best, rows)
            rec.append(by_score)
            rec_ids.append(by_id)
        out[name] = {"recall10": statistics.mean(rec), "recall10_ids": statistics.mean(rec_ids),
                     "p50_ms": 1000 * statistics.median(lat), "p90_ms": 1000 * float(np.percentile(lat, 90))}
    return out


def systems(rows: StoredRows, ids: list[str], vectors: list[np.ndarray], names: list[str]
            ) -> dict[str, Callable[[np.ndarray, set[str] | None], list[str]]]:
    """The systems asked for, built over the same rows."""
    import search_systems

    return {n: search_systems.build(n, rows, ids, vectors) for n in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", choices=("real", "synthetic"), default="real")
    ap.add_argument("--text", choices=sorted(real_vectors.CORPORA), default="man",
                    help="which real text (benchmarks/real_vectors.py): man pages, or the Rust books with outline "
                         "headings as short queries")
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--systems", nargs="+", default=["search", "scan"])
    ap.add_argument("--cache", type=Path, default=real_vectors.DEFAULT_CACHE)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pool-factor", type=int, choices=(1, 2), default=1,
                    help="vectors stored as they are (1, new stores' default) or pooled by 2")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--kernels", nargs="+", metavar="KERNEL",
                    help="instead of --systems: the default search once per int8 kernel (default = the machine's "
                         "choice, then int_mm, onednn, float32 forced), hits compared with the default's")
    ap.add_argument("--kernel-queries", type=int, default=5, help="queries per set with --kernels")
    ap.add_argument("--fast-plaid-python", help="also run fast-plaid (PLAID) over the same stored rows and unfiltered "
                                                "sets, through fast_plaid_peer.py in this interpreter")
    ap.add_argument("--fast-plaid-nbits", type=int, nargs="+", default=[4], help="fast-plaid residual bits to run")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ids, vectors, _, sets = (real_sets if args.corpus == "real" else synthetic_sets)(args)
    rows = vectors.rows if isinstance(vectors, Dequantised) else StoredRows(ids, vectors)
    log.info("%d documents, %d stored rows; exhaustive truth", len(ids), rows.codes.shape[0])
    truth = cached_truth(args, sets, rows)
    result: dict[str, Any] = {"cpu": cpu_name(), "corpus": args.corpus, "text": args.text, "docs": len(ids),
                              "rows": int(rows.codes.shape[0]), "systems": {}}
    if args.kernels:
        result["kernels"] = kernel_runs(systems(rows, ids, vectors, ["search"])["search"], sets, ids, truth, args, rows)
        print(kernel_report(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return
    for name, search in systems(rows, ids, vectors, args.systems).items():
        log.info("measuring %s", name)
        search(sets[next(iter(sets))][0][0], None)  # warm: first-use costs are not a query's
        result["systems"][name] = measure(search, sets, ids, truth, rows)
    if args.fast_plaid_python:
        result["peers"] = fast_plaid_run(args, rows, ids, sets, truth)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


def fast_plaid_run(args: argparse.Namespace, rows: StoredRows, ids: list[str], sets: dict[str, tuple[list, Any]],
                   truth: dict[str, list[list[str]]]) -> dict[str, Any]:
    """fast-plaid over the same stored (dequantised) rows, on the unfiltered sets: recall@10 of the same truth,
    p50/p90, bytes a document and build rate (store_bench's runner)."""
    import shutil
    import tempfile

    from store_bench import _fast_plaid

    slot = {d: i for i, d in enumerate(ids)}
    plain = {name: qs for name, (qs, allowed) in sets.items() if allowed is None}
    exact = {name: [{slot[d] for d in top} for top in truth[name]] for name in plain}
    tmp = Path(tempfile.mkdtemp(prefix="fast-plaid-"))
    try:
        log.info("fast-plaid over %d documents", len(ids))
        return _fast_plaid(args, rows.float_vectors(), plain, exact, tmp / "run")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kernel_runs(search: Callable[[np.ndarray, set[str] | None], list[str]], sets: dict[str, tuple[list, Any]],
                ids: list[str], truth: dict[str, list[list[str]]], args: argparse.Namespace, rows: StoredRows
                ) -> dict[str, Any]:
    """The same search under each int8 kernel (``default``: the machine's own choice): p50/p90 over every set's
    first ``--kernel-queries`` queries, recall@10, and whether every query's hits equal the default's."""
    import os

    from docpc_retrievers.scoring import kernels

    out: dict[str, Any] = {}
    hits: dict[str, list[list[str]]] = {}
    for kernel in args.kernels:
        if kernel == "default":
            os.environ.pop(kernels.KERNEL_ENV, None)
        elif kernel not in kernels.available_kernels():
            log.info("%s gives no exact products here: skipped", kernel)
            continue
        else:
            os.environ[kernels.KERNEL_ENV] = kernel
        used = kernels.int8_kernel_choice()
        search(sets[next(iter(sets))][0][0], None)  # warm
        lat, rec, got_all = [], [], []
        for name, (qs, allowed_slots) in sets.items():
            allowed = None if allowed_slots is None else {ids[i] for i in allowed_slots}
            for q, best in zip(qs[: args.kernel_queries], truth[name]):
                t0 = time.perf_counter()
                got = search(q, allowed)[:10]
                lat.append(time.perf_counter() - t0)
                rec.append(recalls(q, got, best, rows)[0])
                got_all.append(got)
        hits[kernel] = got_all
        out[kernel] = {"kernel": used.choice, "how": used.how, "queries": len(lat),
                       "p50_ms": 1000 * statistics.median(lat), "p90_ms": 1000 * float(np.percentile(lat, 90)),
                       "recall10": statistics.mean(rec)}
        log.info("%s: %s", kernel, out[kernel])
    os.environ.pop(kernels.KERNEL_ENV, None)
    first = next(iter(hits))
    for kernel in out:
        out[kernel]["hits_identical_to_" + first] = hits[kernel] == hits[first]
    return out


def kernel_report(result: dict[str, Any]) -> str:
    """A markdown table: the search's p50/p90 under each int8 kernel, as a ratio to the fastest, and its hits."""
    runs = result["kernels"]
    best = min(r["p50_ms"] for r in runs.values())
    first = next(iter(runs))
    lines = [f"{result['corpus']} vectors, {result['docs']:,} documents ({result['rows']:,} stored rows), "
             f"CPU: {result['cpu']}", "",
             f"| kernel | p50 ms | p90 ms | p50 / fastest | recall@10 | hits as {first} |", "|---|---:|---:|---:|---:|---|"]
    for name, r in runs.items():
        label = f"{name} ({r['kernel']}, {r['how']})" if name == "default" else name
        lines.append(f"| {label} | {r['p50_ms']:,.1f} | {r['p90_ms']:,.1f} | {r['p50_ms'] / best:.2f}x | "
                     f"{r['recall10']:.3f} | {'identical' if r['hits_identical_to_' + first] else 'DIFFERENT'} |")
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    """A markdown table: recall@10 and p50/p90 per set and system, and p50 as a ratio to the ``scan`` system."""
    lines = [f"{result['corpus']} vectors, {result['docs']:,} documents ({result['rows']:,} stored rows), "
             f"CPU: {result['cpu']}", ""]
    names = list(result["systems"])
    lines.append("| set | " + " | ".join(f"{n}: recall@10, p50 / p90 ms" for n in names) + " |")
    lines.append("|---" * (len(names) + 1) + "|")
    base = result["systems"].get("scan") or result["systems"].get("legacy-scan")
    for s in next(iter(result["systems"].values())):
        cells = []
        for n in names:
            m = result["systems"][n][s]
            ratio = f" ({m['p50_ms'] / base[s]['p50_ms']:.2f}x scan)" if base and "scan" not in n else ""
            ids_recall = f" (ids {m['recall10_ids']:.3f})" if "recall10_ids" in m else ""
            cells.append(f"{m['recall10']:.3f}{ids_recall}, {m['p50_ms']:.1f} / {m['p90_ms']:.1f}{ratio}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    for peer, row in result.get("peers", {}).items():
        if not isinstance(row, dict):
            lines.append(f"\n{peer}: {row}")
            continue
        lines += ["", f"{peer}: {row['bytes_per_doc'] / 1024:.1f} KiB a document, built at "
                      f"{row['insert_docs_per_s']:.1f} documents/s", "", "| set | recall@10 | p50 / p90 ms |", "|---|---:|---:|"]
        lines += [f"| {name} | {m['recall10']:.3f} | {m['p50_ms']:.1f} / {m['p90_ms']:.1f} |"
                  for name, m in row.items() if isinstance(m, dict)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
