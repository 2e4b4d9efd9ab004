"""Store benchmark: what compaction costs in ranking quality, and what the Chroma-backed store does at scale.

Synthetic ColQwen-like embeddings: unit vectors x 128 dims per document,
drawn around a few hundred shared topic centroids (each document mixes a few
topics). Two query sets: the usual (20-30 noisy copies of a target
document's vectors) and a harder one (8-12 tokens, twice the noise). Prints
every figure beside its target, and writes them as JSON with ``--json``.

Part 1, compaction (in memory, exact MaxSim everywhere), ``--quality-docs``
documents of 760 vectors:
* number format alone: top-10 overlap of int8 (one fp16 scale per vector)
  against float32, same vectors;
* pooling (colpali-engine's HierarchicalTokenPooler, factors 2 and 3) then
  int8: NDCG@10 with the drawn document as the relevant one, as a fraction of
  exact unpooled float32 NDCG@10, and top-10 overlap with exact unpooled MaxSim;
* bytes per document a search reads (vectors + first-stage summary).

Part 2, scale (``--docs`` documents of ``--vectors`` vectors; 380 is what pool
factor 2 leaves of 760, generated directly because pooling costs ~60 ms per
document and is done by the indexing pipeline, not the store): insert rate
over ``--insert-docs`` documents, then, in a separate reader process (its peak
memory is measured), cold open from the local cache and from Chroma alone,
search p50/p90 (query encoding excluded), recall@10 against exhaustive MaxSim
over the same stored vectors (and, beside it, the share of results within 0.1%
of the exact 10th score: misses among near-ties told from lost documents),
bytes per document by part. ``--server`` runs
the same against a ``chroma run`` server on loopback.

Latencies are only comparable within one run on one machine: the CPU's name is printed beside them.

    .venv/bin/python benchmarks/store_bench.py                         # 10,000 documents, embedded
    .venv/bin/python benchmarks/store_bench.py --server                # the same through chroma run
    .venv/bin/python benchmarks/store_bench.py --docs 100000 --insert-docs 5000 --queries 8
    .venv/bin/python benchmarks/store_bench.py --generator cone        # the held-back generator (held_back_corpus.py)
    .venv/bin/python benchmarks/store_bench.py --skew 1.1 --query-peaks 127   # also 8-bit int8 queries (CPUs without VNNI)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.encoders.pooling import pool_vectors
from docpc_retrievers.scoring.maxsim import maxsim
from docpc_retrievers.store.codec import dequantize, quantize
from docpc_retrievers.store.multivector import MultiVectorStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from held_back_corpus import CONE_FILTERS, ConeCorpus  # noqa: E402

DIM = 128


class SyntheticCorpus:
    """Topic-structured unit vectors, reproducible from a seed.

    ``skew`` > 0 gives topics a Zipf popularity (topic ``r`` drawn with weight ``1 / (r + 1) ** skew``), so
    many documents share the popular topics and a query about one of them has many near-ties; 0 (the
    original generator) draws topics uniformly.
    """

    def __init__(self, n_topics: int = 300, seed: int = 0, noise: float = 0.7, skew: float = 0.0) -> None:
        self.rng = np.random.default_rng(seed)
        c = self.rng.standard_normal((n_topics, DIM)).astype(np.float32)
        self.centroids = c / np.linalg.norm(c, axis=1, keepdims=True)
        self.noise = noise
        weights = 1.0 / np.arange(1, n_topics + 1) ** skew
        self.popularity = weights / weights.sum()

    def _unit(self, x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    def document(self, n_vectors: int = 760) -> np.ndarray:
        k = int(self.rng.integers(2, 7))
        topics = self.rng.choice(len(self.centroids), size=k, replace=False, p=self.popularity)
        weights = self.rng.dirichlet(np.ones(len(topics)))
        picks = self.rng.choice(topics, size=n_vectors, p=weights)
        n = self.rng.standard_normal((n_vectors, DIM)).astype(np.float32)
        return self._unit(self.centroids[picks] + self.noise * self._unit(n))

    def query(self, target: np.ndarray, hard: bool = False) -> np.ndarray:
        t = int(self.rng.integers(8, 13)) if hard else int(self.rng.integers(20, 31))
        rows = target[self.rng.choice(len(target), size=t, replace=False)]
        n = self.rng.standard_normal((t, DIM)).astype(np.float32)
        return self._unit(rows + (1.0 if hard else 0.5) * self._unit(n))

    def topic_query(self, n_tokens: tuple[int, int], n_topics: tuple[int, int] = (1, 3)) -> np.ndarray:
        """A query drawn around popular topics, copied from no document: ``n_tokens`` and ``n_topics`` are ranges."""
        t = int(self.rng.integers(*n_tokens))
        topics = self.rng.choice(len(self.centroids), size=int(self.rng.integers(*n_topics)), replace=False,
                                 p=self.popularity)
        picks = self.rng.choice(topics, size=t)
        n = self.rng.standard_normal((t, DIM)).astype(np.float32)
        return self._unit(self.centroids[picks] + 0.9 * self._unit(n))

    def query_sets(self, targets: list[np.ndarray]) -> dict[str, list[np.ndarray]]:
        """Every query set: the original two (copies of a target's rows) and, for skewed corpora, the others (topic,
        short, long, filtered, padded, short_copy, short_mix, copy8)."""
        sets = {"usual": [self.query(t) for t in targets], "hard": [self.query(t, hard=True) for t in targets]}
        if self.popularity[0] > self.popularity[-1]:
            n = len(targets)
            sets["topic"] = [self.topic_query((20, 31)) for _ in range(n)]
            sets["short"] = [self.topic_query((3, 7), (1, 2)) for _ in range(n)]
            sets["long"] = [self.topic_query((40, 61), (2, 4)) for _ in range(n)]
            sets["filter5"] = [self.topic_query((20, 31)) for _ in range(n)]
            sets["filter05"] = [self.topic_query((8, 21)) for _ in range(n)]
            sets["padded"] = [self.padded_query(t, targets[(i + 1) % n], hard=i % 2 == 0) for i, t in enumerate(targets)]
            sets["short_copy"] = [self.short_copy_query(t) for t in targets]
            sets["short_mix"] = [self.short_mix_query(t) for t in targets]
            sets["copy8"] = [self.copy8_query(t) for t in targets]
        return sets

    def short_copy_query(self, target: np.ndarray) -> np.ndarray:
        """2-7 of ``target``'s rows with unit noise of 0.7: short like ``short``, but copied from a document, which the
        summaries rank well and the token stage alone did not (0.874 of the exact top 10 at 100k)."""
        t = int(self.rng.integers(2, 8))
        rows = target[self.rng.choice(len(target), size=t, replace=False)]
        return self._unit(rows + 0.7 * self._unit(self.rng.standard_normal((t, DIM)).astype(np.float32)))

    def short_mix_query(self, target: np.ndarray) -> np.ndarray:
        """2-3 of ``target``'s rows (unit noise 0.6) beside 2-3 tokens about one of the 30 most popular topics (0.9):
        short, part copied and part about a topic. Drawn after the short sets were tuned, it found the summaries'
        coarse pass losing documents (0.980 of the exact top 10 at 100k, 0.996 on all 16 centroids)."""
        a, b = int(self.rng.integers(2, 4)), int(self.rng.integers(2, 4))
        rows = target[self.rng.choice(len(target), size=a, replace=False)]
        rows = self._unit(rows + 0.6 * self._unit(self.rng.standard_normal((a, DIM)).astype(np.float32)))
        topic = self.centroids[self.rng.choice(min(30, len(self.centroids)), size=b)]
        topic = self._unit(topic + 0.9 * self._unit(self.rng.standard_normal((b, DIM)).astype(np.float32)))
        return np.concatenate([rows, topic]).astype(np.float32)

    def copy8_query(self, target: np.ndarray) -> np.ndarray:
        """8 of ``target``'s rows with unit noise of 0.7: one token past the short path, noisier than ``usual`` and
        less than ``hard``. Drawn as a check after tuning, it held 0.986 of the exact top 10 at 100k: its misses were
        near-ties that the summaries ranked past a mixed query's cut (two_stage.FOLLOW_UP_DEPTH)."""
        rows = target[self.rng.choice(len(target), size=8, replace=False)]
        return self._unit(rows + 0.7 * self._unit(self.rng.standard_normal((8, DIM)).astype(np.float32)))

    def padded_query(self, target: np.ndarray, other: np.ndarray, hard: bool) -> np.ndarray:
        """A usual or hard query about ``target`` and 4-12 copies of one of ``other``'s rows with unit noise of
        0.02-0.3 (cosine 0.95-1.0 between copies, some under the grouping threshold): padding or query-augmentation
        tokens, which MaxSim counts once per copy."""
        content = self.query(target, hard=hard)
        row = other[self.rng.integers(len(other))]
        n = int(self.rng.integers(4, 13))
        noise = self._unit(self.rng.standard_normal((n, DIM)).astype(np.float32))
        return np.concatenate([content, self._unit(row + self.rng.uniform(0.02, 0.3) * noise)])


