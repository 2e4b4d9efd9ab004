"""What a reader and a writer of a big store pull and hold, behind a real ``chroma run`` server.

Builds a store of ``--docs`` synthetic documents on a ``chroma run`` server on loopback (records-only: each
document has ``--vectors`` unit rows, enough for a full first-stage summary of 16 centroids, so its record is the
size a real document's is; its payload is small, since opening and following read records, not payloads). Then,
each in its own process so that memory is its own:

* ``reader``: a new reader with only the server's address and an empty cache opens the store and answers one
  query: seconds until the store is open (the view built) and until the first answer, bytes pulled from the
  server (HTTP response bodies), peak memory, and memory once steady;
* ``writer``: a fresh writer adds one document: bytes pulled before its first write and its peak memory;
* ``follow``: a reader that is open and warm; another process adds ``--follow-share`` of the store; the seconds
  until the reader's next search sees the new documents, and the reader's memory before and after.

    .venv/bin/python benchmarks/open_follow_bench.py --docs 100000 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_name  # noqa: E402

log = logging.getLogger("open_follow_bench")
COLLECTION = "bench-open"


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _docs(start: int, n: int, vectors: int, dim: int) -> tuple[list[str], list[np.ndarray]]:
    rng = np.random.default_rng(start)
    return [f"doc{start + i:07d}" for i in range(n)], [_unit(rng.standard_normal((vectors, dim))) for _ in range(n)]


def _meta(doc_id: str) -> dict[str, Any]:
    return {"source": f"/data/{doc_id}.pdf", "title": doc_id, "bucket": int(doc_id[-2:])}


class _Pulled:
    """Bytes of every HTTP response body this process receives (chromadb's client speaks httpx)."""

    def __init__(self) -> None:
        import httpx

        self.bytes = 0
        real = httpx.Client.send
        outer = self

        def send(client: Any, request: Any, **kwargs: Any) -> Any:
            response = real(client, request, **kwargs)
            response.read()
            outer.bytes += len(response.content)
            return response

        httpx.Client.send = send  # type: ignore[method-assign]


def _imported() -> None:
    """Import what a search imports (torch among them) before the baseline, so memory figures are the store's."""
    import torch  # noqa: F401

    import docpc_retrievers.store.multivector  # noqa: F401
    import docpc_retrievers.store.search.centroids  # noqa: F401


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _peak() -> int:
    """This process's peak resident memory (VmHWM: ru_maxrss would carry the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _store(args: argparse.Namespace, cache: Path, *, writable: bool = False) -> Any:
    from docpc_retrievers.store.multivector import MultiVectorStore

    return MultiVectorStore(cache, host="127.0.0.1", port=args.port, collection=COLLECTION, writable=writable)


def role_reader(args: argparse.Namespace) -> dict[str, Any]:
    pulled = _Pulled()
    _imported()
    gc.collect()
    base = _rss()
    _, query = _docs(args.docs // 2, 1, args.vectors, args.dim)
    t0 = time.perf_counter()
    store = _store(args, Path(args.cache))
    n = store.count()
    opened = time.perf_counter() - t0
    open_bytes = pulled.bytes
    hit = store.search(query[0][:8], top_k=10)[0]
    first = time.perf_counter() - t0
    gc.collect()
    steady = _rss()
    out = {"documents": n, "open_s": opened, "first_answer_s": first, "open_bytes": open_bytes,
           "first_answer_bytes": pulled.bytes, "top1": hit.id, "rss_before": base, "rss_steady": steady,
           "rss_peak": _peak()}
    store.close()
    return out


def role_writer(args: argparse.Namespace) -> dict[str, Any]:
    pulled = _Pulled()
    from docpc_retrievers.store.engine import ChromaEngine

    at_write: list[int] = []
    real_write = ChromaEngine.write

    def write(engine: Any, docs: Any) -> int:
        at_write.append(pulled.bytes)
        return real_write(engine, docs)

    ChromaEngine.write = write  # type: ignore[method-assign]
    _imported()
    gc.collect()
    base = _rss()
    ids, vectors = _docs(10**6 + os.getpid() % 1000, 1, args.vectors, args.dim)
    t0 = time.perf_counter()
    with _store(args, Path(args.cache), writable=True) as store:
        store.add(ids, vectors, [_meta(i) for i in ids])
        seconds = time.perf_counter() - t0
        store.delete(ids)
    return {"bytes_before_first_write": at_write[0], "bytes_total": pulled.bytes, "add_s": seconds,
            "rss_before": base, "rss_peak": _peak()}


def role_follow(args: argparse.Namespace) -> dict[str, Any]:
    store = _store(args, Path(args.cache))
    store.warm()  # every payload cached: the search after the change pays for the change alone
    _, warm = _docs(3, 1, args.vectors, args.dim)
    store.search(warm[0][:8], top_k=10)
    gc.collect()
    before = _rss()
    print("ready", flush=True)
    sys.stdin.readline()  # the parent has added the new documents
    start = int(sys.stdin.readline())
    _, new = _docs(start, 1, args.vectors, args.dim)
    t0 = time.perf_counter()
    store.refresh()
    followed = time.perf_counter() - t0
    hit = store.search(new[0][:8], top_k=1)[0]
    seen = time.perf_counter() - t0
    t1 = time.perf_counter()
    store.search(new[0][:8], top_k=1)
    again = time.perf_counter() - t1
    gc.collect()
    out = {"seen_s": seen, "follow_s": followed, "same_search_again_s": again, "top1_is_new": hit.id == f"doc{start:07d}",
           "rss_before": before, "rss_after": _rss(),
           "rss_peak": _peak(), "documents": store.count()}
    store.close()
    return out


def _run_role(args: argparse.Namespace, role: str, cache: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--role", role, "--port", str(args.port), "--docs", str(args.docs),
           "--vectors", str(args.vectors), "--dim", str(args.dim), "--cache", str(cache)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _build(args: argparse.Namespace, tmp: Path) -> float:
    t0 = time.perf_counter()
    with _store(args, tmp / "builder", writable=True) as store:
        for s in range(0, args.docs, args.batch):
            ids, vectors = _docs(s, min(args.batch, args.docs - s), args.vectors, args.dim)
            store.add(ids, vectors, [_meta(i) for i in ids])
            if (s // args.batch) % 10 == 0:
                log.info("%d of %d documents stored", s + len(ids), args.docs)
    return args.docs / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--vectors", type=int, default=24, help="rows per synthetic document (16+ fill a summary)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--follow-share", type=float, default=0.01)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--role", choices=["reader", "writer", "follow"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        result = {"reader": role_reader, "writer": role_writer, "follow": role_follow}[args.role](args)
        print(json.dumps(result), flush=True)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from docpc_retrievers.testing.chroma_server import chroma_server

    with tempfile.TemporaryDirectory(prefix="docpc-open-bench-") as name, chroma_server(Path(name) / "chroma") as srv:
        tmp = Path(name)
        args.port = srv.port
        rate = _build(args, tmp)
        log.info("built %d documents at %.0f documents/s", args.docs, rate)
        reader = _run_role(args, "reader", tmp / "reader")
        log.info("reader: %s", reader)
        writer = _run_role(args, "writer", tmp / "writer")
        log.info("writer: %s", writer)
        follow_cache = tmp / "follower"
        _run_role(args, "reader", follow_cache)  # its cache holds the snapshot, as a reader's that ran before
        proc = subprocess.Popen(
            [sys.executable, __file__, "--role", "follow", "--port", str(args.port), "--docs", str(args.docs),
             "--vectors", str(args.vectors), "--dim", str(args.dim), "--cache", str(follow_cache)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        added = max(1, int(args.docs * args.follow_share))
        start = 2 * 10**6
        with _store(args, tmp / "other-writer", writable=True) as other:
            for s in range(0, added, args.batch):
                ids, vectors = _docs(start + s, min(args.batch, added - s), args.vectors, args.dim)
                other.add(ids, vectors, [_meta(i) for i in ids])
        proc.stdin.write(f"added\n{start}\n")
        proc.stdin.flush()
        follow = json.loads(proc.stdout.read().strip().splitlines()[-1])
        proc.wait()
        follow["added"] = added
        log.info("follow: %s", follow)
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "documents": args.docs, "vectors": args.vectors,
           "dim": args.dim, "build_docs_per_s": rate, "reader": reader, "writer": writer, "follow": follow}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
