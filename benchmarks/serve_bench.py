"""A warm ``docpc serve`` against one-shot ``docpc search``, side by side in one run on one store.

Builds a store of ``--corpus`` (default: the generated 'small' set) with the tiny random checkpoint (no
download; a real ColQwen2 loads far slower, so the ratio here is a floor), starts the server on loopback, and
times for the same queries:

* one-shot: ``docpc search --store S QUERY`` as a new process each time (Python start, imports, model load,
  store open, search);
* warm, JSON API: ``POST /search`` to the running server;
* warm, MCP: the ``search`` tool over streamable HTTP (one client session; images off).

Prints the median wall time of each and the ratios. Run:

    .venv/bin/python benchmarks/serve_bench.py
    .venv/bin/python benchmarks/serve_bench.py --corpus DIR --queries 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402
from rerank_bench import QUERIES, _corpus  # noqa: E402

from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2  # noqa: E402


def _env() -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", ANONYMIZED_TELEMETRY="False")


def _docpc() -> list[str]:
    script = Path(sys.executable).with_name("docpc")
    return [str(script)] if script.exists() else [sys.executable, "-m", "docpc_retrievers.cli.app"]


def indexed_store(corpus_arg: str | None, work: Path) -> Path:
    """The corpus (or the generated 'small' set) indexed with the tiny random checkpoint into ``work/store``."""
    model = build_tiny_colqwen2(work / "checkpoint", seed=0)
    corpus = _corpus(corpus_arg, work)
    store = work / "store"
    subprocess.run([*_docpc(), "index", str(corpus), "--store", str(store), "--model", str(model)],
                   env=_env(), check=True, capture_output=True)
    return store


async def _mcp_times(url: str, queries: list[str]) -> list[float]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    times = []
    async with streamablehttp_client(f"{url}/mcp") as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("search", {"query": queries[0], "k": 5, "images": 0})  # first call outside
        for q in queries:
            t0 = time.perf_counter()
            result = await session.call_tool("search", {"query": q, "k": 5, "images": 0})
            times.append(time.perf_counter() - t0)
            assert not result.isError, result.content
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="a folder of PDFs (default: the generated 'small' set)")
    ap.add_argument("--queries", type=int, default=5, help="queries timed each way")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    queries = (QUERIES * 10)[: args.queries]
    with tempfile.TemporaryDirectory(prefix="docpc-serve-bench-") as tmp:
        store = indexed_store(args.corpus, Path(tmp))
        one_shot = []
        for q in queries:
            t0 = time.perf_counter()
            subprocess.run([*_docpc(), "search", "--store", str(store), q, "--json"], env=_env(), check=True,
                           capture_output=True)
            one_shot.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        server = subprocess.Popen([*_docpc(), "serve", "--store", str(store), "--bind", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env())
        try:
            assert server.stdout is not None
            found = re.search(r"ready at (http://\S+)", server.stdout.readline())
            assert found, "the server printed no readiness line"
            url, started = found.group(1), time.perf_counter() - t0
            with httpx.Client(timeout=120) as client:
                client.post(f"{url}/search", json={"query": queries[0]})  # first call outside the timing
                warm = []
                for q in queries:
                    t0 = time.perf_counter()
                    client.post(f"{url}/search", json={"query": q, "k": 5}).raise_for_status()
                    warm.append(time.perf_counter() - t0)
            mcp = asyncio.run(_mcp_times(url, queries))
        finally:
            server.terminate()
            server.wait(timeout=60)
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "queries": len(queries),
           "one_shot_s": statistics.median(one_shot), "server_start_s": started,
           "warm_http_s": statistics.median(warm), "warm_mcp_s": statistics.median(mcp)}
    print(f"{out['cpu']}, {out['cores']} cores; tiny random checkpoint; median of {len(queries)} queries")
    print(f"  one-shot docpc search (new process each) {out['one_shot_s'] * 1000:8.0f} ms")
    print(f"  server start until ready                 {started * 1000:8.0f} ms (once)")
    print(f"  warm server, JSON API                    {out['warm_http_s'] * 1000:8.1f} ms  "
          f"({out['one_shot_s'] / out['warm_http_s']:.0f}x faster)")
    print(f"  warm server, MCP search tool             {out['warm_mcp_s'] * 1000:8.1f} ms  "
          f"({out['one_shot_s'] / out['warm_mcp_s']:.0f}x faster)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
