"""Indexing end to end against its slowest stage: where the time goes, on a GPU machine, in one run.

    python3 benchmarks/indexing_pipeline_bench.py --out OUT --documents 1200 --page-documents 60

On a GPU machine without chromadb, PyMuPDF or colpali-engine, carry the wheels ``benchmarks/gpu_wheels.sh``
downloads and install them first (the script says how). One run of the default steps took about 450 s on an H200.

Writes a folder of varied PDFs (benchmarks/varied_pdfs.py: 1-200 pages, text, drawings, photos, scans), builds
ColQwen2's real architecture at random weights (speed is real, scores meaningless; bf16, 768 visual tokens) and
measures, side by side:

- rendering alone: the render workers over every file, as indexing runs them (grid previews included);
- encoding alone: the grids rendered above, one ``encode_images_with_info`` call (the next batch prepared ahead);
- indexing end to end: ``DocPCIndex.add_pdfs`` into a fresh embedded Chroma store, with a
  :class:`~docpc_retrievers.timeline.Timeline` (each stage's busy share, the queues' depths): encoding in a
  process of its own (``encode_in="process"``, the default on a GPU; the model loads there while the first
  documents render), then with the model already loaded here, before (encoding in the indexing loop) and after
  (encoding on its own thread), at the encoder batch sizes asked; and in an encoding process with the store's
  Chroma served by a child ``chroma run`` (``grid_index_process_child_*``: ``chroma_process=True``, the command
  line's ``--chroma-process``), so Chroma's writes run in that child, not under the indexing process's lock;
- page-level indexing (``mode="page"``) the same way on the first ``--page-documents`` files, beside grid
  indexing of those same files (each in an encoding process, then on a thread), so the grid-against-page ratio
  is end to end; page mode through a child ``chroma run`` too (a record a page: many more commits a document);
- optionally (``--steps load_in_run compile_cache``): the model loaded inside the run (the command line's case),
  before and after, and the compiled blocks in a first and a second process sharing the compiler's cache.

Steps run while ``--budget`` seconds last; ``OUT/indexing_pipeline.json`` is rewritten after each one and every
timeline is saved in ``OUT/timelines.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402

log = logging.getLogger("indexing_pipeline")


class Run:
    """Results kept as they come, written after each step; steps skipped once the budget is spent."""

    def __init__(self, out: Path, budget: float, only: list[str]) -> None:
        self.out, self.budget, self.started, self.only = out, budget, time.perf_counter(), only
        self.results: dict[str, Any] = {}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.started)

    def step(self, name: str, needs: float, fn: Callable[[], Any], *, always: bool = False) -> Any:
        if self.only and name not in self.only and not always:
            return None
        if self.left() < needs:
            self.results[name] = {"skipped": f"{self.left():.0f} s of the budget left, {needs:.0f} needed"}
            log.warning("%s skipped", name)
            self.save()
            return None
        t0 = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:  # one step failing must not lose the others
            value = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        self.results[name] = value
        log.warning("%s (%.1f s): %s", name, time.perf_counter() - t0, json.dumps(value, default=str)[:900])
        self.save()
        return value

    def save(self) -> None:
        (self.out / "indexing_pipeline.json").write_text(json.dumps(self.results, indent=1, default=str))


def acceptance(results: dict[str, Any], workers: int, batch: int) -> dict[str, Any]:
    """The issue's figures from the steps that ran: each end-to-end run's documents a second (and after the model's
    load) as a share of min(rendering alone, encoding alone), and grid against page-level on the same files."""
    def rate(name: str, key: str = "docs_per_s") -> float | None:
        value = results.get(name) or {}
        return value.get(key) if isinstance(value, dict) else None

    out: dict[str, Any] = {}
    for mode, render, encode in (("grid", f"grid_render_alone_w{workers}", f"grid_encode_alone_all_b{batch}"),
                                 ("page", f"page_render_alone_w{workers}", f"page_encode_alone_b{batch}")):
        stages = [r for r in (rate(render), rate(encode)) if r]
        if len(stages) < 2:
            continue
        slower = min(stages)
        out[f"{mode}_slower_stage_docs_per_s"] = slower
        for name, value in results.items():
            if name.startswith(f"{mode}_index_") and isinstance(value, dict) and value.get("docs_per_s"):
                after_load = value.get("after_load_docs_per_s")
                out[name] = {"share_of_slower_stage": round(value["docs_per_s"] / slower, 3),
                             "after_load_share": None if after_load is None else round(after_load / slower, 3)}
    for how in ("process", "after"):
        grid, page = f"grid_same_files_index_{how}_b{batch}_w{workers}", f"page_index_{how}_b{batch}_w{workers}"
        if rate(grid) and rate(page):
            out[f"grid_vs_page_{how}"] = {"docs_per_s": round(rate(grid) / rate(page), 2),  # type: ignore[operator]
                                          "grid_docs_per_s": rate(grid), "page_docs_per_s": rate(page),
                                          "page_pages_per_s": rate(page, "images_per_s")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--documents", type=int, default=1200)
    ap.add_argument("--page-documents", type=int, default=60)
    ap.add_argument("--corpus", type=Path, help="an existing folder of PDFs instead of generating one")
    ap.add_argument("--visual-tokens", type=int, default=768)
    ap.add_argument("--commit-every", type=int, default=8, help="the command line's default")
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 16], help="encoder batch sizes for the runs")
    ap.add_argument("--sweep", type=int, nargs="*", default=[4, 8, 16, 32], help="encode-alone batch sizes")
    ap.add_argument("--budget", type=float, default=400.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--architecture", default="qwen2-vl-2b", choices=("qwen2-vl-2b", "tiny"))
    ap.add_argument("--steps", nargs="*", default=[])
    ap.add_argument("--workers", type=int, nargs="+", default=None,
                    help="render worker counts to compare (default: indexing's own default)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", stream=sys.stdout, force=True)
    run = Run(args.out, args.budget, args.steps)

    import torch

    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.discovery import discover_pdfs, document_id
    from docpc_retrievers.documents.workers import RenderJob, default_workers, make_renderer
    from docpc_retrievers.encoders import ColPaliEncoder
    from docpc_retrievers.index import DocPCIndex
    from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2
    from docpc_retrievers.timeline import Timeline

    cuda = args.device.startswith("cuda")
    counts = args.workers or [default_workers()]
    run.results["machine"] = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "cpu": cpu_name(), "cores": os.cpu_count(),
        "torch": torch.__version__, "python": platform.python_version(), "render_workers": counts,
        "default_workers": default_workers(),
        "architecture": args.architecture, "visual_tokens": args.visual_tokens, "commit_every": args.commit_every,
    }
    scratch = Path(tempfile.mkdtemp(prefix="docpc-pipeline-"))

    def corpus() -> dict[str, Any]:
        from varied_pdfs import write_corpus

        if args.corpus:
            return {"folder": str(args.corpus), "documents": len(discover_pdfs([args.corpus]))}
        t0 = time.perf_counter()
        summary = write_corpus(scratch / "corpus", args.documents, seed=0)
        return {**summary, "seconds": round(time.perf_counter() - t0, 1)}

    run.step("corpus", 0, corpus, always=True)
    folder = args.corpus or scratch / "corpus"
    files = discover_pdfs([folder])
    page_files = files[: args.page_documents]

    holder: dict[str, Any] = {}

    def load() -> dict[str, Any]:
        t0 = time.perf_counter()
        ckpt = scratch / "checkpoint"
        dtype = "bfloat16" if cuda else "float32"
        try:
            build_tiny_colqwen2(ckpt, seed=0, architecture=args.architecture, dtype=dtype,
                                max_visual_tokens=args.visual_tokens, device=args.device if cuda else None)
        except Exception:  # drawing the weights on the device failed: on the CPU, slower
            log.warning("building on %s failed, building on the CPU: %s", args.device, traceback.format_exc()[-800:])
            shutil.rmtree(ckpt, ignore_errors=True)
            build_tiny_colqwen2(ckpt, seed=0, architecture=args.architecture, dtype=dtype,
                                max_visual_tokens=args.visual_tokens)
        built = time.perf_counter() - t0
        if cuda:
            torch.cuda.empty_cache()
        t1 = time.perf_counter()
        enc = ColPaliEncoder(ckpt, device=args.device, batch_size=args.batches[-1],
                             max_num_visual_tokens=args.visual_tokens)
        loaded = time.perf_counter() - t1
        holder.update(enc=enc, ckpt=ckpt)
        return {"build_s": round(built, 1), "load_s": round(loaded, 1), "dtype": str(enc.dtype),
                "processes_on_device": enc.processes_on_device, "prefetch": enc.prefetch}

    run.step("load", 0, load, always=True)
    enc = holder["enc"]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def render_alone(settings: IndexSettings, paths: list[Path], keep: list[Any], workers: int) -> dict[str, Any]:
        """The render workers over ``paths`` as indexing runs them, from the pool's start to the last result."""
        job = RenderJob(settings, None, None, previews=settings.mode == "grid" and workers >= 2)
        t0 = time.perf_counter()
        failed = 0
        with make_renderer(job, workers=workers, ahead=2 * args.commit_every) as renderer:
            for _, r in renderer.imap(paths, lambda p: (p, document_id(p))):
                if r is None or r.doc is None:
                    failed += 1
                    continue
                keep.extend(r.doc.images)
        seconds = time.perf_counter() - t0
        return {"documents": len(paths), "failed": failed, "images": len(keep), "seconds": round(seconds, 2),
                "docs_per_s": round(len(paths) / seconds, 2)}

    def encode_alone(images: list[Any], n_docs: int, batch: int) -> dict[str, Any]:
        enc.batch_size = batch
        enc.encode_images_with_info(images[: min(len(images), batch * 2)])  # this batch size's first shapes
        sync()
        t0 = time.perf_counter()
        enc.encode_images_with_info(images)
        sync()
        seconds = time.perf_counter() - t0
        return {"batch": batch, "images": len(images), "seconds": round(seconds, 2),
                "images_per_s": round(len(images) / seconds, 2), "docs_per_s": round(n_docs / seconds, 2)}

    timelines: dict[str, Any] = {}

    def index_run(name: str, paths: list[Path], settings: IndexSettings, batch: int, background: bool,
                  workers: int, *, model_in_run: bool = False, encode_in: str = "thread",
                  chroma: str = "embedded") -> dict[str, Any]:
        """``add_pdfs`` into a fresh store, timeline recorded and saved as ``OUT/timeline-<name>.json``.
        ``encode_in="process"`` loads the model in the run's encoding process (so ``model_in_run`` too);
        ``chroma``: ``embedded`` (in this process), ``child`` (the embedded folder served by the store's own child
        ``chroma run``, started and stopped inside the clock, as ``docpc index --chroma-process`` runs it) or
        ``server`` (a ``chroma run`` on loopback started before the clock and stopped after it)."""
        from docpc_retrievers.testing.chroma_server import ChromaServer

        model_in_run = model_in_run or encode_in == "process"
        store = scratch / f"store-{name}"
        shutil.rmtree(store, ignore_errors=True)
        server = ChromaServer(scratch / f"server-{name}") if chroma == "server" else None
        if server is not None:
            shutil.rmtree(server.data, ignore_errors=True)
            server.start()
        where: dict[str, Any] = ({} if server is None else {"host": server.host, "port": server.port})
        if chroma == "child":
            where["chroma_process"] = True
        enc.batch_size = batch
        timeline = Timeline()
        kwargs: dict[str, Any] = ({"model": str(holder["ckpt"]), "encoder_kwargs": {
            "device": args.device, "batch_size": batch, "max_num_visual_tokens": args.visual_tokens}}
            if model_in_run else {"encoder": enc})
        t0 = time.perf_counter()
        try:
            with DocPCIndex(store, settings=settings, writable=True, **kwargs, **where) as index:
                index._indexer.encode_in_background = background
                report = index.add_pdfs(paths, batch_size=args.commit_every, workers=workers, timeline=timeline,
                                        encode_in=encode_in)
                stored = len(index)
            seconds = time.perf_counter() - t0
        finally:
            if server is not None:
                server.stop()
                shutil.rmtree(server.data, ignore_errors=True)
        timelines[name] = timeline.to_dict()
        (args.out / "timelines.json").write_text(json.dumps(timelines))
        pages = report.images_encoded
        # The model's load inside the run (the encoding process's, or model_in_run's) is not the pipeline's speed:
        # documents a second from the load's end too, so runs with and without a load in them compare.
        loaded_at = max((end for lane, _, end in timeline.to_dict()["spans"] if lane == "encode.load"), default=0.0)
        after_load = max(seconds - loaded_at, 1e-9)
        return {"after_load_s": round(after_load, 2), "after_load_docs_per_s": round(len(paths) / after_load, 2),
                "documents": len(paths), "indexed": len(report.indexed), "failed": len(report.failed),
                "stored": stored, "images": pages, "batch": batch, "background": background, "workers": workers,
                "encode_in": encode_in, "model_in_run": model_in_run, "chroma": chroma,
                "seconds": round(seconds, 2), "docs_per_s": round(len(paths) / seconds, 2),
                "images_per_s": round(pages / seconds, 2),
                "timings": {k: round(v, 2) for k, v in report.timings.items()},
                "timeline": timeline.summary()}

    grids: list[Any] = []
    many = counts[-1]
    for w in counts:
        keep = grids if w == many else []
        run.step(f"grid_render_alone_w{w}", 20, lambda w=w, k=keep: render_alone(IndexSettings(), files, k, w),
                 always=w == many)
    n = len(files)
    for batch in args.sweep:
        run.step(f"grid_encode_alone_b{batch}", 15,
                 lambda b=batch: encode_alone(grids[: min(len(grids), 256)], min(len(grids), 256), b))
    for batch in args.batches:
        run.step(f"grid_encode_alone_all_b{batch}", 30, lambda b=batch: encode_alone(grids, n, b))
    del grids[:]
    big, few = args.batches[-1], args.batches[0]
    for w in reversed(counts):
        run.step(f"grid_index_process_b{big}_w{w}", 40, lambda w=w: index_run(
            f"grid-process-b{big}-w{w}", files, IndexSettings(), big, True, w, encode_in="process"))
        run.step(f"grid_index_after_b{big}_w{w}", 40,
                 lambda w=w: index_run(f"grid-after-b{big}-w{w}", files, IndexSettings(), big, True, w))
        run.step(f"grid_index_process_child_b{big}_w{w}", 40, lambda w=w: index_run(
            f"grid-process-child-b{big}-w{w}", files, IndexSettings(), big, True, w, encode_in="process",
            chroma="child"))
        run.step(f"grid_index_process_server_b{big}_w{w}", 40, lambda w=w: index_run(
            f"grid-process-server-b{big}-w{w}", files, IndexSettings(), big, True, w, encode_in="process",
            chroma="server"))
    run.step(f"grid_index_before_b{few}_w{counts[0]}", 40,
             lambda: index_run(f"grid-before-b{few}-w{counts[0]}", files, IndexSettings(), few, False, counts[0]))
    if (few, counts[0]) != (big, many):  # else measured above already
        run.step(f"grid_index_after_b{few}_w{counts[0]}", 40,
                 lambda: index_run(f"grid-after-b{few}-w{counts[0]}", files, IndexSettings(), few, True, counts[0]))

    page = IndexSettings(mode="page", pages=None)
    pages: list[Any] = []
    run.step(f"page_render_alone_w{many}", 15, lambda: render_alone(page, page_files, pages, many))
    run.step(f"page_encode_alone_b{big}", 20, lambda: encode_alone(pages, len(page_files), big))
    del pages[:]
    run.step(f"page_index_process_b{big}_w{many}", 30, lambda: index_run(
        f"page-process-b{big}", page_files, page, big, True, many, encode_in="process"))
    run.step(f"page_index_process_child_b{big}_w{many}", 30, lambda: index_run(
        f"page-process-child-b{big}", page_files, page, big, True, many, encode_in="process", chroma="child"))
    run.step(f"grid_same_files_index_process_b{big}_w{many}", 10, lambda: index_run(
        f"grid-same-files-process-b{big}", page_files, IndexSettings(), big, True, many, encode_in="process"))
    run.step(f"page_index_after_b{big}_w{many}", 30,
             lambda: index_run(f"page-after-b{big}", page_files, page, big, True, many))
    run.step(f"grid_same_files_index_after_b{big}_w{many}", 10,
             lambda: index_run(f"grid-same-files-b{big}", page_files, IndexSettings(), big, True, many))

    run.step("load_in_run_before", 45, lambda: index_run("load-in-run-before", files, IndexSettings(),
                                                         few, False, counts[0], model_in_run=True))
    run.step("load_in_run_after", 45, lambda: index_run("load-in-run-after", files, IndexSettings(), big, True,
                                                        many, model_in_run=True))

    def compile_cache() -> dict[str, Any]:
        """The compiled blocks in two fresh processes sharing one inductor cache: cold, then warm."""
        cache = scratch / "inductor-cache"
        out: dict[str, Any] = {}
        for label in ("cold", "warm"):
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "DOCPC_COMPILE_AFTER": "0"}
            code = (
                "import json,time,sys,torch;from PIL import Image;"
                "from docpc_retrievers.encoders import ColPaliEncoder;t=time.perf_counter();"
                f"e=ColPaliEncoder({str(holder['ckpt'])!r},device={args.device!r},batch_size={big},"
                f"max_num_visual_tokens={args.visual_tokens});l=time.perf_counter()-t;"
                "ims=[Image.new('RGB',(1600,2000),(255,255,255)) for _ in range(%d)];" % (big * 4) +
                "t=time.perf_counter();e.encode_images(ims[:%d]);torch.cuda.synchronize();f=time.perf_counter()-t;" % big +
                "t=time.perf_counter();e.encode_images(ims);torch.cuda.synchronize();r=time.perf_counter()-t;"
                "print(json.dumps({'load_s':round(l,1),'first_batch_s':round(f,2),"
                "'images_per_s':round(len(ims)/r,2),'active':e.compiled.active}))"
            )
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  timeout=max(30, run.left() - 5))
            line = (done.stdout.strip().splitlines() or ["{}"])[-1]
            try:
                out[label] = {**json.loads(line), "process_s": round(time.perf_counter() - t0, 1)}
            except json.JSONDecodeError:
                out[label] = {"error": done.stderr[-1500:]}
        return out

    run.step("compile_cache", 60, compile_cache)
    run.results["acceptance"] = acceptance(run.results, many, big)
    run.save()
    log.warning("acceptance: %s", json.dumps(run.results["acceptance"]))
    shutil.rmtree(scratch, ignore_errors=True)
    log.warning("done in %.0f s", time.perf_counter() - run.started)


if __name__ == "__main__":
    main()
