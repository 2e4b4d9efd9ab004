"""The first stage's interface: what any candidate index behind the store must do.

A backend keeps one summary per document (a few unit vectors) and, for a
query, returns the ids of the documents most likely to score highest under
exact MaxSim; the store then scores those exactly. Backends save themselves
into a folder of the local cache and open from it again, so a second engine
(an ANN library, a server-side index) can sit beside the in-memory one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol, overload

import numpy as np

__all__ = ["CandidateIndex", "LazyIds", "VectorSource"]


class CandidateIndex(ABC):
    """Document summaries in, a shortlist of document ids out."""

    coverage: float = 1.0
    """The share of the store's documents it holds: below 1 while it is being built (a caller finds the rest
    elsewhere)."""

    @abstractmethod
    def add(self, ids: Sequence[str], summaries: Sequence[np.ndarray]) -> None:
        """Add or replace documents; ``summaries[i]`` is ``[c_i, dim]`` unit rows."""

    @abstractmethod
    def remove(self, ids: Iterable[str]) -> None:
        """Forget documents (unknown ids are ignored)."""

    @abstractmethod
    def top(self, query: np.ndarray, n: int, allowed: set[str] | None = None) -> list[str]:
        """Ids of the ``n`` documents likeliest to score highest for ``query [t, dim]``, within ``allowed``."""

    def top_widened(
        self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int,
        skip: Collection[str] | None = None,
    ) -> list[str]:
        """:meth:`top`, plus the documents whose estimate this backend cannot tell from the ``rank``-th best (at
        most ``most`` in all): a query whose estimates are flat needs more candidates than one whose best stand
        out. A backend that has no such estimate returns :meth:`top`'s ``n``. ``skip``: ids the caller finds
        elsewhere, left out (here by asking :meth:`top` for as many more)."""
        if not skip:
            return self.top(query, n, allowed)
        return [d for d in self.top(query, n + len(skip), allowed) if d not in skip][:n]

    def top_ranked(
        self, query: np.ndarray, n: int, allowed: set[str] | None = None, *, rank: int, most: int, reserve: int
    ) -> tuple[list[str], Sequence[str]]:
        """:meth:`top_widened`'s ids best first, and the next ``reserve`` ids (in any order): the candidates of a
        follow-up round, for a search whose best reached deep into the first. A backend that cannot rank its
        answer returns :meth:`top_widened`'s ids and no reserve (no follow-up)."""
        return self.top_widened(query, n, allowed, rank=rank, most=most), []

    @abstractmethod
    def ids(self) -> list[str]:
        """Every live document id."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def save(self, folder: Path, extras: Mapping[str, np.ndarray] | None = None) -> None:
        """Write the index (and ``extras``, arrays the caller keeps beside it) under ``folder``."""

    @abstractmethod
    def load(self, folder: Path) -> dict[str, np.ndarray] | None:
        """Replace the contents with what :meth:`save` wrote; the saved extras, or None when nothing usable is there."""


class VectorSource(Protocol):
    """What exact scoring reads from the store: each candidate's int8 rows and how they split into parts."""

    def packed(self, ids: Sequence[str]) -> dict[str, bytes]:
        """Packed vectors of ``ids`` (absent: deleted meanwhile; raise when a live record lacks them)."""

    def rows(self, ids: Sequence[str]) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
        """The ids still stored, their row counts, their int8 rows ``[N, dim]`` one document after another, and the
        rows' scales ``[N]`` (a document deleted meanwhile is left out). The arrays may be reused by the calling
        thread's next call."""

    def unpacked(self, doc_id: str, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """int8 rows ``[n, dim]``, their scales ``[n]`` and anchors of one document."""

    def parts(self, doc_id: str) -> tuple[int, ...] | None:
        """Row counts of a multi-part record (page mode), else None."""


class LazyIds(Sequence[str]):
    """The ids ``ids[s]`` of ``size`` slots that ``slots()`` finds when first read: a reserve that most searches
    never read (:meth:`CandidateIndex.top_ranked`) costs them nothing."""

    def __init__(self, ids: list[str], slots: Callable[[], np.ndarray], size: int) -> None:
        self._ids, self._find, self._size = ids, slots, size
        self._slots: np.ndarray | None = None

    def _found(self) -> np.ndarray:
        if self._slots is None:
            self._slots = self._find()
        return self._slots

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._ids[s] for s in self._found()[i].tolist()]
        return self._ids[int(self._found()[i])]

    def __iter__(self) -> Iterator[str]:
        ids = self._ids
        return (ids[s] for s in self._found().tolist())
