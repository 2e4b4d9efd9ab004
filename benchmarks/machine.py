"""What machine a benchmark ran on: printed beside every latency, since only ratios within one run compare."""

from __future__ import annotations

from docpc_retrievers.machine import this_cpu


def cpu_name() -> str:
    """The CPU's model name, as the package reads it (docpc_retrievers/machine/cpu.py)."""
    return this_cpu().model
