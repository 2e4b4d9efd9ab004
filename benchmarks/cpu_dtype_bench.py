"""The encoder's dtype on this CPU: float32 against bfloat16 on ColQwen2's real architecture (random weights).

The encoder picks bfloat16 on a CPU that multiplies it in hardware (AVX-512 BF16, AMX, Arm BF16) and float32
elsewhere (encoders/colpali.py, ``pick_dtype``). This script measures what that rule is worth where it runs: one
2x2 grid of a sample PDF (768 visual tokens) and a few queries, each dtype timed in the same process, and how far
the bfloat16 vectors fall from the float32 ones (row cosine, and MaxSim of the queries against the grid).

    python benchmarks/cpu_dtype_bench.py PDF [--visual-tokens 768] [--repeats 2]

The 2B checkpoint is built once under /tmp (about 4.4 GB in bfloat16). Weights are random: the times are real,
the closeness of the two dtypes' vectors holds for these weights only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name

QUERIES = ["quarterly revenue by region", "how the model was trained", "a table of results on the test set"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdf", type=Path)
    ap.add_argument("--visual-tokens", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--checkpoint", type=Path, default=Path("/tmp/colqwen2-qwen2-vl-2b-random"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.documents.represent import represent_pdf
    from docpc_retrievers.encoders import ColPaliEncoder
    from docpc_retrievers.encoders.colpali import pick_dtype
    from docpc_retrievers.machine import this_cpu
    from docpc_retrievers.scoring.maxsim import maxsim
    from docpc_retrievers.testing.tiny_checkpoint import build_tiny_colqwen2

    grid = represent_pdf(args.pdf, IndexSettings()).grid.image
    if not (args.checkpoint / "config.json").exists():
        build_tiny_colqwen2(args.checkpoint, seed=0, architecture="qwen2-vl-2b", dtype="bfloat16")
    out: dict[str, dict[str, float]] = {}
    vectors: dict[str, tuple[np.ndarray, list[np.ndarray]]] = {}
    for dtype in ("float32", "bfloat16"):
        enc = ColPaliEncoder(args.checkpoint, device="cpu", dtype=dtype, max_num_visual_tokens=args.visual_tokens)
        enc.encode_queries(QUERIES[:1])  # first-use costs
        grid_s, query_s = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            doc = enc.encode_images([grid])[0]
            grid_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            qs = enc.encode_queries(QUERIES)
            query_s.append((time.perf_counter() - start) / len(QUERIES))
        vectors[dtype] = (doc, qs)
        out[dtype] = {"grid_s": statistics.median(grid_s), "query_s": statistics.median(query_s),
                      "vectors": int(doc.shape[0])}
        del enc
    (d32, q32), (d16, q16) = vectors["float32"], vectors["bfloat16"]
    cos = (d32 * d16).sum(axis=1) / (np.linalg.norm(d32, axis=1) * np.linalg.norm(d16, axis=1))
    s32 = maxsim(q32, [d32])[:, 0]
    s16 = maxsim(q16, [d16])[:, 0]
    result = {
        "cpu": cpu_name(), "flags": list(this_cpu().flags), "threads": torch.get_num_threads(),
        "rule_picks": str(pick_dtype(None, "cpu")).removeprefix("torch."), "visual_tokens": args.visual_tokens,
        **out,
        "grid_speedup_bf16": out["float32"]["grid_s"] / out["bfloat16"]["grid_s"],
        "query_speedup_bf16": out["float32"]["query_s"] / out["bfloat16"]["query_s"],
        "row_cosine_min": float(cos.min()), "row_cosine_median": float(np.median(cos)),
        "maxsim_relative_error_max": float(np.max(np.abs(s16 - s32) / np.abs(s32))),
    }
    print(json.dumps(result, indent=1))
    print(f"{result['cpu']} ({torch.get_num_threads()} threads): grid float32 {out['float32']['grid_s']:.1f} s, "
          f"bfloat16 {out['bfloat16']['grid_s']:.1f} s ({result['grid_speedup_bf16']:.2f}x); query "
          f"{out['float32']['query_s']:.2f} s vs {out['bfloat16']['query_s']:.2f} s ({result['query_speedup_bf16']:.2f}x); "
          f"row cosine min {result['row_cosine_min']:.4f}; the rule picks {result['rule_picks']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
