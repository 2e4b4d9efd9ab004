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
    """Centroids per document in the summaries (records carry them, as one metadata value: 16 int8 centroids of 128
    dimensions take 2.8 KB of base64 where hosted Chroma allows 4 KB; 32 would not fit)."""
    candidates: int = 256
    """Documents the first stage keeps at least for a query (the ``candidates=`` option overrides it)."""
    candidate_budget: int = 24_576
    """Query tokens x candidates: a query of t tokens keeps at least ``candidate_budget // t`` candidates. Fewer
    tokens rank summaries less reliably and cost less to score."""
    candidate_share: float = 0.16
    """And at least this share of the documents searched: the candidates the exact top 10 need grow with the
    store (on real vectors at 100k documents, 16,384 for titles against 4,096 at 10k)."""
    max_candidates: int = 16_384
    """Documents the first stage keeps at most (where that is half the documents searched or more, all of them are
    scored: the summaries would save nothing)."""
    scan_below: int = 2048
    """Stores (or filtered subsets) of at most this many documents are scored whole, with no first stage (as are
    those of at most twice the candidates a query keeps)."""
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
        if not 0.0 <= self.candidate_share <= 1.0:
            raise ValueError(f"SearchConfig.candidate_share must be between 0 and 1, got {self.candidate_share}")

    def candidates_for(self, n_tokens: int, n_docs: int) -> int:
        """Documents a query of ``n_tokens`` tokens keeps from the first stage over ``n_docs`` documents."""
        wanted = max(self.candidate_budget // max(1, n_tokens), int(self.candidate_share * n_docs))
        return max(self.candidates, min(self.max_candidates, wanted))

    def with_options(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes`` applied (unknown names raise TypeError)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
