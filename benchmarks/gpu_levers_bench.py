"""Indexing at the model's speed on a GPU: every lever against the forward pass alone, in one run.

One command on the GPU machine (colpali-engine and PyMuPDF carried as wheels; no store needed):

    python3 benchmarks/gpu_levers_bench.py tests/data/sample-pdfs --out results/ --images 256

ColQwen2's real architecture at random weights (speed is real, scores are meaningless), bf16, 768 visual
tokens, the sample PDFs as 2x2 grids repeated to ``--images``. Each figure is images per second over the
same images; every lever is compared with the forward pass alone (inputs already on the device) measured
in the same run:

1. before: the encoder loop as it was (processor on one CPU thread; cast on the copy), in series and with
   the next batch prepared ahead; after: the loop of ``encoders/batches.py`` with the processor on the GPU
   (the default on CUDA) and on the CPU; at batch 8 and 32; page mode once;
2. the image processor per image on the CPU and on the GPU, and the vectors each gives (cosine);
3. attention: sdpa with each of its kernels forced, eager, flex_attention; batch 64; padding per batch
   with batches grouped by pixel area (what the encoder does) against by visual-token count;
4. end to end (``end_to_end_workers``): rendering in worker processes + preparation + encoding of the corpus
   copied ``--copies`` times, and rendering alone, at several worker counts, so the slower side is named;
5. ``torch.compile`` of the repeated blocks (compile time counted) and of the whole model.

Steps run while ``--budget`` seconds last (``--steps`` picks some); the JSON is rewritten after each one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("gpu_levers")


class Run:
    """Results kept as they come, written after each step; steps skipped once the budget is spent."""

    def __init__(self, out: Path, budget: float) -> None:
        self.out, self.budget, self.started = out, budget, time.perf_counter()
        self.results: dict[str, Any] = {}
        self.only: list[str] = []
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.started)

    def step(self, name: str, needs: float, fn: Callable[[], Any]) -> Any:
        if self.only and name not in self.only and name not in ("render_sample_corpus", "load"):
            return None
        if self.left() < needs:
            self.results[name] = {"skipped": f"{self.left():.0f} s of the budget left, {needs:.0f} needed"}
            log.warning("%s skipped", name)
            self.save()
            return None
        t0 = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:  # one lever failing must not lose the others
            value = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
        self.results[name] = value
        log.warning("%s (%.1f s): %s", name, time.perf_counter() - t0, json.dumps(value, default=str)[:600])
        self.save()
        return value

    def save(self) -> None:
        (self.out / "gpu_levers.json").write_text(json.dumps(self.results, indent=1, default=str))


def legacy_encode(enc: Any, images: list[Any], ahead: bool) -> list[Any]:
    """The encoder loop before this change: the processor on the CPU, pinned but not cast (the cast happened in
    the copy, on the calling thread), the next batch prepared ahead when ``ahead``."""
    import torch

    from docpc_retrievers.encoders.batches import prepared

    order = sorted(range(len(images)), key=lambda i: images[i].size[0] * images[i].size[1])
    items = [images[i] for i in order]
    batches = [items[s : s + enc.batch_size] for s in range(0, len(items), enc.batch_size)]

    def prepare(batch: list[Any]) -> Any:
        made = enc.processor.process_images(batch)
        for key, value in made.items():
            if hasattr(value, "pin_memory") and enc.device.startswith("cuda"):
                made[key] = value.pin_memory()
        return made

    out = []
    for made in prepared(batches, prepare, ahead):
        inputs = {k: (v.to(enc.device, dtype=enc.dtype, non_blocking=True) if v.is_floating_point()
                      else v.to(enc.device, non_blocking=True)) if isinstance(v, torch.Tensor) else v
                  for k, v in made.items()}
        with torch.inference_mode():
            emb = enc.model(**inputs)
        out.extend(enc._split_images(made, emb.to(dtype=torch.float32, device="cpu").numpy()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--images", type=int, default=256, help="grids per timed pass (the corpus repeated)")
    ap.add_argument("--copies", type=int, default=10, help="copies of the corpus for the end-to-end run")
    ap.add_argument("--visual-tokens", type=int, default=768)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; later steps are skipped past it")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", nargs="*", help="run only these steps (render and load always run)")
    ap.add_argument("--architecture", default="qwen2-vl-2b", choices=("qwen2-vl-2b", "tiny"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", stream=sys.stdout, force=True)
    run = Run(args.out, args.budget)
    run.only = args.steps or []

    import torch
    import transformers

    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.discovery import discover_pdfs, document_id
    from docpc_retrievers.documents.represent import represent_pdf
    from docpc_retrievers.encoders import ColPaliEncoder
    from docpc_retrievers.errors import PDFLoadError
    from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2

    cuda = args.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def rate(fn: Callable[[], Any], n: int, repeats: int = 1) -> float:
        runs = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            runs.append(time.perf_counter() - t0)
        return round(n / statistics.median(runs), 2)

    run.results["machine"] = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "cpu_threads": torch.get_num_threads(), "architecture": args.architecture,
        "visual_tokens": args.visual_tokens, "images_per_pass": args.images,
    }

    pdfs = discover_pdfs([args.pdfs])
    grids, pages = [], []

    def render() -> dict[str, Any]:
        t0 = time.perf_counter()
        for path in pdfs:
            try:
                grids.append(represent_pdf(path, IndexSettings()).grid.image)  # type: ignore[union-attr]
                pages.extend(represent_pdf(path, IndexSettings(mode="page", pages=None)).pages)
            except PDFLoadError as exc:
                log.warning("skipping %s", exc)
        return {"documents": len(grids), "pages": len(pages), "seconds": round(time.perf_counter() - t0, 2)}

    run.step("render_sample_corpus", 0, render)
    images = [grids[i % len(grids)] for i in range(args.images)]

    holder: dict[str, Any] = {}

    def load() -> dict[str, Any]:
        t0 = time.perf_counter()
        ckpt = Path(tempfile.gettempdir()) / f"colqwen2-{args.architecture}-bench"
        if not (ckpt / "config.json").exists():  # a second process of the same run reuses it
            build_tiny_colqwen2(ckpt, seed=0, architecture=args.architecture, dtype="bfloat16" if cuda else "float32")
        built = time.perf_counter() - t0
        enc = ColPaliEncoder(ckpt, device=args.device, batch_size=32, max_num_visual_tokens=args.visual_tokens)
        holder["enc"] = enc
        enc.encode_images(images[:8])  # warm-up
        return {"build_s": round(built, 1), "load_s": round(time.perf_counter() - t0 - built, 1),
                "dtype": str(enc.dtype), "processes_on_device": enc.processes_on_device,
                "attn": getattr(enc.model.config, "_attn_implementation", None)}

    run.step("load", 0, load)
    enc = holder["enc"]
    ip = enc.processor.image_processor
    gpu_processor = getattr(ip, "device", None)

    def set_processor(device: Any) -> None:
        ip.device = device

    def prepared_inputs(batch_size: int) -> list[dict[str, Any]]:
        set_processor(None)
        order = sorted(images, key=lambda im: im.size[0] * im.size[1])
        inputs = []
        for s in range(0, len(order), batch_size):
            made = enc.processor.process_images(order[s : s + batch_size])
            inputs.append({k: (v.to(enc.device, dtype=enc.dtype) if v.is_floating_point() else v.to(enc.device))
                           if isinstance(v, torch.Tensor) else v for k, v in made.items()})
        set_processor(gpu_processor)
        return inputs

    def forward_alone(inputs: list[dict[str, Any]], model: Any = None) -> Callable[[], None]:
        def go() -> None:
            with torch.inference_mode():
                for x in inputs:
                    (enc.model if model is None else model)(**x)
        return go

    def loop(batch_size: int) -> dict[str, Any]:
        enc.batch_size = batch_size
        inputs = prepared_inputs(batch_size)
        forward_alone(inputs[:1])()
        n = len(images)
        res: dict[str, Any] = {"forward_alone": rate(forward_alone(inputs), n, 2)}
        del inputs

        def variant(ahead: bool, processor: Any, legacy: bool = False) -> Callable[[], Any]:
            def go() -> Any:
                enc.prefetch = ahead
                set_processor(processor)
                return legacy_encode(enc, images, ahead) if legacy else enc.encode_images(images)
            return go

        res["before_in_series"] = rate(variant(False, None, True), n)
        res["before_prepared_ahead"] = rate(variant(True, None, True), n)
        res["after_cpu_processor_ahead"] = rate(variant(True, None), n)
        res["after_gpu_processor_in_series"] = rate(variant(False, gpu_processor), n)
        res["after_default"] = rate(variant(True, gpu_processor), n, 2)
        enc.prefetch, enc.batch_size = True, 32
        set_processor(gpu_processor)
        for key in list(res):
            if key != "forward_alone":
                res[f"{key}_share"] = round(res[key] / res["forward_alone"], 3)
        return res

    def encoder_compile() -> dict[str, Any]:
        """The encoder's own rule (compiled.py) forced at once: compile time, steady rate, vectors, other shapes."""
        from docpc_retrievers.encoders.compiled import CompiledBlocks

        n = len(images)
        enc.compiled = CompiledBlocks(enc.model, None)
        res: dict[str, Any] = {"eager_encode_images": rate(lambda: enc.encode_images(images), n)}
        eager = enc.encode_images(grids)
        q_eager = enc.encode_queries(["what is the total revenue?", "a query"])
        enc.compiled = CompiledBlocks(enc.model, 0)
        t0 = time.perf_counter()
        enc.encode_images(images[:32])
        sync()
        res["first_batch_with_compile_s"] = round(time.perf_counter() - t0, 1)
        res["compiled_encode_images"] = rate(lambda: enc.encode_images(images), n, 2)
        res["speed_up"] = round(res["compiled_encode_images"] / res["eager_encode_images"], 3)
        cos = []
        for a, b in zip(eager, enc.encode_images(grids), strict=True):
            cos.extend(((a * b).sum(1) / (((a * a).sum(1) * (b * b).sum(1)) ** 0.5)).tolist())
        res["vectors_cosine_min"], res["vectors_cosine_mean"] = round(min(cos), 5), round(statistics.fmean(cos), 5)
        for label, batch in (("7_images", images[:7]),
                             ("smaller_images", [im.resize((im.size[0] // 2, im.size[1] // 2)) for im in images[:32]])):
            t0 = time.perf_counter()
            enc.encode_images(batch)
            sync()
            res[f"new_shape_{label}_s"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
            enc.encode_images(batch)
            sync()
            res[f"again_{label}_s"] = round(time.perf_counter() - t0, 2)
        q = enc.encode_queries(["what is the total revenue?", "a query"])
        res["queries_unchanged"] = all(bool((a == b).all()) for a, b in zip(q, q_eager, strict=True))
        res["active"], res["broken"] = enc.compiled.active, enc.compiled.broken
        enc.compiled = CompiledBlocks(enc.model, None)
        return res

    run.step("encoder_compile", 90, encoder_compile)

    def end_to_end_workers() -> dict[str, Any]:
        from docpc_retrievers.documents.rendering import RenderJob
        from docpc_retrievers.documents.workers import default_workers, make_renderer

        folder = Path(tempfile.mkdtemp(prefix="docpc-e2e-"))
        files = []
        for c in range(args.copies):
            for path in pdfs:
                target = folder / f"c{c:02d}-{path.name}"
                shutil.copyfile(path, target)
                files.append(target)
        job = RenderJob(IndexSettings(), None, None, previews=True)
        n_docs = len(grids) * args.copies

        def plan(path: Path) -> tuple[Path, str]:
            return path, document_id(path)

        def render(workers: int, encode: bool) -> Callable[[], None]:
            def go() -> None:
                with make_renderer(job, workers=workers, ahead=2 * enc.batch_size) as renderer:
                    pending: list[Any] = []
                    for _, r in renderer.imap(files, plan):
                        if r is not None and r.doc is not None and r.doc.grid is not None:
                            pending.append(r.doc.grid.image)
                        if encode and len(pending) == enc.batch_size:
                            enc.encode_images_with_info(pending)
                            pending = []
                    if encode and pending:
                        enc.encode_images_with_info(pending)
            return go

        threads = torch.get_num_threads()
        res: dict[str, Any] = {"documents": n_docs, "default_workers": default_workers(),
                               "encode_only_docs_per_s": rate(lambda: enc.encode_images(grids * args.copies), n_docs)}
        for workers, torch_threads in ((default_workers(), threads), (12, threads), (14, threads), (14, 4)):
            if run.left() < 25:
                break
            torch.set_num_threads(torch_threads)
            key = f"w{workers}_t{torch_threads}"
            res[f"{key}_render_only"] = rate(render(workers, False), n_docs)
            res[f"{key}_render_and_encode"] = rate(render(workers, True), n_docs)
        torch.set_num_threads(threads)
        shutil.rmtree(folder, ignore_errors=True)
        return res

    run.step("end_to_end_workers", 60, end_to_end_workers)

    def warm_cache_compile() -> dict[str, Any]:
        """The same compile in a second process: the inductor cache on disk is warm."""
        import subprocess

        out = Path(tempfile.mkdtemp(prefix="docpc-warm-"))
        cmd = [sys.executable, __file__, str(args.pdfs), "--out", str(out), "--images", str(args.images),
               "--steps", "encoder_compile", "--budget", "200", "--device", args.device,
               "--architecture", args.architecture]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=False, timeout=max(30, run.left() - 5), capture_output=True)
        got = json.loads((out / "gpu_levers.json").read_text())
        return {"process_s": round(time.perf_counter() - t0, 1), "encoder_compile": got.get("encoder_compile"),
                "load": got.get("load")}

    run.step("warm_cache_compile", 45, warm_cache_compile)

    run.step("batch_8", 60, lambda: loop(8))
    run.step("batch_32", 60, lambda: loop(32))

    def page_mode() -> dict[str, Any]:
        n_docs = len(grids)
        grid_rate = rate(lambda: enc.encode_images(grids), n_docs)
        page_rate = rate(lambda: enc.encode_images(pages), n_docs)
        return {"grid_docs_per_s": grid_rate, "page_docs_per_s": page_rate, "pages_per_doc": len(pages) / n_docs,
                "grid_over_page": round(grid_rate / page_rate, 2)}

    run.step("grid_vs_page_mode", 30, page_mode)

    def processor_and_vectors() -> dict[str, Any]:
        batch = images[:32]
        res: dict[str, Any] = {}
        for name, device in (("cpu", None), ("gpu", gpu_processor)):
            set_processor(device)
            enc.processor.process_images(batch[:4])
            sync()
            t0 = time.perf_counter()
            enc.processor.process_images(batch)
            sync()
            res[f"{name}_ms_per_image"] = round((time.perf_counter() - t0) * 1000 / len(batch), 2)
        set_processor(None)
        on_cpu = enc.encode_images(grids)
        set_processor(gpu_processor)
        on_gpu = enc.encode_images(grids)
        cos = []
        for a, b in zip(on_cpu, on_gpu, strict=True):
            assert a.shape == b.shape, (a.shape, b.shape)
            cos.extend(((a * b).sum(1) / (((a * a).sum(1) * (b * b).sum(1)) ** 0.5)).tolist())
        res["vectors_cosine_min"] = round(min(cos), 5)
        res["vectors_cosine_mean"] = round(statistics.fmean(cos), 5)
        return res

    run.step("processor_and_vectors", 20, processor_and_vectors)

    def padding() -> dict[str, Any]:
        tokens = [enc.image_patch_grid(im.size) for im in grids]
        counts = [r * c for r, c in tokens]
        res: dict[str, Any] = {"visual_tokens_min": min(counts), "visual_tokens_max": max(counts)}
        corpus = [(im.size[0] * im.size[1], r * c) for im, (r, c) in zip(images, [tokens[i % len(grids)]
                                                                                    for i in range(len(images))])]
        page_counts = [r * c for r, c in (enc.image_patch_grid(im.size) for im in pages)]
        res["page_visual_tokens_min"], res["page_visual_tokens_max"] = min(page_counts), max(page_counts)
        sets = {"grids": corpus, "pages": [(im.size[0] * im.size[1], t) for im, t in zip(pages, page_counts)]}
        for (what, items), bs, (name, key) in itertools.product(sets.items(), (8, 32), (("by_area", 0),
                                                                                       ("by_tokens", 1))):
            ordered = [t for _, t in sorted(items, key=lambda x: x[key])]
            real = padded = 0
            for s in range(0, len(ordered), bs):
                chunk = ordered[s : s + bs]
                real += sum(chunk)
                padded += max(chunk) * len(chunk)
            res[f"{what}_padding_share_b{bs}_{name}"] = round(1 - real / padded, 4)
        return res

    run.step("padding", 0, padding)

    def attention() -> dict[str, Any]:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        inputs = prepared_inputs(32)
        n = len(images)
        res: dict[str, Any] = {"sdpa_default": rate(forward_alone(inputs), n)}
        for backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            try:
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    forward_alone(inputs[:1])()
                    res[f"sdpa_{backend.lower()}"] = rate(forward_alone(inputs), n)
            except Exception as exc:
                res[f"sdpa_{backend.lower()}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        for impl in ("eager", "flex_attention"):
            if run.left() < 40:
                break
            try:
                enc.model.set_attn_implementation(impl)
                forward_alone(inputs[:1])()
                res[impl] = rate(forward_alone(inputs), n)
            except Exception as exc:
                res[impl] = f"{type(exc).__name__}: {str(exc)[:200]}"
            finally:
                enc.model.set_attn_implementation("sdpa")
        big = prepared_inputs(64)
        forward_alone(big[:1])()
        res["sdpa_default_batch_64"] = rate(forward_alone(big), n)
        res["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None
        return res

    run.step("attention_and_batch", 60, attention)


    def compiled(whole: bool) -> dict[str, Any]:
        import torch._dynamo

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        inputs = prepared_inputs(32)
        n = len(images)
        for block in [*enc.model.visual.blocks, *enc.model.language_model.layers]:
            block._compiled_call_impl = None  # undo a regional compile before another
        if whole:
            model = torch.compile(enc.model)
        else:
            model = enc.model
            for block in [*enc.model.visual.blocks, *enc.model.language_model.layers]:
                block.compile()
        t0 = time.perf_counter()
        forward_alone(inputs[:1], model)()
        sync()
        first = time.perf_counter() - t0
        forward_alone(inputs[-1:], model)()  # a smaller last batch: a second shape
        res = {"compile_and_first_batch_s": round(first, 1), "forward_alone": rate(forward_alone(inputs, model), n),
               "graph_breaks": {str(k)[:300]: v for k, v in torch._dynamo.utils.counters["graph_break"].items()}}
        return res

    run.step("compile_regional", 100, lambda: compiled(False))
    run.step("compile_whole", 120, lambda: compiled(True))
    run.results["seconds"] = round(time.perf_counter() - run.started, 1)
    run.save()
    print(json.dumps(run.results, indent=1, default=str))


if __name__ == "__main__":
    main()
