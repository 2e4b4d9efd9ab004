"""Throughput of one ``docpc serve`` under 1, 4 and 8 concurrent clients, measured in turns in one run.

Builds a store of ``--corpus`` (default: the generated 'small' set) with the tiny random checkpoint, starts the
server on loopback, then for each round and each client count has that many clients send ``--requests`` searches
each (JSON API, no pictures) and records requests per second; the rounds interleave the client counts so a change in
the machine's load touches each alike. Prints each count's median and its ratio to one client. The tiny model makes
the encoder's share small; with a real model the forward pass (one at a time) bounds every count alike.

    .venv/bin/python benchmarks/serve_clients_bench.py --rounds 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402
from rerank_bench import QUERIES  # noqa: E402
from serve_bench import _docpc, _env, indexed_store  # noqa: E402


def _load(url: str, clients: int, requests: int) -> float:
    """Requests per second with ``clients`` threads each sending ``requests`` searches."""

    def client(n: int) -> None:
        with httpx.Client(timeout=120) as http:
            for i in range(requests):
                http.post(f"{url}/search", json={"query": QUERIES[(n + i) % len(QUERIES)], "k": 5}).raise_for_status()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(client, range(clients)))
    return clients * requests / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="a folder of PDFs (default: the generated 'small' set)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--requests", type=int, default=40, help="searches per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="docpc-serve-clients-") as tmp:
        store = indexed_store(args.corpus, Path(tmp))
        server = subprocess.Popen([*_docpc(), "serve", "--store", str(store), "--bind", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env())
        try:
            assert server.stdout is not None
            found = re.search(r"ready at (http://\S+)", server.stdout.readline())
            assert found, "the server printed no readiness line"
            url = found.group(1)
            _load(url, 2, 5)  # warm-up
            rates: dict[int, list[float]] = {c: [] for c in args.clients}
            for _ in range(args.rounds):
                for c in args.clients:
                    rates[c].append(_load(url, c, args.requests))
        finally:
            server.terminate()
            server.wait(timeout=60)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "load_1min_after": load, "requests_per_client": args.requests,
           "rounds": args.rounds, "requests_per_s": {str(c): statistics.median(r) for c, r in rates.items()},
           "all_rounds": {str(c): r for c, r in rates.items()}}
    one = out["requests_per_s"][str(args.clients[0])]
    print(f"{out['cpu']}, {out['cores']} cores; tiny random checkpoint; median of {args.rounds} rounds")
    for c in args.clients:
        rate = out["requests_per_s"][str(c)]
        print(f"  {c} client(s): {rate:7.1f} requests/s  ({rate / one:.2f}x one client)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
