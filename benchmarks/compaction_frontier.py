"""Compaction frontier: bytes per document against what an exact float32 unpooled MaxSim ranks.

For each way of storing a document's token vectors (pooling factor 1, 2 or 3,
then a code for each kept vector), every query is scored exhaustively against
every document's decoded vectors, so that only the stored form differs from
the truth: the exact float32 MaxSim over the unpooled vectors. Per query set:

* recall@10: the share of the truth's top 10 in the coded top 10;
* NDCG@10: the coded top 10 ranked against the truth's top 10 as the relevant
  set (binary gains), so a truth document found at rank 9 counts less than at 1.

Codes (bytes per kept vector; a pooled vector also keeps a 2-byte anchor):

* ``float32`` (512), ``int8`` with one float16 scale per vector (130, the
  store's format), ``int6``, ``int5`` and ``int4`` with one scale (98, 82, 66);
* ``int4-centred``: the store-wide mean vector subtracted first (66; the mean
  kept once per store);
* ``int4-clipped``: the step set by the vector's RMS (2.5 RMS kept, the rest
  clipped) instead of its largest value (66);
* ``int4-levels``: 16 store-wide levels fitted to the values over their
  vector's RMS (Lloyd-Max), stored as int8 so int8 products score them (66);
* ``residual-K-b``: PLAID's scheme, the nearest of K store-wide k-means
  centroids (2 bytes) plus ``b`` bits per dimension for the residual, buckets
  at quantiles of the residual values (K x 128 float16 kept once per store);
* ``doc-residual-4``: the nearest of the document's own 16 summary centroids
  (4 bits; the summary is already stored) plus 4 bits per dimension, one scale;
* ``binary`` (16: the signs), and ``binary+int8``: the binary top 100
  re-scored with int8 codes (both kept: 146).

Sets: the real-vector benchmark's (real_vectors.py: 10k documents of real
text encoded by a trained transformer, short and sentence queries, each also
under filters keeping 5% and 0.5% of documents), or ``--synthetic`` for
contrast (store_bench.py's generator).

    .venv/bin/python benchmarks/compaction_frontier.py --json benchmarks/results/frontier.json --plot frontier.svg
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_vectors

from docpc_retrievers.encoders.pooling import pool_vectors
from docpc_retrievers.store.codec import dequantize, quantize
from docpc_retrievers.store.search.centroids import document_centroids

log = logging.getLogger("compaction_frontier")
DIM = 128
ANCHOR = 2
DOCS_PER_PRODUCT = 48


# --- exhaustive MaxSim -------------------------------------------------------------------------------------------


def maxsim(flat: np.ndarray, lengths: np.ndarray, queries: Sequence[np.ndarray]) -> np.ndarray:
    """Exact MaxSim of every query against every document: ``[n_queries, n_docs]`` float32.

    ``flat`` holds the documents' rows one after another (``lengths`` rows each). Documents are taken in order
    of length, a block at a time padded to its longest (padding scores -inf), so every step is one batched
    float32 product and one max on torch's threads; a 0/1 matrix then sums each query's tokens.
    """
    import torch

    q = torch.from_numpy(np.concatenate(queries).astype(np.float32))
    owner = np.repeat(np.arange(len(queries)), [len(x) for x in queries])
    summing = torch.zeros(len(q), len(queries))
    summing[torch.arange(len(q)), torch.from_numpy(owner)] = 1.0
    starts = np.cumsum(lengths) - lengths
    order = np.argsort(lengths, kind="stable")
    out = np.empty((len(queries), len(lengths)), dtype=np.float32)
    for b in range(0, len(order), DOCS_PER_PRODUCT):
        docs = order[b : b + DOCS_PER_PRODUCT]
        longest = int(lengths[docs].max())
        padded = torch.zeros(len(docs), longest, flat.shape[1])
        for i, d in enumerate(docs):
            padded[i, : lengths[d]] = torch.from_numpy(np.asarray(flat[starts[d] : starts[d] + lengths[d]], np.float32))
        products = padded @ q.T  # [docs, longest, tokens]
        pad = torch.arange(longest)[None, :] >= torch.from_numpy(lengths[docs])[:, None]
        products.masked_fill_(pad[:, :, None], float("-inf"))
        out[:, docs] = (products.amax(dim=1) @ summing).T.numpy()
    return out


def top10(scores: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """``[n_queries, 10]`` document indices of the best scores (stable order), among ``allowed`` if given."""
    s = scores if allowed is None else np.where(allowed[None, :], scores, -np.inf)
    part = np.argpartition(-s, 10, axis=1)[:, :10]
    order = np.argsort(-np.take_along_axis(s, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def recall_ndcg(truth: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """Mean recall@10 and binary-gain NDCG@10 of ``got`` against the truth's top-10 sets."""
    discount = 1.0 / np.log2(np.arange(2, 12))
    recalls, ndcgs = [], []
    for t, g in zip(truth, got):
        rel = np.isin(g, t)
        recalls.append(rel.mean())
        ndcgs.append(float((rel * discount).sum() / discount.sum()))
    return float(np.mean(recalls)), float(np.mean(ndcgs))


