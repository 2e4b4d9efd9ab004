"""The default backend: centroid summaries pick candidates, exact MaxSim ranks them.

Each document is summarised by a few unit centroids of its own vectors (computed once by the writer and carried in
its record). A query scores every summary by the same late interaction as MaxSim, ``sum_i max_c <q_i, c>``, keeps
the best few hundred to few thousand documents and ranks those exactly (ranking.py). A store or a filtered subset
small enough to score whole (at most ``scan_below`` documents, or at most twice the candidates) skips the summaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from docpc_retrievers.store.search.backend import Scored, SearchBackend, VectorSource
from docpc_retrievers.store.search.centroids import CentroidIndex
from docpc_retrievers.store.search.config import SearchConfig
from docpc_retrievers.store.search.ranking import ranked

__all__ = ["CentroidSearch"]


class CentroidSearch(SearchBackend):
    """Summaries in a :class:`CentroidIndex` (memory-mapped once saved), candidates ranked exactly."""

    def __init__(self, source: VectorSource, dim: int, config: SearchConfig | None = None) -> None:
        super().__init__(source, dim, config)
        self.summaries = CentroidIndex(self.config.n_centroids, self.dim)

    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray]) -> None:
        self.summaries.add(list(ids), summaries)

    def remove(self, ids: Iterable[str]) -> None:
        self.summaries.remove(ids)

    def search(self, query: np.ndarray, k: int, allowed: set[str] | None = None, *, candidates: int | None = None,
               aggregate: str = "max") -> list[Scored]:
        size = len(self.summaries) if allowed is None else len(allowed)
        wanted = max(k, candidates or self.config.candidates_for(query.shape[0], size))
        if size <= max(self.config.scan_below, 2 * wanted):  # keeping half or more would save nothing: score all
            pool = self.summaries.ids() if allowed is None else list(allowed)
        else:
            pool = self.summaries.top(query, wanted, allowed)
        return ranked(query, pool, self.source, k, self.config, aggregate=aggregate)

    def ids(self) -> list[str]:
        return self.summaries.ids()

    def __len__(self) -> int:
        return len(self.summaries)

    def save(self, folder: Path, extras: Mapping[str, np.ndarray] | None = None) -> None:
        self.summaries.save(folder, extras)

    def load(self, folder: Path) -> dict[str, np.ndarray] | None:
        return self.summaries.load(folder)
