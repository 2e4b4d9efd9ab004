"""How fast an indexing run's commits can go, before and after a commit's packing moved off its write.

    python benchmarks/commit_pipeline_bench.py PDF_FOLDER --documents 96

Why: on an H200 the commit thread was busy 61% of an indexing run (35 ms a document), and with the encoder in a
process of its own (encoders/process.py) the commits are what a run can go no faster than. A commit builds each
record (summaries), packs the payload as text (zlib, base85) and writes to Chroma, which holds Python's lock for
the whole write. Variants, the same documents (real text and grid previews from the folder, 744 x 128 vectors
as a 768-token ColQwen2 grid has; their zlib ratio, 0.95, is that of real token vectors) committed 8 at a time
into a fresh embedded store, alternated:

- ``before``: one step a commit (build, pack, write in series), the grid previews run through zlib as well
  (WebP: it never shrinks them, so they were stored base85 after the try);
- ``after``: each commit built and packed on a packing thread while the commit before it writes
  (``MultiVectorStore.prepare_add`` / ``add_prepared``, as ``Indexer`` runs them), previews not compressed again.

- ``after_server`` (with ``--server``): ``after``, into a store behind a ``chroma run`` on loopback started for
  the run (not timed), so the write is the server process's work and this process only sends it;
- ``after_child`` (with ``--child``): ``after``, into an embedded store whose Chroma its own child ``chroma run``
  serves (``chroma_process=True``, ``docpc index --chroma-process``), the child's start and stop timed.

Printed per variant: documents a second of the commit stream, milliseconds a document the writing thread spent,
and how long a thread that wakes every half millisecond was kept waiting (Python's lock held), per document.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit_gil_bench import commit_documents, waker  # noqa: E402
from machine import cpu_name  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", type=Path)
    ap.add_argument("--documents", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--server", action="store_true", help="also commit through a chroma run on loopback")
    ap.add_argument("--child", action="store_true", help="also commit through the store's own child chroma run")
    args = ap.parse_args()

    from docpc_retrievers.store import engine as engine_module
    from docpc_retrievers.store.multivector import MultiVectorStore
    from docpc_retrievers.testing.chroma_server import ChromaServer

    docs = commit_documents(args.pdfs, args.documents)
    real_chunk = engine_module.chunk_payload

    def zlib_on_grids_too(data: bytes, packing: str = "b64", *, compress: bool = True) -> list[dict[str, str]]:
        return real_chunk(data, packing)  # as before: every payload tried with zlib

    def run(variant: str, watched: bool) -> dict[str, float]:
        folder = tempfile.mkdtemp(prefix="docpc-commit-bench-")
        engine_module.chunk_payload = zlib_on_grids_too if variant == "before" else real_chunk  # type: ignore[assignment]
        server = ChromaServer(Path(folder) / "server") if variant == "after_server" else None
        if server is not None:
            server.start()
        where: dict[str, Any] = {} if server is None else {"host": server.host, "port": server.port}
        if variant == "after_child":
            where["chroma_process"] = True
        t0 = time.perf_counter()
        store = MultiVectorStore(Path(folder) / "store", writable=True, **where)
        opened = time.perf_counter() - t0
        store.set_settings({"encoder": {"model": "bench", "dim": 128}, "index": {}})
        stop, delays = threading.Event(), []  # type: ignore[var-annotated]
        thread = threading.Thread(target=waker, args=(stop, delays))
        if watched:
            thread.start()
        batches = [docs[s : s + args.batch] for s in range(0, len(docs), args.batch)]

        def arguments(batch: list[dict[str, Any]]) -> tuple[Any, ...]:
            return ([d["id"] for d in batch], [d["vectors"] for d in batch],
                    [{"source": f"/bench/{d['id']}.pdf"} for d in batch])

        def keywords(batch: list[dict[str, Any]]) -> dict[str, Any]:
            return {"texts": [d["text"] for d in batch], "grids": [d["grid"] for d in batch]}

        writing = 0.0
        t0 = time.perf_counter() - opened  # the store's open counts: a child's start is part of the run
        if variant == "before":
            for batch in batches:
                started = time.perf_counter()
                store.add(*arguments(batch), **keywords(batch))
                writing += time.perf_counter() - started
        else:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="bench-pack") as packer:
                ahead: list[Future[Any]] = [packer.submit(store.prepare_add, *arguments(b), **keywords(b))
                                            for b in batches[:2]]
                for i in range(len(batches)):
                    prepared = ahead[i].result()
                    if i + 2 < len(batches):
                        b = batches[i + 2]
                        ahead.append(packer.submit(store.prepare_add, *arguments(b), **keywords(b)))
                    started = time.perf_counter()
                    store.add_prepared(prepared)
                    writing += time.perf_counter() - started
        count = store.count()
        store.close()
        seconds = time.perf_counter() - t0
        stop.set()
        if watched:
            thread.join()
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)
        engine_module.chunk_payload = real_chunk  # type: ignore[assignment]
        assert count == len(docs), (count, len(docs))
        return {"docs_per_s": len(docs) / seconds, "writing_ms_per_doc": 1000 * writing / len(docs),
                "kept_waiting_ms_per_doc": 1000 * sum(delays) / len(docs) if watched else float("nan")}

    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": [], **({"after_server": []} if args.server else {}),
                                               **({"after_child": []} if args.child else {})}
    for _ in range(args.rounds):
        for variant in runs:
            plain = run(variant, False)
            plain["kept_waiting_ms_per_doc"] = run(variant, True)["kept_waiting_ms_per_doc"]
            runs[variant].append(plain)
    out: dict[str, Any] = {"cpu": cpu_name(), "python": platform.python_version(), "documents": len(docs),
                           "batch": args.batch, "rounds": args.rounds}
    for variant, got in runs.items():
        out[variant] = {key: round(statistics.median(r[key] for r in got), 2) for key in got[0]}
        out[variant]["runs_docs_per_s"] = [round(r["docs_per_s"], 1) for r in got]
    for variant in list(runs)[1:]:
        out[f"{variant}_vs_before"] = {key: round(out[variant][key] / out["before"][key], 2)
                                       for key in ("docs_per_s", "writing_ms_per_doc", "kept_waiting_ms_per_doc")}
    for variant in ("after_server", "after_child"):
        if variant in runs:
            out[f"{variant}_vs_after"] = {key: round(out[variant][key] / out["after"][key], 2)
                                          for key in ("docs_per_s", "writing_ms_per_doc", "kept_waiting_ms_per_doc")}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