# --- codes -------------------------------------------------------------------------------------------------------


def int_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """``bits`` per dimension (symmetric, -(2^(bits-1)-1)..2^(bits-1)-1) times one scale per vector, decoded."""
    top = 2 ** (bits - 1) - 1
    peak = np.abs(x).max(axis=1, keepdims=True)
    scale = np.where(peak > 0, peak / top, 1.0).astype(np.float16).astype(np.float32)
    return np.clip(np.rint(x / scale), -top, top) * scale


def int4(x: np.ndarray) -> np.ndarray:
    """4 bits per dimension (-7..7) times one scale per vector, decoded."""
    return int_bits(x, 4)


def int4_clipped(x: np.ndarray, k: float = 2.5) -> np.ndarray:
    """4 bits per dimension (-7..7), the step set by the vector's RMS (values beyond ``k`` RMS clipped)."""
    rms = np.sqrt(np.mean(np.square(x), axis=1, keepdims=True))
    scale = np.where(rms > 0, k * rms / 7.0, 1.0).astype(np.float16).astype(np.float32)
    return np.clip(np.rint(x / scale), -7, 7) * scale


def lloyd_levels(sample: np.ndarray, n: int = 16, iterations: int = 30) -> np.ndarray:
    """The ``n`` levels minimising squared error over ``sample`` (Lloyd-Max: one-dimensional k-means)."""
    levels = np.quantile(sample, (np.arange(n) + 0.5) / n)
    for _ in range(iterations):
        cut = (levels[1:] + levels[:-1]) / 2
        idx = np.searchsorted(cut, sample)
        sums = np.bincount(idx, weights=sample, minlength=n)
        counts = np.bincount(idx, minlength=n)
        levels = np.where(counts > 0, sums / np.maximum(counts, 1), levels)
    return np.sort(levels)


def int4_levels(x: np.ndarray) -> np.ndarray:
    """4 bits per dimension: 16 store-wide levels (Lloyd-Max over values divided by their vector's RMS), kept as
    int8 (scaled so the widest is 127) times one scale per vector, so int8 products still score them."""
    rms = np.sqrt(np.mean(np.square(x), axis=1, keepdims=True)).astype(np.float32)
    u = x / np.maximum(rms, 1e-12)
    levels = lloyd_levels(u[::97].ravel())
    as_int8 = np.rint(levels / np.abs(levels).max() * 127)
    scale = (rms * np.abs(levels).max() / 127).astype(np.float16).astype(np.float32)
    idx = np.searchsorted((levels[1:] + levels[:-1]) / 2, u)
    return as_int8[idx] * scale


def binary(x: np.ndarray) -> np.ndarray:
    """The signs, as unit-length +-1/sqrt(dim) rows (scored against the float query)."""
    return np.where(x >= 0, 1.0, -1.0).astype(np.float32) / np.sqrt(x.shape[1])


def bucketed(residual: np.ndarray, bits: int, sample: np.ndarray) -> np.ndarray:
    """PLAID's residual buckets: cut-offs and values at quantiles of ``sample``, one table for all dimensions."""
    buckets = 2**bits
    cutoffs = np.quantile(sample, np.arange(1, buckets) / buckets)
    values = np.quantile(sample, (np.arange(buckets) + 0.5) / buckets).astype(np.float32)
    return values[np.searchsorted(cutoffs, residual)]


