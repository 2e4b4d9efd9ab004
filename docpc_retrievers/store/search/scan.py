"""The exhaustive backend: every allowed document scored. The truth the other backends are measured against, and
the fastest choice where a store is small."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from docpc_retrievers.store.search.backend import Scored, SearchBackend, VectorSource
from docpc_retrievers.store.search.config import SearchConfig
from docpc_retrievers.store.search.ranking import ranked

__all__ = ["ExactScan"]


class ExactScan(SearchBackend):
    """Keeps only the ids; a query's candidates are every allowed document."""

    def __init__(self, source: VectorSource, dim: int, config: SearchConfig | None = None) -> None:
        super().__init__(source, dim, config)
        self._ids: dict[str, None] = {}

    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray]) -> None:
        self._ids.update(dict.fromkeys(ids))

    def remove(self, ids: Iterable[str]) -> None:
        for doc_id in ids:
            self._ids.pop(doc_id, None)

    def search(self, query: np.ndarray, k: int, allowed: set[str] | None = None, *, candidates: int | None = None,
               aggregate: str = "max") -> list[Scored]:
        pool = list(self._ids) if allowed is None else [d for d in allowed if d in self._ids]
        return ranked(query, pool, self.source, k, self.config, aggregate=aggregate)

    def ids(self) -> list[str]:
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def save(self, folder: Path, extras: Mapping[str, np.ndarray] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(folder / "backend.npz", ids=np.array(self.ids(), dtype=str), **dict(extras or {}))

    def load(self, folder: Path) -> dict[str, np.ndarray] | None:
        path = folder / "backend.npz"
        if not path.exists():
            return None
        with np.load(path) as z:
            saved = {k: z[k] for k in z.files}
        self._ids = dict.fromkeys(saved.pop("ids").tolist())
        return saved
