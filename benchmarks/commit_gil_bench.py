"""What an indexing commit costs the rest of the process: its time per document, and how much of Python's lock it
leaves to another thread (the encoding thread, on a GPU machine), before and after the record keeps a snippet.

    python benchmarks/commit_gil_bench.py PDF_FOLDER --documents 48

Chroma's embedded writes hold Python's lock throughout, and its full-text index of the document field costs about
1.1 ms a kilobyte; a commit used to put up to 16 KB of each document's text there. Each variant writes the same
documents (their real text, grid preview bytes and 744 x 128 vectors, as a 768-token ColQwen2 grid has) into a
fresh embedded store, 8 a commit, while a second thread counts in pure Python: its rate beside the commits over its
rate alone is the share of the lock the commits leave. Variants: ``before`` (16,000 bytes of text in the record,
the rest as payload) and ``after`` (a 512-byte snippet, the whole text as payload), alternated.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def spin_rate(stop: threading.Event, out: list[float]) -> None:
    n, t0 = 0, time.perf_counter()
    while not stop.is_set():
        for _ in range(1000):
            n += 1
    out.append(n / (time.perf_counter() - t0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", type=Path)
    ap.add_argument("--documents", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.discovery import discover_pdfs
    from docpc_retrievers.documents.preview import encode_grid
    from docpc_retrievers.documents.represent import represent_pdf
    from docpc_retrievers.errors import PDFLoadError
    from docpc_retrievers.store import engine
    from docpc_retrievers.store.multivector import MultiVectorStore

    docs: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for path in discover_pdfs([args.pdfs]):
        if len(docs) == args.documents:
            break
        try:
            rep = represent_pdf(path, IndexSettings())
        except PDFLoadError:
            continue
        docs.append({"id": f"d{len(docs):04d}", "text": rep.text, "grid": encode_grid(rep.grid.image),  # type: ignore[union-attr]
                     "vectors": rng.standard_normal((744, 128)).astype(np.float32)})
    text_kb = statistics.mean(len(d["text"].encode()) for d in docs) / 1024

    def commit_all(snippet: int) -> dict[str, float]:
        engine.SNIPPET_BYTES = snippet
        store = MultiVectorStore(tempfile.mkdtemp(prefix="docpc-gil-"), writable=True)
        store.set_settings({"encoder": {"model": "bench", "dim": 128}, "index": {}})
        stop, rates = threading.Event(), []
        spinner = threading.Thread(target=spin_rate, args=(stop, rates))
        spinner.start()
        t0 = time.perf_counter()
        for s in range(0, len(docs), 8):
            batch = docs[s : s + 8]
            store.add([d["id"] for d in batch], [d["vectors"] for d in batch],
                      [{"source": f"/bench/{d['id']}.pdf"} for d in batch],
                      texts=[d["text"] for d in batch], grids=[d["grid"] for d in batch])
        seconds = time.perf_counter() - t0
        stop.set()
        spinner.join()
        store.close()
        return {"ms_per_doc": 1000 * seconds / len(docs), "spin": rates[0]}

    stop, alone = threading.Event(), []
    spinner = threading.Thread(target=spin_rate, args=(stop, alone))
    spinner.start()
    time.sleep(2)
    stop.set()
    spinner.join()

    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        runs["before"].append(commit_all(16_000))
        runs["after"].append(commit_all(512))
    out: dict[str, Any] = {"cpu": cpu_name(), "python": platform.python_version(), "documents": len(docs),
                           "mean_text_kb": round(text_kb, 1), "spin_alone_per_s": round(alone[0])}
    for name, items in runs.items():
        ms = statistics.median(r["ms_per_doc"] for r in items)
        left = statistics.median(r["spin"] for r in items) / alone[0]
        out[name] = {"commit_ms_per_doc": round(ms, 2), "lock_left_to_another_thread": round(left, 3),
                     "runs": [{k: round(v, 2) for k, v in r.items()} for r in items]}
    out["commit_time_ratio"] = round(out["before"]["commit_ms_per_doc"] / out["after"]["commit_ms_per_doc"], 2)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
