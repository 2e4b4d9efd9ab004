"""Every tunable of the store's search in one place: a :class:`SearchConfig` travels with the store's backend.

Defaults were chosen on real token vectors (benchmarks/search_bench.py, docs/store.md, "The search"); tests and
benchmarks pass a configuration instead of patching modules.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["BACKENDS", "SearchConfig"]

BACKENDS = ("centroids", "scan")
"""``centroids``: per-document centroid summaries pick candidates, MaxSim ranks them; ``scan``: every document
scored (the truth, and fast enough on small stores)."""


@dataclass(frozen=True)
class SearchConfig:
    """How a store searches. Each field is one decision; docs/store.md gives the measurement behind its default."""

    backend: str = "centroids"
    """Which backend answers: one of :data:`BACKENDS`."""
    n_centroids: int = 16
    """Centroids per document in the summaries (fixed when a store is created: records carry them)."""
    candidates: int = 256
    """Documents the first stage keeps at least for a query (the ``candidates=`` option overrides it)."""
    candidate_budget: int = 32_768
    """Query tokens x candidates: a query of t tokens keeps ``candidate_budget // t`` candidates, between
    ``candidates`` and ``max_candidates``. Fewer tokens rank summaries less reliably and cost less to score."""
    max_candidates: int = 4096
    """Documents the first stage keeps at most."""
    scan_below: int = 2048
    """Stores (or filtered subsets) of at most this many documents are scored whole, with no first stage."""
    shortlist: int = 64
    """Candidates the approximate int8 pass keeps for exact float32 scoring (at least 4 x top_k)."""
    block: int = 256
    """Candidates per task of the approximate pass (its threads take blocks)."""
    threads: int = 2
    """Threads of the approximate pass, each multiplying on one OpenMP thread (1: the calling thread only)."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown search backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and value < 1:
                raise ValueError(f"SearchConfig.{f.name} must be at least 1, got {value}")
        if self.max_candidates < self.candidates:
            raise ValueError("SearchConfig.max_candidates must be at least candidates")

    def candidates_for(self, n_tokens: int) -> int:
        """Documents a query of ``n_tokens`` tokens keeps from the first stage."""
        return max(self.candidates, min(self.max_candidates, self.candidate_budget // max(1, n_tokens)))

    def with_options(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes`` applied (unknown names raise TypeError)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
