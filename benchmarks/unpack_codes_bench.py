"""What codes below a byte would cost a search: unpacking them into int8 rows, against copying int8 rows.

A query at 10k grids scores about 1,600 candidates of 760 vectors (1.2M rows). The store keeps int8 rows, which
a search copies out of the cache; 4- or 6-bit codes would first be unpacked into int8 (values with one scale per
row, as the exact stage multiplies them). Timed in torch on one thread, median of five:

    .venv/bin/python benchmarks/unpack_codes_bench.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1600 * 760)
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = args.rows
    out = torch.empty((n, 128), dtype=torch.int8)
    rows = torch.randint(-127, 127, (n, 128), dtype=torch.int8)
    packed4 = torch.randint(0, 256, (n, 64), dtype=torch.uint8)
    packed6 = torch.randint(0, 256, (n, 32, 3), dtype=torch.uint8).to(torch.int32)

    def unpack4() -> None:  # two values a byte: low nibble, high nibble, each offset by 8
        lo = (packed4 & 0x0F).to(torch.int8) - 8
        hi = (packed4 >> 4).to(torch.int8) - 8
        torch.stack((lo, hi), dim=2, out=out.view(n, 64, 2))

    def unpack6() -> None:  # four values of 6 bits in every 3 bytes, each offset by 32
        word = packed6[..., 0] | (packed6[..., 1] << 8) | (packed6[..., 2] << 16)
        out.view(n, 32, 4).copy_(torch.stack([(word >> s) & 63 for s in (0, 6, 12, 18)], dim=2).to(torch.int8) - 32)

    cases: dict[str, Callable[[], object]] = {
        "copy int8 rows (what a search does)": lambda: out.copy_(rows),
        "unpack 4-bit codes into int8": unpack4,
        "unpack 6-bit codes into int8": unpack6,
    }
    print(f"{n:,} rows of 128 dimensions, torch on one thread, median of 5")
    base = None
    for name, run in cases.items():
        run()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        ms = 1000 * sorted(times)[2]
        base = base or ms
        print(f"  {name:<38} {ms:8.1f} ms  ({ms / base:.0f}x the copy)")


if __name__ == "__main__":
    main()
