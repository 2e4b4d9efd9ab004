"""The CPU this process runs on: its model, architecture, core count and the instruction-set flags that decide
which kernels are fast (int8 dot products, bfloat16, matrix tiles).

Machines of one name differ: the same "AMD EPYC" label covers CPUs with AVX2 only and with AVX-512 VNNI and
bfloat16, where oneDNN's int8 layer is 24x faster than ``torch._int_mm`` on one and 213x slower on the other. So
choices are keyed by the flags, not by the name.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CPU", "RELEVANT_FLAGS", "this_cpu"]

RELEVANT_FLAGS = (
    # x86: vector widths, int8 dot products, bfloat16 and matrix tiles
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
    # Arm (Linux feature names): dot products, int8 matrix multiply, bfloat16, scalable vectors
    "asimd", "asimddp", "i8mm", "bf16", "sve", "sve2",
)
"""Flags that change which kernel or dtype is fastest; others are left out of the report and the cache key."""

_MAC_FEATURES = {"hw.optional.arm.FEAT_DotProd": "asimddp", "hw.optional.arm.FEAT_I8MM": "i8mm",
                 "hw.optional.arm.FEAT_BF16": "bf16", "hw.optional.AdvSIMD": "asimd"}


@dataclass(frozen=True)
class CPU:
    """One machine's CPU as far as kernel choices go."""

    model: str
    architecture: str
    cores: int
    flags: tuple[str, ...]

    @property
    def native_bfloat16(self) -> bool:
        """Whether the CPU multiplies bfloat16 in hardware (AVX-512 BF16, AMX, Arm BF16): there a model runs faster
        in bfloat16 than in float32; elsewhere bfloat16 is emulated and slower."""
        return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(self.flags))

    def to_dict(self) -> dict[str, object]:
        return {"model": self.model, "architecture": self.architecture, "cores": self.cores, "flags": list(self.flags)}


def _linux() -> tuple[str, set[str]]:
    model, flags = "", set()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, flags


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _mac() -> tuple[str, set[str]]:
    model = _sysctl("machdep.cpu.brand_string")
    flags = {flag for name, flag in _MAC_FEATURES.items() if _sysctl(name) == "1"}
    flags |= {f.lower().replace(".", "_") for f in _sysctl("machdep.cpu.features").split()}
    flags |= {f.lower().replace(".", "_") for f in _sysctl("machdep.cpu.leaf7_features").split()}
    return model, flags


@functools.lru_cache(maxsize=1)
def this_cpu() -> CPU:
    """The CPU this process runs on (read once)."""
    model, flags = _mac() if sys.platform == "darwin" else _linux()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return CPU(
        model=model or platform.processor() or "unknown CPU",
        architecture=platform.machine() or "unknown",
        cores=cores,
        flags=tuple(f for f in RELEVANT_FLAGS if f in flags),
    )
