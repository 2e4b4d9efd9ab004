"""Searching while a missing token stage is built in the background: recall and latency, round by round.

A reader on a machine that skipped ``docpc warm`` has no token stage; on a store of more than 1,000 documents it
builds one in a background thread and answers meanwhile from the centroid summaries and from the part built so far
(store/search/token_build.py). This measures that window on a store kept by ``store_bench.py --keep`` (its folder
holds ``store/`` and ``queries-*.npy``): it moves the store's saved token stage aside, opens a reader, starts the
build with a short query, and every ``--every`` seconds runs one round of each query set, printing the coverage of the
part queries search, the short set's recall@10 against exhaustive MaxSim over the same stored vectors, and p50 / p90
ms; then ``--after`` rounds once the stage is ready. The token stage moved aside is deleted once the new one is saved
(``--restore`` puts it back instead). The exhaustive top 10 is computed first (minutes at 100k) and kept in
``--truth`` (default ``RUN/truth-short.json``) for the next run.

``--niceness 0 10 0 10 --rounds 6`` runs four readers in turn, each with its build thread at that nice value
(``token_build.BUILD_NICENESS``) and stopped after 6 rounds, and prints their latencies side by side: what the build's
lower priority buys queries during it.

    python benchmarks/background_build_bench.py RUN [--sets short usual] [--every 60] [--after 3] [--restore]
        [--niceness N [N ...]] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.search import token_build


def _truth(store_path: Path, queries: list[np.ndarray], path: Path) -> list[set[str]]:
    """Each query's exhaustive top 10 (read from ``path`` when it holds as many, else computed and written there)."""
    if path.is_file():
        saved = json.loads(path.read_text())
        if len(saved) == len(queries):
            return [set(t) for t in saved]
    started = time.perf_counter()
    with MultiVectorStore(store_path) as store:
        top = [[h.id for h in store.search(q, top_k=10, exhaustive=True)] for q in queries]
    path.write_text(json.dumps(top))
    print(f"exhaustive top 10 of {len(queries)} queries in {time.perf_counter() - started:.0f} s -> {path}", flush=True)
    return [set(t) for t in top]


def _coverage(store: MultiVectorStore) -> float | None:
    """The share of the store the part being built holds (None: no part handed to queries yet)."""
    view = store._view
    build = None if view is None else view._build
    partial = None if build is None else build.partial
    return None if partial is None else round(partial.coverage, 3)


def _round(store: MultiVectorStore, sets: dict[str, list[np.ndarray]], truth: list[set[str]],
           started: float) -> dict[str, Any]:
    """One pass over every set: p50 / p90 / max ms per set, and the short set's recall@10."""
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - started), "coverage": _coverage(store)}
    for name, queries in sets.items():
        lat, found = [], []
        for q in queries:
            t = time.perf_counter()
            hits = store.search(q, top_k=10)
            lat.append(time.perf_counter() - t)
            found.append({h.id for h in hits})
        out[name] = [round(statistics.median(lat) * 1000, 1), round(float(np.percentile(lat, 90)) * 1000, 1),
                     round(max(lat) * 1000, 1)]
        if name == "short":
            out["recall_short"] = round(statistics.mean(len(t & f) / 10 for t, f in zip(truth, found)), 3)
    return out


def _arm(store_path: Path, sets: dict[str, list[np.ndarray]], truth: list[set[str]], args: argparse.Namespace,
         label: str) -> dict[str, Any]:
    """One reader from an empty token stage: the build started by a short query, rounds during it (at most
    ``args.rounds``: then the reader is closed, which stops the build), and ``args.after`` rounds once it is ready."""
    t = time.perf_counter()
    store = MultiVectorStore(store_path)
    documents = store.count()  # the first call opens the store
    print(f"{label}open {time.perf_counter() - t:.2f} s, {documents} documents", flush=True)
    started = time.perf_counter()
    store.search(sets["short"][0], top_k=10)
    print(f"{label}first short query {1000 * (time.perf_counter() - started):.0f} ms, token stage {store.token_stage}",
          flush=True)
    during: list[dict[str, Any]] = []
    while store.token_stage == "building" and (args.rounds is None or len(during) < args.rounds):
        result = _round(store, sets, truth, started)
        if store.token_stage == "building":  # a round the hand-over cut short is not a round during the build
            during.append(result)
            print(f"{label}during", json.dumps(result), flush=True)
        deadline = time.perf_counter() + args.every
        while store.token_stage == "building" and time.perf_counter() < deadline:
            time.sleep(1)
    ready = time.perf_counter() - started if store.token_stage == "ready" else None
    after: list[dict[str, Any]] = []
    if ready is not None:
        print(f"{label}token stage {store.token_stage} after {ready:.0f} s", flush=True)
        after = [_round(store, sets, truth, started) for _ in range(args.after)]
        for result in after:
            print(f"{label}after", json.dumps(result), flush=True)
    else:
        print(f"{label}stopped after {len(during)} rounds, the build {store.token_stage}", flush=True)
    store.close()
    return {"ready_s": ready, "during": during, "after": after,
            "mean_recall_short_during": statistics.mean(r["recall_short"] for r in during) if during else None}