class GlobalCodebook:
    """K spherical k-means centroids over a sample of the store's vectors, and each vector's nearest."""

    def __init__(self, flat: np.ndarray, k: int, seed: int = 0) -> None:
        import faiss

        rng = np.random.default_rng(seed)
        sample = flat[rng.choice(len(flat), min(len(flat), 64 * k), replace=False)].astype(np.float32)
        km = faiss.Kmeans(DIM, k, niter=10, spherical=True, seed=seed + 1, verbose=False)
        km.train(sample)
        self.centroids = km.centroids.astype(np.float16).astype(np.float32)
        index = faiss.IndexFlatIP(DIM)
        index.add(self.centroids)
        self.nearest = np.empty(len(flat), dtype=np.int64)
        for s in range(0, len(flat), 500_000):
            self.nearest[s : s + 500_000] = index.search(np.ascontiguousarray(flat[s : s + 500_000], np.float32), 1)[1][:, 0]

    def decode(self, flat: np.ndarray, bits: int) -> np.ndarray:
        coarse = self.centroids[self.nearest]
        residual = flat.astype(np.float32) - coarse
        return coarse + bucketed(residual, bits, residual[::97].ravel())


def _doc_residual(x: np.ndarray) -> np.ndarray:
    c = document_centroids(x, 16)
    coarse = c[np.argmax(x @ c.T, axis=1)]
    return coarse + int4(x - coarse)


def doc_residual(docs: Sequence[np.ndarray], workers: int) -> np.ndarray:
    """Each vector as its document's nearest summary centroid plus an int4 residual with one scale, decoded."""
    with Pool(workers) as pool:
        return np.concatenate(pool.map(_doc_residual, [d.astype(np.float32) for d in docs], chunksize=64))


# --- pooling -----------------------------------------------------------------------------------------------------


def _pool(args: tuple[np.ndarray, int]) -> np.ndarray:
    return pool_vectors(args[0].astype(np.float32), args[1])[0].astype(np.float16)


def pooled(docs: Sequence[np.ndarray], factor: int, cache: Path, workers: int) -> list[np.ndarray]:
    """``docs`` pooled by ``factor`` with the store's pooling (cached: Ward over 10k documents takes minutes)."""
    if factor == 1:
        return list(docs)
    if cache.exists():
        z = np.load(cache)
        return real_vectors._split(z["rows"], z["lengths"])
    with Pool(workers) as pool:
        out = pool.map(_pool, [(d, factor) for d in docs], chunksize=32)
    np.savez(cache, rows=np.concatenate(out), lengths=np.array([len(d) for d in out]))
    return out


# --- the run -----------------------------------------------------------------------------------------------------


def query_sets(queries: dict[str, list[np.ndarray]], buckets: np.ndarray | None) -> dict[str, np.ndarray | None]:
    """Set name -> allowed-documents mask (None: all) for the plain and, given buckets, the filtered sets."""
    sets: dict[str, np.ndarray | None] = {}
    for name in queries:
        sets[name] = None
        if buckets is not None:
            sets[f"{name}/5%"] = buckets < 10
            sets[f"{name}/0.5%"] = buckets == 0
    return sets


