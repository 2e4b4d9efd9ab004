"""What a background prefetch costs the calls beside it: the whole prefetch's time, and how long a caller waits for
the store's lock meanwhile, for two prefetch read sizes side by side in one run (behind a `chroma run` it starts;
1,500 synthetic documents of 760 vectors).

    python benchmarks/prefetch_lock_bench.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name
from store_bench import SyntheticCorpus

from docpc_retrievers.store import reader as reader_mod
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.testing.chroma_server import ChromaServer


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="prefetch-lock-"))
    server = ChromaServer(work / "chroma")
    server.start()
    try:
        where = {"host": server.host, "port": server.port, "collection": "prefetch"}
        corpus = SyntheticCorpus(seed=0, skew=1.1)
        with MultiVectorStore(work / "writer", writable=True, **where) as writer:
            for s in range(0, 1500, 250):
                writer.add([f"{i:032x}" for i in range(s, s + 250)], [corpus.document(760) for _ in range(250)],
                           [{"b": 1}] * 250)
        print(f"CPU: {cpu_name()}")
        for run, page in enumerate((300, 32, 300, 32)):
            reader_mod.PREFETCH_PAGE = page
            with MultiVectorStore(work / f"reader-{run}", **where) as store:
                store.reader.ensure_loaded()  # the view, no vectors yet
                t0 = time.perf_counter()
                store.prefetch()
                waits = []
                while store.reader.prefetching:
                    asked = time.perf_counter()
                    with store._mutex:  # what a search takes first
                        waits.append(time.perf_counter() - asked)
                    time.sleep(0.05)
                total = time.perf_counter() - t0
            waits.sort()
            print(f"reads of {page}: prefetch {total:.1f} s; the lock asked {len(waits)} times, waited p50 "
                  f"{1000 * waits[len(waits) // 2]:.0f} ms, max {1000 * waits[-1]:.0f} ms")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