def _side_by_side(arms: list[tuple[int, dict[str, Any]]], sets: list[str]) -> None:
    """Round by round, each arm's coverage and p50 per set, and the p50 ratios of the first niceness to the others."""
    first = arms[0][0]
    print(f"\nround by round during the build (p50 ms; ratio: niceness {first}'s p50 over the other's)")
    for niceness, result in arms:
        rounds = result["during"]
        print(f"  niceness {niceness}: " + "; ".join(
            f"cov {r['coverage']} " + " ".join(f"{name} {r[name][0]:.0f}" for name in sets) for r in rounds))
    by_niceness: dict[int, list[dict[str, Any]]] = {}
    for niceness, result in arms:
        by_niceness.setdefault(niceness, []).extend(result["during"])
    for niceness, rounds in by_niceness.items():
        if not rounds:
            continue
        p50 = {name: statistics.median(r[name][0] for r in rounds) for name in sets}
        p90 = {name: statistics.median(r[name][1] for r in rounds) for name in sets}
        line = ", ".join(f"{name} {p50[name]:.0f} / {p90[name]:.0f}" for name in sets)
        print(f"  niceness {niceness}, median over {len(rounds)} rounds of p50 / p90: {line}")
    base = by_niceness.get(first) or []
    for niceness, rounds in by_niceness.items():
        if niceness == first or not rounds or not base:
            continue
        ratio = ", ".join(
            f"{name} {statistics.median(r[name][0] for r in base) / statistics.median(r[name][0] for r in rounds):.2f}x"
            for name in sets)
        print(f"  niceness {first} over {niceness}: {ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a folder kept by store_bench.py --keep (store/ and queries-*.npy)")
    ap.add_argument("--sets", nargs="+", default=["short", "usual"], help="query sets to run (short is required)")
    ap.add_argument("--every", type=float, default=60.0, help="seconds between rounds during the build")
    ap.add_argument("--after", type=int, default=3, help="rounds once the token stage is ready")
    ap.add_argument("--rounds", type=int, help="stop each reader after this many rounds during the build")
    ap.add_argument(
        "--niceness", type=int, nargs="+",
        help="run one reader per value, in this order, its build thread at that nice value (token_build."
        "BUILD_NICENESS; 0: the process's priority), and print them side by side (e.g. 0 10 0 10 with --rounds)",
    )
    ap.add_argument("--truth", type=Path, help="the short set's exhaustive top 10 (default RUN/truth-short.json)")
    ap.add_argument("--restore", action="store_true", help="put the token stage moved aside back afterwards")
    ap.add_argument("--json", type=Path, help="also write the rounds here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("chromadb", "httpx", "urllib3", "faiss"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if "short" not in args.sets:
        ap.error("--sets must include short (its recall is what the build changes)")
    store_path = args.run / "store"
    sets = {name: list(np.load(args.run / f"queries-{name}.npy", allow_pickle=True)) for name in args.sets}
    truth = _truth(store_path, sets["short"], args.truth or args.run / "truth-short.json")
    stage = store_path / "cache" / "token_stage"
    aside = stage.with_name("token_stage.aside")
    if stage.exists():
        shutil.rmtree(aside, ignore_errors=True)
        stage.rename(aside)
    arms: list[tuple[int, dict[str, Any]]] = []
    try:
        for niceness in args.niceness or [token_build.BUILD_NICENESS]:
            shutil.rmtree(stage, ignore_errors=True)  # one an earlier arm finished: every arm starts without one
            token_build.BUILD_NICENESS = niceness
            label = f"[niceness {niceness}] " if args.niceness else ""
            arms.append((niceness, _arm(store_path, sets, truth, args, label)))
    finally:
        if args.restore and aside.exists():
            shutil.rmtree(stage, ignore_errors=True)
            aside.rename(stage)
        else:
            shutil.rmtree(aside, ignore_errors=True)
    for niceness, result in arms:
        print(f"niceness {niceness}: short recall@10 during the build, mean of {len(result['during'])} rounds: "
              f"{result['mean_recall_short_during']}; after: {[r['recall_short'] for r in result['after']]}", flush=True)
    if len(arms) > 1:
        _side_by_side(arms, args.sets)
    if args.json:
        summary = arms[0][1] if len(arms) == 1 else [{"niceness": n, **r} for n, r in arms]
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