#: Metadata filters of the filtered query sets: ``bucket`` is uniform in 0..999 per document.
SET_FILTERS: dict[str, dict[str, Any]] = {"filter5": {"bucket": {"$lt": 50}}, "filter05": {"bucket": {"$lt": 5}},
                                          **CONE_FILTERS}


def make_corpus(args: argparse.Namespace, offset: int = 0) -> Any:
    """The run's generator: store_bench's topics (``--skew``) or the held-back cone (``--generator cone``)."""
    if args.generator == "cone":
        return ConeCorpus(DIM, seed=args.seed + offset)
    return SyntheticCorpus(seed=args.seed + offset, skew=args.skew)


def _ndcg_at_10(ranking: list[int], relevant: int) -> float:
    return next((1.0 / math.log2(r + 2) for r, d in enumerate(ranking[:10]) if d == relevant), 0.0)


def _top10(query: np.ndarray, docs: list[np.ndarray]) -> list[int]:
    scores = maxsim([query], docs)[0]
    return sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:10]


def compaction(args: argparse.Namespace) -> dict[str, Any]:
    """Part 1: the cost of int8 and of pooling, measured with exact MaxSim."""
    corpus = make_corpus(args, 1)
    docs = [corpus.document(760) for _ in range(args.quality_docs)]
    int8 = [dequantize(*quantize(d)) for d in docs]
    targets = list(range(0, len(docs), max(1, len(docs) // args.quality_queries)))[: args.quality_queries]
    made = corpus.query_sets([docs[t] for t in targets])
    # Topic sets have no drawn target: their NDCG takes the exact unpooled top 1 as the relevant document.
    sets = {name: [(t, q) for t, q in zip(targets, qs)] for name, qs in made.items() if name not in SET_FILTERS}
    out: dict[str, Any] = {"documents": len(docs), "queries_per_set": len(targets)}
    exact = {name: [_top10(q, docs) for _, q in qs] for name, qs in sets.items()}
    out["int8_top10_overlap"] = {
        name: statistics.mean(len(set(_top10(q, int8)) & set(e)) / 10 for (_, q), e in zip(qs, exact[name]))
        for name, qs in sets.items()
    }
    out["bytes_per_doc"] = {"pool_1": 760 * (DIM + 2) + 16 * (DIM + 2)}
    for factor in (2, 3):
        t0 = time.perf_counter()
        pooled = [pool_vectors(d, factor)[0] for d in docs]
        pool_ms = (time.perf_counter() - t0) / len(docs) * 1000
        stored = [dequantize(*quantize(p)) for p in pooled]
        n_vec = statistics.mean(len(p) for p in pooled)
        row: dict[str, Any] = {"vectors_per_doc": n_vec, "pool_ms_per_doc": pool_ms}
        for name, qs in sets.items():
            ranks = [_top10(q, stored) for _, q in qs]
            rel = [t if name in ("usual", "hard") else e[0] for (t, _), e in zip(qs, exact[name])]
            base = statistics.mean(_ndcg_at_10(e, t) for t, e in zip(rel, exact[name]))
            got = statistics.mean(_ndcg_at_10(r, t) for t, r in zip(rel, ranks))
            row[name] = {
                "ndcg10_unpooled": base,
                "ndcg10_pooled_int8": got,
                "ndcg_kept": got / base if base else float("nan"),
                "top10_overlap_vs_unpooled": statistics.mean(len(set(r) & set(e)) / 10 for r, e in zip(ranks, exact[name])),
            }
        out[f"pool_{factor}"] = row
        out["bytes_per_doc"][f"pool_{factor}"] = round(n_vec * (DIM + 2) + 16 * (DIM + 2))
    return out


def _open(path: Path, server: tuple[str, int] | None, **kw: Any) -> MultiVectorStore:
    if server is None:
        return MultiVectorStore(path, **kw)
    return MultiVectorStore(path, host=server[0], port=server[1], collection="bench", **kw)


def fill(args: argparse.Namespace, path: Path, server: tuple[str, int] | None) -> dict[str, Any]:
    """Part 2a: insert ``--docs`` documents; time the first ``--insert-docs``; keep query targets."""
    corpus = make_corpus(args)
    store = _open(path, server, writable=True)
    store.set_settings({"encoder": {"model_id": "synthetic"}, "index": {"pool_factor": 2}})
    targets: dict[str, np.ndarray] = {}
    insert_s, done = 0.0, 0
    every = max(1, args.docs // max(args.queries, 1))
    while done < args.docs:
        n = min(args.batch, args.docs - done)
        ids = [f"{done + i:032x}" for i in range(n)]
        vecs = [corpus.document(args.vectors) for _ in range(n)]
        metas = [{"source": f"/data/{i}.pdf", "title": i[-6:], "total_pages": 10,
                  "bucket": int(corpus.rng.integers(0, 1000))} for i in ids]
        t0 = time.perf_counter()
        store.add(ids, vecs, metas)
        dt = time.perf_counter() - t0
        if done < args.insert_docs:
            insert_s += dt
        for k, (i, v) in enumerate(zip(ids, vecs)):
            if (done + k) % every == every // 2 and len(targets) < args.queries:
                targets[i] = v
        done += n
        if done % 10_000 < args.batch:
            logging.getLogger("bench").warning("%d documents stored", done)
    store.close()
    queries = corpus.query_sets(list(targets.values()))
    for name, qs in queries.items():
        np.save(path.parent / f"queries-{name}.npy", np.array(qs, dtype=object), allow_pickle=True)
    return {"insert_docs_per_s": min(args.insert_docs, args.docs) / insert_s}


def reader(args: argparse.Namespace) -> None:
    """Part 2b, in a fresh process: ``open`` times a cold open; ``search`` measures queries, recall, memory."""
    path = Path(args.reader)
    server = (args.host, args.port) if args.host else None
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    import chromadb  # noqa: F401  (libraries first: their import time is the same for any store)
    import torch  # noqa: F401

    out["imports_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    store = _open(path, server)
    store.count()
    out["open_s"] = time.perf_counter() - t0
    if args.phase == "cold":  # the cache was deleted: what the first queries cost a fresh reader
        first = path.parent / "queries-usual.npy"  # the held-back generator has no usual set: its first one
        first = first if first.exists() else sorted(path.parent.glob("queries-*.npy"))[0]
        queries = list(np.load(first, allow_pickle=True))
        lat = []
        for q in queries:
            t0 = time.perf_counter()
            store.search(q, 10)
            lat.append(time.perf_counter() - t0)
        out["cold_query_p50_ms"] = statistics.median(lat) * 1000
    if args.phase == "search":
        log = logging.getLogger("bench")  # progress on stderr: a 100k run takes an hour
        queries = {f.stem.removeprefix("queries-"): list(np.load(f, allow_pickle=True))
                   for f in sorted(path.parent.glob("queries-*.npy"))}
        found: dict[str, tuple[str, list[list[str]]]] = {}  # label -> (query set, ids found per query)
        # The store's own count, then each --candidates count, then each --query-peaks rounding of the int8 queries.
        runs: list[tuple[int | None, int | None, str]] = [
            (n, None, f" @{n}" if n else "") for n in [None, *(args.candidates or [])]]
        runs += [(None, p, f" q{p}") for p in args.query_peaks or []]
        for n, peak, suffix in runs:
            restore = _int8_queries_at(peak)
            for name, qs in queries.items():
                label = name + suffix
                lat, ids, scores = [], [], []
                for q in qs:
                    t0 = time.perf_counter()
                    hits = store.search(q, 10, where=SET_FILTERS.get(name), n_candidates=n)
                    lat.append(time.perf_counter() - t0)
                    ids.append([h.id for h in hits])
                    scores.append([h.score for h in hits])
                found[label] = (name, ids, scores)
                out[label] = {"p50_ms": statistics.median(lat) * 1000, "p90_ms": float(np.percentile(lat, 90)) * 1000}
                log.warning("%s: %d queries, p50 %.0f ms", label, len(qs), out[label]["p50_ms"])
            restore()
        out["peak_rss_mb"] = _peak_rss_mb()  # a reader's peak, before the exhaustive ground truth below
        out.update(_rss_split_mb())  # now: the reader's own (anonymous) memory and file pages mapped from the cache
        exact = {}  # the ground truth: every stored document scored (at 100k, 14 s per short query on 2 cores)
        for name, qs in queries.items():
            exact[name] = [store.search(q, 10, exhaustive=True, where=SET_FILTERS.get(name)) for q in qs]
            log.warning("%s: exhaustive MaxSim done", name)
        for label, (name, ids, scores) in found.items():
            best = [{h.id for h in hits} for hits in exact[name]]
            rec = [len(set(got) & b) / max(len(b), 1) for got, b in zip(ids, best)]
            out[label]["recall10"] = statistics.mean(rec)
            out[label]["recall10_near_ties"] = statistics.mean(
                near_tie_recall(got, [h.score for h in hits]) for got, hits in zip(scores, exact[name]))
        docs = store.count()
        parts = store.bytes_by_part()
        out["bytes_per_doc"] = {k: v / docs for k, v in parts.items()}
        out["bytes_per_doc"]["on_disk_store_dir"] = store.bytes_on_disk() / docs
        out["bytes_per_doc"]["local_cache"] = store.cache.bytes() / docs
    store.close()
    print(json.dumps(out))


def _int8_queries_at(peak: int | None) -> Any:
    """Make the int8 products round queries to ``peak`` (127: 8 bits, through ``torch._int_mm`` where oneDNN is exact
    only for 7 bits; 64: 7 bits through oneDNN) until the returned function is called; ``None`` changes nothing.
    What the 7-bit queries of CPUs without VNNI cost recall, on the same store and queries (kernels.query_peak)."""
    from docpc_retrievers.scoring import kernels

    if peak is None:
        return lambda: None
    measured = kernels.onednn_exact_peak
    onednn_peak = measured()
    if peak > onednn_peak:
        kernels.onednn_exact_peak = lambda: 0  # _int_mm with 8-bit queries
    elif onednn_peak:
        kernels.onednn_exact_peak = lambda: peak
    else:
        raise SystemExit(f"--query-peaks {peak}: this torch build has no exact oneDNN int8 products")

    def restore() -> None:
        kernels.onednn_exact_peak = measured

    return restore


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_split_mb() -> dict[str, float]:
    """Resident memory now, split: anonymous (the process's own) and file-backed (mapped cache files, page cache)."""
    out = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssFile:")):
                out["rss_anon_mb" if line.startswith("RssAnon") else "rss_file_mb"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def _run_reader(path: Path, server: tuple[str, int] | None, phase: str, candidates: list[int] | None = None,
                peaks: list[int] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--reader", str(path), "--phase", phase]
    if server:
        cmd += ["--host", server[0], "--port", str(server[1])]
    if candidates:
        cmd += ["--candidates", *map(str, candidates)]
    if peaks:
        cmd += ["--query-peaks", *map(str, peaks)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # its progress and errors go to our stderr
    if proc.returncode != 0:
        raise RuntimeError(f"the {phase} reader failed (exit {proc.returncode}); its errors are printed above")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scale(args: argparse.Namespace, server: tuple[str, int] | None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="docpc-store-bench-", dir=args.workdir))
    try:
        result = fill(args, tmp / "store", server)
        # A reader process on the machine that wrote (its cache filled by the writes).
        searched = _run_reader(tmp / "store", server, "search", args.candidates, args.query_peaks)
        result["cold_open_cached_s"] = searched.pop("open_s")
        result["imports_s"] = searched.pop("imports_s")
        result.update(searched)
        # A reader on another machine: nothing local, everything from Chroma, cache filled as it goes.
        shutil.rmtree(tmp / "store" / "cache", ignore_errors=True)
        cold = _run_reader(tmp / "store", server, "cold")
        result["cold_open_from_chroma_s"] = cold["open_s"]
        result["cold_query_p50_ms"] = cold["cold_query_p50_ms"]
        return result
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


NEAR_TIE_TOLERANCE = 1e-3
"""A result within this fraction of the exact 10th score counts in ``recall10_near_ties`` (not a target: it tells a
miss among near-ties, where exact MaxSim's order rests on the fourth digit, from a document the search lost; the same
idea as the distance tolerance of ann-benchmarks' recall)."""


def near_tie_recall(found: list[float], exact: list[float]) -> float:
    """Share of the exact top ``len(exact)`` matched by ``found`` exact scores at or above the exact last one less
    ``NEAR_TIE_TOLERANCE`` of it (1.0 for an empty exact list)."""
    if not exact:
        return 1.0
    floor = exact[-1] - NEAR_TIE_TOLERANCE * abs(exact[-1])
    return min(len(exact), sum(1 for s in found if s >= floor)) / len(exact)


def exact_top10(sets: dict[str, list[np.ndarray]], flat: np.ndarray, n_docs: int, n_vectors: int) -> dict[str, list[set[int]]]:
    """Per set, each query's exact MaxSim top 10 over ``n_docs`` documents of ``n_vectors`` rows each (``flat``)."""
    import torch

    rows = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
    return {name: [set(torch.topk((torch.from_numpy(q) @ rows.T).view(len(q), n_docs, n_vectors).amax(2).sum(0), 10)
                       .indices.tolist()) for q in qs] for name, qs in sets.items()}


def peers(args: argparse.Namespace) -> dict[str, Any]:
    """Part 3: other multi-vector engines on the same vectors and queries, exact float32 MaxSim as the truth.

    LanceDB's multivector table (flat: exact MaxSim in its engine; and with its IVF-PQ index) beside this
    store. Each row: insert rate, p50/p90 (query encoding excluded), recall@10, bytes per document on disk.
    fast-plaid runs when `--fast-plaid-python` names an interpreter that has it: its wheels are built for
    torch <= 2.11 and this project runs 2.13, so it lives in its own environment (`fast_plaid_peer.py`).
    """
    corpus = make_corpus(args, 2)
    docs = [corpus.document(args.vectors) for _ in range(args.peer_docs)]
    step = max(1, len(docs) // args.queries)
    made = corpus.query_sets([docs[i] for i in range(step // 2, len(docs), step)][: args.queries])
    sets = {name: qs for name, qs in made.items() if name not in SET_FILTERS}
    n = len(docs)
    truth = exact_top10(sets, np.concatenate(docs), n, args.vectors)
    out: dict[str, Any] = {"documents": n, "queries_per_set": args.queries}

    def measure(search: Any) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name, qs in sets.items():
            lat, rec = [], []
            for q, t in zip(qs, truth[name]):
                t0 = time.perf_counter()
                got = search(q)
                lat.append(time.perf_counter() - t0)
                rec.append(len(t & set(got)) / 10)
            row[name] = {"p50_ms": statistics.median(lat) * 1e3, "p90_ms": float(np.percentile(lat, 90)) * 1e3,
                         "recall10": statistics.mean(rec)}
        return row

    with tempfile.TemporaryDirectory(prefix="docpc-peers-", dir=args.workdir) as tmp:
        store = MultiVectorStore(Path(tmp) / "docpc", writable=True)
        t0 = time.perf_counter()
        for s in range(0, n, args.batch):
            store.add([f"{i:032x}" for i in range(s, min(n, s + args.batch))], docs[s : s + args.batch],
                      [{} for _ in docs[s : s + args.batch]])
        row = {"insert_docs_per_s": n / (time.perf_counter() - t0)}
        store.close()
        store = MultiVectorStore(Path(tmp) / "docpc")
        store.search(sets["usual"][0], 10)
        row.update(measure(lambda q: [int(h.id, 16) for h in store.search(q, 10)]))
        store.close()
        row["bytes_per_doc"] = _bytes(Path(tmp) / "docpc") / n
        out["docpc-retrievers (embedded)"] = row
        if args.fast_plaid_python:
            out.update(_fast_plaid(args, docs, sets, truth, Path(tmp) / "fast-plaid"))
        else:
            out["fast-plaid"] = "not run (its wheels need torch <= 2.11: see --fast-plaid-python)"
        try:
            import lancedb
            import pyarrow as pa
        except ImportError:
            out["lancedb"] = "not installed (pip install 'docpc-retrievers[bench]')"
            return out
        db = lancedb.connect(str(Path(tmp) / "lance"))
        kind = pa.list_(pa.list_(pa.float32(), DIM))
        table = db.create_table("docs", schema=pa.schema([pa.field("id", pa.int64()), pa.field("vector", kind)]))
        t0 = time.perf_counter()
        for s in range(0, n, args.batch):
            chunk = docs[s : s + args.batch]
            rows = pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(chunk).ravel()), DIM)
            offsets = pa.array(np.concatenate([[0], np.cumsum([len(c) for c in chunk])]).astype(np.int32))
            table.add(pa.table({"id": pa.array(range(s, s + len(chunk)), pa.int64()),
                                "vector": pa.ListArray.from_arrays(offsets, rows).cast(kind)}))
        row = {"insert_docs_per_s": n / (time.perf_counter() - t0)}
        row.update(measure(lambda q: table.search(q).limit(10).to_arrow()["id"].to_pylist()))
        row["bytes_per_doc"] = _bytes(Path(tmp) / "lance") / n
        out["lancedb multivector, flat"] = row
        t0 = time.perf_counter()
        table.create_index(metric="cosine", vector_column_name="vector")
        row = {"index_build_s": time.perf_counter() - t0}
        row.update(measure(lambda q: table.search(q).limit(10).to_arrow()["id"].to_pylist()))
        row["bytes_per_doc"] = _bytes(Path(tmp) / "lance") / n
        out["lancedb multivector, IVF-PQ index"] = row
    return out


def _fast_plaid(args: argparse.Namespace, docs: list[np.ndarray], sets: dict[str, list[np.ndarray]],
                truth: dict[str, list[set[int]]], folder: Path) -> dict[str, Any]:
    """fast-plaid on the same vectors and queries, through `fast_plaid_peer.py` in its own interpreter."""
    folder.mkdir(parents=True)
    np.save(folder / "docs.npy", np.concatenate(docs).astype(np.float32))
    np.save(folder / "lengths.npy", np.array([len(d) for d in docs]))
    np.savez(folder / "queries.npz", **{f"{name}__{i}": q for name, qs in sets.items() for i, q in enumerate(qs)})
    out: dict[str, Any] = {}
    for nbits in args.fast_plaid_nbits:
        shutil.rmtree(folder / "fast-plaid", ignore_errors=True)
        cmd = [args.fast_plaid_python, str(Path(__file__).with_name("fast_plaid_peer.py")), str(folder),
               "--nbits", str(nbits)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            out[f"fast-plaid, {nbits}-bit"] = f"failed: {done.stderr.strip().splitlines()[-1:]}"
            continue
        got = json.loads((folder / "result.json").read_text())
        row: dict[str, Any] = {"insert_docs_per_s": len(docs) / got["build_s"], "bytes_per_doc": got["bytes"] / len(docs)}
        for name, qs in sets.items():
            answers = [got["queries"][f"{name}__{i}"] for i in range(len(qs))]
            lat = [a["s"] for a in answers]
            row[name] = {"p50_ms": statistics.median(lat) * 1e3, "p90_ms": float(np.percentile(lat, 90)) * 1e3,
                         "recall10": statistics.mean(len(t & set(a["top10"])) / 10 for t, a in zip(truth[name], answers))}
        out[f"fast-plaid, {nbits}-bit (CPU, {got['threads']} threads)"] = row
    return out


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _line(label: str, value: float, unit: str, target: str, ok: bool | None) -> str:
    verdict = "" if ok is None else ("OK" if ok else "MISS")
    return f"{label:<34}{value:>12.3f} {unit:<8}{target:<22}{verdict}"


def report_peers(result: dict[str, Any]) -> None:
    print(f"peers: {result['documents']} documents, {result['queries_per_set']} queries per set, truth = exact float32 MaxSim")
    for system, row in result.items():
        if not isinstance(row, dict):
            if isinstance(row, str):
                print(f"  {system}: {row}")
            continue
        head = ", ".join(f"{k} {row[k]:.1f}" for k in ("insert_docs_per_s", "index_build_s", "bytes_per_doc") if k in row)
        print(f"  {system}: {head}")
        for name, s in row.items():
            if isinstance(s, dict):
                print(f"    {name:<8} p50 {s['p50_ms']:8.1f} ms  p90 {s['p90_ms']:8.1f} ms  recall@10 {s['recall10']:.3f}")


def report(quality: dict[str, Any] | None, runs: dict[str, dict[str, Any]], docs: int) -> None:
    if quality:
        print(f"compaction ({quality['documents']} docs x 760 vectors, {quality['queries_per_set']} queries per set, exact MaxSim)")
        for name, v in quality["int8_top10_overlap"].items():
            print(_line(f"  int8 vs fp32 top-10 overlap ({name})", v, "", "(target >= 0.99)", v >= 0.99))
        for factor in (2, 3):
            row = quality[f"pool_{factor}"]
            print(f"  pool factor {factor}: {row['vectors_per_doc']:.0f} vectors/doc, pooling {row['pool_ms_per_doc']:.0f} ms/doc")
            for name in [k for k in row if isinstance(row[k], dict)]:
                r = row[name]
                print(_line(f"    NDCG@10 kept ({name})", r["ndcg_kept"], "", "(target >= 0.99)", r["ndcg_kept"] >= 0.99)
                      + f"  unpooled {r['ndcg10_unpooled']:.4f}, pooled {r['ndcg10_pooled_int8']:.4f}, top-10 overlap {r['top10_overlap_vs_unpooled']:.2f}")
        for key, v in quality["bytes_per_doc"].items():
            limit = 100 * 1024 if key == "pool_1" else 60 * 1024
            print(_line(f"  bytes a search reads, {key}", v / 1024, "KiB", f"(target <= {limit // 1024} KiB)", v <= limit if key != "pool_3" else None))
    for where, r in runs.items():
        print(f"scale ({where}): {docs} documents")
        print(_line("  insert", r["insert_docs_per_s"], "docs/s", "(target >= 50)", r["insert_docs_per_s"] >= 50))
        print(_line("  cold open (local cache)", r["cold_open_cached_s"], "s", "(target <= 1)", r["cold_open_cached_s"] <= 1))
        if "imports_s" in r:
            print(_line("  (before it: importing chromadb, torch)", r["imports_s"], "s", "", None))
        print(_line("  cold open (Chroma alone)", r["cold_open_from_chroma_s"], "s", "", None))
        print(_line("  first queries, empty cache, p50", r["cold_query_p50_ms"], "ms", "", None))
        for name in [k for k in r if isinstance(r[k], dict) and "recall10" in r[k]]:
            s = r[name]
            print(_line(f"  search p50 ({name})", s["p50_ms"], "ms", "", None))
            print(_line(f"  search p90 ({name})", s["p90_ms"], "ms", "", None))
            print(_line(f"  recall@10 vs exhaustive ({name})", s["recall10"], "", "(target >= 0.99)", s["recall10"] >= 0.99))
            if "recall10_near_ties" in s:
                print(_line(f"  recall@10, ties {NEAR_TIE_TOLERANCE:.1%} ({name})", s["recall10_near_ties"], "", "", None))
        for key, v in r["bytes_per_doc"].items():
            print(_line(f"  bytes/doc {key}", v / 1024, "KiB", "", None))
        print(_line("  reader peak memory", r["peak_rss_mb"], "MiB", "", None))
        for key in ("rss_anon_mb", "rss_file_mb"):
            if key in r:
                print(_line(f"  reader memory after queries, {key[4:8]}", r[key], "MiB", "", None))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000, help="documents in the scale run")
    ap.add_argument("--insert-docs", type=int, default=2_000, help="documents timed for the insert rate")
    ap.add_argument("--vectors", type=int, default=380, help="vectors per document in the scale run")
    ap.add_argument("--batch", type=int, default=64, help="documents per add() call (one commit)")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--quality-docs", type=int, default=1500)
    ap.add_argument("--quality-queries", type=int, default=30)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--server", action="store_true", help="also run the scale part against chroma run on loopback")
    ap.add_argument("--embedded", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--workdir", default=None, help="where the temporary stores go")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--skew", type=float, default=0.0,
        help="Zipf skew of topic popularity (0: the original uniform generator; 1.1: popular topics shared by many "
        "documents, plus query sets drawn around topics, short, long, 5%%/0.5%% filtered, padded with near-identical "
        "tokens, and short copies of a document's rows)",
    )
    ap.add_argument(
        "--generator", choices=("topics", "cone"), default="topics",
        help="topics: the generator above (with --skew); cone: the held-back one (held_back_corpus.py), built "
        "differently to check what was tuned on the first",
    )
    ap.add_argument(
        "--candidates", type=int, nargs="+",
        help="also run every query set with these first-stage counts (search's n_candidates): recall against latency",
    )
    ap.add_argument(
        "--query-peaks", type=int, nargs="+", choices=(64, 127),
        help="also run every query set with int8 queries rounded to these peaks (127: 8 bits, through torch._int_mm "
        "where oneDNN is exact only for 7 bits; 64: 7 bits, what CPUs without VNNI use): what the rounding costs recall",
    )
    ap.add_argument("--peers", action="store_true", help="also run other engines on the same vectors (the [bench] extra)")
    ap.add_argument("--peer-docs", type=int, default=10_000, help="documents in the peers' run")
    ap.add_argument("--fast-plaid-python", help="an interpreter with fast-plaid installed (see fast_plaid_peer.py)")
    ap.add_argument("--fast-plaid-nbits", type=int, nargs="+", default=[4, 2], help="fast-plaid residual bits to run")
    ap.add_argument("--reader", help=argparse.SUPPRESS)
    ap.add_argument("--phase", default="search", help=argparse.SUPPRESS)
    ap.add_argument("--host", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    if args.workdir:  # a folder that does not exist yet is made, not a traceback
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    if args.reader:
        reader(args)
        return
    from machine import cpu_name

    machine = {"cpu": cpu_name()}
    print(f"CPU: {machine['cpu']}", flush=True)
    quality = None if args.skip_quality else compaction(args)
    runs: dict[str, dict[str, Any]] = {}
    if not args.skip_scale:
        if args.embedded:
            runs["embedded"] = scale(args, None)
        if args.server:
            from docpc_retrievers.testing.chroma_server import chroma_server

            served = Path(tempfile.mkdtemp(prefix="docpc-bench-server-", dir=args.workdir))
            try:
                with chroma_server(served) as srv:
                    runs["chroma run"] = scale(args, (srv.host, srv.port))
            finally:  # the server's data: 1.6 GB at 10k documents
                if not args.keep:
                    shutil.rmtree(served, ignore_errors=True)
    report(quality, runs, args.docs)
    peer = peers(args) if args.peers else None
    if peer:
        report_peers(peer)
    if args.json:
        args.json.write_text(json.dumps(
            {"compaction": quality, "scale": runs, "docs": args.docs, "peers": peer, "machine": machine}, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    main()
