"""What this machine is and what runs fast on it: the CPU's identity and flags (:mod:`.cpu`) and choices timed once
per machine and cached outside any store (:mod:`.choices`). The kernels and threads that use them sit above (the
report ``docpc info --machine`` prints is the command line's: cli/machine_report.py)."""

from docpc_retrievers.machine.choices import Choice, cache_dir, timed_choice
from docpc_retrievers.machine.cpu import CPU, this_cpu

__all__ = ["CPU", "Choice", "cache_dir", "this_cpu", "timed_choice"]
