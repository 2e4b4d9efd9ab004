"""How wide the int8 shortlisting pass pads a query: products and per-document maxima over 256 documents.

The approximate pass (scoring/maxsim.py, ``_maxsim_int8_products``) pads a query's tokens to a multiple of
``INT8_COLUMNS`` (32) columns, or of ``INT8_VARIED_COLUMNS`` (8) where documents' row counts differ, and a query of at
most ``INT8_NARROW_TOKENS`` (8) tokens against documents of one row count takes the narrow pass (8 columns, turned
to tokens x rows). Prints, per query length, the time with 32 columns everywhere and no narrow pass (before) and
as set now, side by side on the same rows, for documents of varied row counts (page mode, or pooled documents: the
per-document max runs as a segment reduction) and of one row count (grid stores: a reshaped max), and checks that
both give the same scores.

    python benchmarks/int8_columns_bench.py [--docs 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    maxsim = importlib.import_module("docpc_retrievers.scoring.maxsim")
    torch.set_num_threads(1)  # as each thread of the approximate pass runs
    rng = np.random.default_rng(0)
    shapes = {"varied": [int(n) for n in rng.integers(300, 440, args.docs)], "uniform": [380] * args.docs}
    now = {"INT8_VARIED_COLUMNS": maxsim.INT8_VARIED_COLUMNS, "INT8_NARROW_TOKENS": maxsim.INT8_NARROW_TOKENS}
    before = {"INT8_VARIED_COLUMNS": 32, "INT8_NARROW_TOKENS": 0}
    print(f"{'rows':>8} {'tokens':>6} {'before ms':>10} {'now ms':>10} {'ratio':>6}")
    for name, lengths in shapes.items():
        rows = rng.integers(-127, 128, (sum(lengths), 128)).astype(np.int8)
        scales = rng.random(sum(lengths)).astype(np.float32)
        for tokens in (3, 5, 7, 8, 10, 16, 20, 25, 32, 48):
            query = rng.standard_normal((tokens, 128)).astype(np.float32)
            best: dict[str, float] = {}
            scores: dict[str, np.ndarray] = {}
            for _ in range(args.repeats):
                for label, settings in (("before", before), ("now", now)):  # alternated, so drift hits both
                    for key, value in settings.items():
                        setattr(maxsim, key, value)
                    start = time.perf_counter()
                    scores[label] = maxsim.maxsim_int8(query, rows, scales, lengths, dtype=torch.int8)
                    best[label] = min(best.get(label, np.inf), time.perf_counter() - start)
            assert np.allclose(scores["now"], scores["before"], rtol=1e-5, atol=1e-4)
            print(f"{name:>8} {tokens:>6} {best['before'] * 1e3:>10.2f} {best['now'] * 1e3:>10.2f} "
                  f"{best['before'] / best['now']:>6.2f}")


if __name__ == "__main__":
    main()
