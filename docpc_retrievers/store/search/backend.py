"""What a search backend does: documents in, the best ``k`` for a query out, saved and opened with the store's cache.

A backend holds what it needs to find candidates (per-document summaries, or nothing) and reads the documents'
int8 rows from a :class:`VectorSource`, the store's payload through its cache, so no backend keeps a second copy
of the vectors. Every backend returns exact MaxSim over the stored rows for the documents it returns; they
differ in which documents they score. One file per backend; :func:`docpc_retrievers.store.search.backend_for`
picks one from a :class:`SearchConfig`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from docpc_retrievers.store.search.config import SearchConfig

__all__ = ["Scored", "SearchBackend", "SummaryCodes", "VectorSource"]

SummaryCodes = tuple[str, np.ndarray, np.ndarray]
"""A document's summary as its record keeps it: its id, int8 codes ``[c, dim]`` and a scale per centroid ``[c]``."""


class Scored(NamedTuple):
    """One document's exact score, and its parts' scores (page mode: one per page; a grid: one)."""

    id: str
    score: float
    parts: tuple[float, ...]


class VectorSource(Protocol):
    """What scoring reads from the store: each document's int8 rows and how they split into parts."""

    def rows(self, ids: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        """The ids still stored, their row counts, their int8 rows ``[N, dim]`` one document after another, and the
        rows' scales ``[N]`` (a document deleted meanwhile is left out). The arrays may be reused by the calling
        thread's next call."""

    def parts(self, doc_id: str) -> tuple[int, ...] | None:
        """Row counts of a multi-part record (page mode), else None."""


class SearchBackend(ABC):
    """Documents' summaries in, each query's best documents out, scored exactly from ``source``."""

    def __init__(self, source: VectorSource, dim: int, config: SearchConfig | None = None) -> None:
        self.source, self.dim = source, dim
        self.config = config or SearchConfig()

    @abstractmethod
    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray]) -> None:
        """Add or replace documents; ``summaries[i]`` is the ``[c, dim]`` summary each record carries."""

    @abstractmethod
    def remove(self, ids: Iterable[str]) -> None:
        """Forget documents (unknown ids are ignored)."""

    @abstractmethod
    def search(self, query: np.ndarray, k: int, allowed: set[str] | None = None, *, candidates: int | None = None,
               aggregate: str = "max") -> list[Scored]:
        """The best ``k`` documents for ``query [t, dim]`` (float32 unit rows), within ``allowed`` (None: all), best
        first. ``candidates``: how many the first stage keeps, where there is one (None: the configuration's rule).
        ``aggregate``: how a page-mode record's page scores make its score (``max``, ``mean``, ``sum``)."""

    @abstractmethod
    def ids(self) -> list[str]:
        """Every live document id."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def save(self, folder: Path, extras: Mapping[str, np.ndarray] | None = None) -> None:
        """Write the backend and ``extras`` (arrays the store keeps beside it) under ``folder``."""

    @abstractmethod
    def load(self, folder: Path) -> dict[str, np.ndarray] | None:
        """Replace the contents with what :meth:`save` wrote; the extras, or None when nothing usable is there."""