def synthetic(args: argparse.Namespace) -> tuple[list[np.ndarray], dict[str, list[np.ndarray]]]:
    """store_bench.py's skewed-topic documents and its unfiltered query sets."""
    from store_bench import SET_FILTERS, make_corpus

    ns = argparse.Namespace(generator="topics", skew=1.1, seed=0, docs=args.docs, queries=args.queries)
    corpus = make_corpus(ns, 2)
    docs = [corpus.document(args.vectors).astype(np.float16) for _ in range(args.docs)]
    step = max(1, len(docs) // args.queries)
    made = corpus.query_sets([docs[i].astype(np.float32) for i in range(step // 2, len(docs), step)][: args.queries])
    return docs, {k: [np.asarray(q, np.float32) for q in v] for k, v in made.items() if k not in SET_FILTERS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--synthetic", action="store_true", help="store_bench's generator instead of real vectors")
    ap.add_argument("--vectors", type=int, default=760, help="vectors per synthetic document")
    ap.add_argument("--factors", default="1,2,3")
    ap.add_argument("--codes", default="", help="comma-separated subset of the codes (default: all)")
    ap.add_argument("--centroids", type=int, default=4096, help="K of the store-wide codebook")
    ap.add_argument("--cache", type=Path, default=real_vectors.DEFAULT_CACHE)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="an SVG of NDCG@10 (worst set) against KB per document")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    if args.synthetic:
        docs, queries = synthetic(args)
        buckets, key = None, f"synthetic-{args.docs}-{args.vectors}"
    else:
        corpus = real_vectors.build(args.docs, args.cache, args.queries)
        docs, queries, buckets = corpus.vectors, corpus.queries, corpus.buckets
        key = f"{corpus.manifest['units_key']}-{args.docs}"
    sets = query_sets(queries, buckets)
    qlist = [q for name in queries for q in queries[name]]
    spans = {}
    at = 0
    for name in queries:
        spans[name] = slice(at, at + len(queries[name]))
        at += len(queries[name])

    def ranked(scores: np.ndarray, fine: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Each set's top 10 by ``scores``; given ``fine``, the top 100 by ``scores`` re-ranked by ``fine``."""
        out = {}
        for s, mask in sets.items():
            rows = spans[s.split("/")[0]]
            if fine is None:
                out[s] = top10(scores[rows], mask)
                continue
            coarse = scores[rows] if mask is None else np.where(mask[None, :], scores[rows], -np.inf)
            short = np.argpartition(-coarse, 100, axis=1)[:, :100]
            rescored = np.full_like(coarse, -np.inf)
            np.put_along_axis(rescored, short, np.take_along_axis(fine[rows], short, axis=1), axis=1)
            out[s] = top10(rescored, mask)
        return out

    lengths = np.array([len(d) for d in docs])
    flat = np.concatenate(docs)
    t0 = time.perf_counter()
    cached_truth = args.cache / f"frontier-truth-{key}-{len(qlist)}.npy"
    if cached_truth.exists():
        truth_scores = np.load(cached_truth)
    else:
        truth_scores = maxsim(flat, lengths, qlist)
        np.save(cached_truth, truth_scores)
    truth = ranked(truth_scores)
    log.info("truth: %d documents, %d vectors, %.0f s", len(docs), len(flat), time.perf_counter() - t0)

    wanted = set(filter(None, args.codes.split(",")))
    rows: list[dict[str, Any]] = []
    print(f"{'real' if not args.synthetic else 'synthetic'} vectors: {len(docs)} documents, "
          f"{lengths.mean():.0f} vectors each; {len(qlist)} queries; truth exact float32 MaxSim unpooled")
    print(f"{'pool':>4} {'code':<18} {'B/vec':>6} {'KB/doc':>7}  worst recall@10  worst NDCG@10   per set (recall/NDCG)")
    for factor in (int(f) for f in args.factors.split(",")):
        kept = pooled(docs, factor, args.cache / f"frontier-pooled{factor}-{key}.npz", args.workers)
        n = np.array([len(d) for d in kept])
        x = np.concatenate(kept).astype(np.float32)
        anchor = ANCHOR if factor > 1 else 0
        per_store: dict[str, int] = {}
        codes: dict[str, tuple[int, Callable[[], np.ndarray]]] = {
            "float32": (4 * DIM, lambda: x),
            "int8": (DIM + 2, lambda: dequantize(*quantize(x))),
            "int6": (DIM * 6 // 8 + 2, lambda: int_bits(x, 6)),
            "int5": (DIM * 5 // 8 + 2, lambda: int_bits(x, 5)),
            "int4": (DIM // 2 + 2, lambda: int4(x)),
            "int4-centred": (DIM // 2 + 2, lambda: int4(x - x.mean(0)) + x.mean(0)),
            "int4-clipped": (DIM // 2 + 2, lambda: int4_clipped(x)),
            "int4-levels": (DIM // 2 + 2, lambda: int4_levels(x)),
            "doc-residual-4": (DIM // 2 + 3, lambda: doc_residual(kept, args.workers)),
            "binary": (DIM // 8, lambda: binary(x)),
        }
        book: list[GlobalCodebook] = []

        def residual(bits: int) -> np.ndarray:
            if not book:
                book.append(GlobalCodebook(x, args.centroids))
            return book[0].decode(x, bits)

        for bits in (4, 2):
            codes[f"residual-{args.centroids}-{bits}"] = (2 + DIM * bits // 8, lambda b=bits: residual(b))
            per_store[f"residual-{args.centroids}-{bits}"] = args.centroids * DIM * 2
        per_store["int4-centred"] = DIM * 4
        int8_scores: list[np.ndarray] = []
        for name, (per_vector, decode) in codes.items():
            if wanted and name not in wanted and not (name == "int8" and "binary+int8" in wanted):
                continue
            t0 = time.perf_counter()
            scores = truth_scores if factor == 1 and name == "float32" else maxsim(decode(), n, qlist)
            if name == "int8":
                int8_scores.append(scores)
            results: list[tuple[str, int, np.ndarray, np.ndarray | None]] = [(name, per_vector, scores, None)]
            if name == "binary" and int8_scores and (not wanted or "binary+int8" in wanted):
                results.append(("binary+int8", per_vector + DIM + 2, scores, int8_scores[0]))
            for label, bpv, s, fine in results:
                if wanted and label not in wanted:
                    continue
                got = ranked(s, fine)
                per_set = {k: recall_ndcg(truth[k], got[k]) for k in sets}
                kb = ((bpv + anchor) * n.mean() + per_store.get(label, 0) / len(docs)) / 1000
                row = {"pool_factor": factor, "code": label, "bytes_per_vector": bpv + anchor,
                       "vectors_per_doc": float(n.mean()), "kb_per_doc": kb,
                       "recall10": {k: v[0] for k, v in per_set.items()},
                       "ndcg10": {k: v[1] for k, v in per_set.items()},
                       "seconds": time.perf_counter() - t0}
                rows.append(row)
                if args.json:  # written as it goes: a long run stopped early keeps its rows
                    args.json.write_text(json.dumps({"rows": rows}, indent=1))
                print(f"{factor:>4} {label:<18} {bpv + anchor:6d} {kb:7.1f}  {min(row['recall10'].values()):15.3f} "
                      f"{min(row['ndcg10'].values()):14.3f}   "
                      + "  ".join(f"{k} {v[0]:.3f}/{v[1]:.3f}" for k, v in per_set.items()), flush=True)
    out = {"vectors": "synthetic" if args.synthetic else "real", "documents": len(docs),
           "mean_vectors": float(lengths.mean()), "queries": {k: len(v) for k, v in queries.items()}, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if args.plot:
        args.plot.write_text(svg(rows))


def svg(rows: list[dict[str, Any]], width: int = 720, height: int = 440) -> str:
    """A plain SVG scatter: KB per document (log x) against the worst set's NDCG@10, one label per point."""
    pad = 60
    kb = np.log10([r["kb_per_doc"] for r in rows])
    nd = np.array([min(r["ndcg10"].values()) for r in rows])
    lo, hi = float(kb.min()) - 0.05, float(kb.max()) + 0.05
    ylo = float(min(nd.min(), 0.9)) - 0.01

    def px(k: float, v: float) -> tuple[float, float]:
        return (pad + (k - lo) / (hi - lo) * (width - 2 * pad),
                height - pad - (v - ylo) / (1.0 - ylo) * (height - 2 * pad))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="10">',
             f'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">KB per document (log scale)</text>',
             f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" text-anchor="middle">'
             "NDCG@10 of the exact top 10 (worst set)</text>"]
    y99 = px(lo, 0.99)[1]
    parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y99}" y2="{y99}" stroke="grey" stroke-dasharray="4"/>')
    parts.append(f'<text x="{width - pad}" y="{y99 - 3}" text-anchor="end">0.99</text>')
    for r, k, v in zip(rows, kb, nd):
        x, y = px(float(k), float(v))
        colour = ["", "black", "blue", "red"][r["pool_factor"]]
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{x + 4:.1f}" y="{y - 4:.1f}" fill="{colour}">p{r["pool_factor"]} {r["code"]}</text>')
    for v in np.arange(np.ceil(ylo * 20) / 20, 1.001, 0.05):
        _, y = px(lo, float(v))
        parts.append(f'<text x="{pad - 6}" y="{y + 3:.0f}" text-anchor="end">{v:.2f}</text>')
    for t in range(int(np.floor(lo * 4)), int(np.ceil(hi * 4)) + 1):
        x, _ = px(t / 4, ylo)
        if pad <= x <= width - pad:
            parts.append(f'<text x="{x:.0f}" y="{height - pad + 14}" text-anchor="middle">{10 ** (t / 4):.0f}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


if __name__ == "__main__":
    main()
