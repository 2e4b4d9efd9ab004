"""What an indexing commit costs the rest of the process: its time per document, and how much of Python's lock it
leaves to another thread (the encoding thread, on a GPU machine), before and after the record keeps a snippet.

    python benchmarks/commit_gil_bench.py PDF_FOLDER --documents 48

Chroma's embedded writes hold Python's lock throughout, and its full-text index of the document field costs about
1.1 ms a kilobyte; a commit used to put up to 16 KB of each document's text there. Each variant writes the same
documents (their real text, grid preview bytes and 744 x 128 vectors, as a 768-token ColQwen2 grid has) into a
fresh embedded store, 8 a commit, timed alone; then again while a second thread wakes every half millisecond, as
an encoding thread launching kernels needs the lock: how late its wake-ups are, summed per document, is how long
the commits kept it from running (the longest delay is the longest single hold). Variants, alternated:
``before`` (16,000 bytes of text in the record, the rest as payload) and ``after`` (a 512-byte snippet, the whole
text as payload).
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
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402


def waker(stop: threading.Event, delays: list[float]) -> None:
    """Wake every 0.5 ms; record how late each wake-up is (time spent waiting for the lock)."""
    while not stop.is_set():
        t0 = time.perf_counter()
        time.sleep(0.0005)
        late = time.perf_counter() - t0 - 0.0005
        if late > 0.001:
            delays.append(late)


#: Bytes of text the record's document field holds.
VARIANTS = {"before": (16_000,), "after": (512,)}


def commit_documents(folder: Path, n: int) -> list[dict[str, Any]]:
    """``n`` documents as a commit gets them: id, real text and grid preview from the folder's PDFs (unreadable
    ones skipped), and 744 x 128 random vectors (a 768-token ColQwen2 grid's count; int8 codes of random vectors
    shrink under zlib as real token vectors' do, 0.95x)."""
    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.discovery import discover_pdfs
    from docpc_retrievers.documents.preview import encode_grid
    from docpc_retrievers.documents.represent import represent_pdf
    from docpc_retrievers.errors import PDFLoadError

    docs: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for path in discover_pdfs([folder]):
        if len(docs) == n:
            break
        try:
            rep = represent_pdf(path, IndexSettings())
        except PDFLoadError:
            continue
        vectors = rng.standard_normal((744, 128)).astype(np.float32)
        docs.append({"id": f"d{len(docs):04d}", "text": rep.text, "grid": encode_grid(rep.grid.image),  # type: ignore[union-attr]
                     "vectors": vectors / np.linalg.norm(vectors, axis=1, keepdims=True)})
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", type=Path)
    ap.add_argument("--documents", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    from docpc_retrievers.store import fields
    from docpc_retrievers.store.multivector import MultiVectorStore

    docs = commit_documents(args.pdfs, args.documents)
    text_kb = statistics.mean(len(d["text"].encode()) for d in docs) / 1024

    def commit_all(variant: tuple[int, int], watched: bool) -> float | list[float]:
        fields.SNIPPET_BYTES = variant[0]
        folder = tempfile.mkdtemp(prefix="docpc-gil-")
        store = MultiVectorStore(folder, writable=True)
        store.set_settings({"encoder": {"model": "bench", "dim": 128}, "index": {}})
        stop, delays = threading.Event(), []
        thread = threading.Thread(target=waker, args=(stop, delays))
        if watched:
            thread.start()
        t0 = time.perf_counter()
        for s in range(0, len(docs), 8):
            batch = docs[s : s + 8]
            store.add([d["id"] for d in batch], [d["vectors"] for d in batch],
                      [{"source": f"/bench/{d['id']}.pdf"} for d in batch],
                      texts=[d["text"] for d in batch], grids=[d["grid"] for d in batch])
        seconds = time.perf_counter() - t0
        stop.set()
        if watched:
            thread.join()
        store.close()
        shutil.rmtree(folder, ignore_errors=True)
        return delays if watched else seconds

    runs: dict[str, dict[str, list[Any]]] = {name: {"ms": [], "held": []} for name in VARIANTS}
    for _ in range(args.rounds):
        for name, variant in VARIANTS.items():
            runs[name]["ms"].append(1000 * commit_all(variant, False) / len(docs))  # type: ignore[operator]
            runs[name]["held"].append(commit_all(variant, True))
    out: dict[str, Any] = {"cpu": cpu_name(), "python": platform.python_version(), "documents": len(docs),
                           "mean_text_kb": round(text_kb, 1)}
    for name, got in runs.items():
        held = [sum(d) * 1000 / len(docs) for d in got["held"]]
        out[name] = {"commit_ms_per_doc": round(statistics.median(got["ms"]), 2),
                     "another_thread_kept_waiting_ms_per_doc": round(statistics.median(held), 2),
                     "longest_wait_ms": round(1000 * max(max(d, default=0) for d in got["held"]), 1),
                     "runs_ms": [round(x, 2) for x in got["ms"]]}
    for name in VARIANTS:
        out[name]["commit_time_vs_before"] = round(out[name]["commit_ms_per_doc"] / out["before"]["commit_ms_per_doc"], 2)
        out[name]["waiting_vs_before"] = round(out[name]["another_thread_kept_waiting_ms_per_doc"]
                                               / out["before"]["another_thread_kept_waiting_ms_per_doc"], 2)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
