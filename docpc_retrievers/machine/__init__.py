"""What this machine is and what runs fast on it: the CPU's identity and flags (:mod:`.cpu`), choices timed once
per machine and cached outside any store (:mod:`.choices`), and the report ``docpc info --machine`` prints
(:mod:`.report`)."""

from docpc_retrievers.machine.choices import Choice, cache_dir, timed_choice
from docpc_retrievers.machine.cpu import CPU, this_cpu

__all__ = ["CPU", "Choice", "cache_dir", "this_cpu", "timed_choice"]
