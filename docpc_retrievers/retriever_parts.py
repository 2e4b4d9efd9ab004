"""What both framework retrievers are made of besides their options: editing the store through the retriever, and
LangChain's search types (MMR refused with the reason)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from docpc_retrievers.adapters import PathLike, path_list
from docpc_retrievers.documents.user_metadata import UserMetadata
from docpc_retrievers.errors import StoreError
from docpc_retrievers.results import IndexReport

__all__ = ["SEARCH_TYPES", "StoreEditing", "check_search_type"]

_Editing = TypeVar("_Editing", bound="StoreEditing")
"""The retriever class itself (``typing.Self`` needs Python 3.11; the package supports 3.10)."""

SEARCH_TYPES = ("similarity", "similarity_score_threshold")
"""LangChain's search types the retrievers take: plain similarity, and similarity above ``score_threshold``."""
_NO_MMR = (
    "search_type='mmr' is not offered: maximal marginal relevance trades a hit's relevance against its similarity "
    "to hits already taken, on one scale. DocPC's relevance is MaxSim, a sum over the query's tokens with no fixed "
    "scale, and two documents have no MaxSim between them on that scale (it is asymmetric and grows with their "
    "vector counts). Use min_score_ratio to drop weak hits, or under=/filter= to draw hits from chosen folders"
)


def check_search_type(search_type: str, score_threshold: float | None) -> None:
    """A LangChain ``search_type`` this retriever honours, or ValueError saying why not (MMR: see ``_NO_MMR``)."""
    if search_type == "mmr":
        raise ValueError(_NO_MMR)
    if search_type not in SEARCH_TYPES:
        raise ValueError(f"search_type must be one of {', '.join(SEARCH_TYPES)}, got {search_type!r}")
    if search_type == "similarity_score_threshold" and score_threshold is None:
        raise ValueError("search_type='similarity_score_threshold' needs score_threshold (in search_kwargs)")


class StoreEditing:
    """What both framework retrievers do with their store: add and delete documents, close what they opened.
    The retriever provides ``index`` and ``_owns_index``."""

    def add_pdfs(self, paths: PathLike | Iterable[PathLike], *, metadata: UserMetadata = None,
                 **options: Any) -> IndexReport:
        """Index more PDF files and folders into this retriever's store (``metadata`` and ``options`` as
        :meth:`docpc_retrievers.DocPCIndex.add_pdfs`); a read-only store refuses with StoreError, a missing path with
        FileNotFoundError (nothing is indexed)."""
        self._require_writable()
        return self.index.add_pdfs(path_list(paths), metadata=metadata, **options)  # type: ignore[attr-defined]

    def delete(self, ids_or_paths: PathLike | Iterable[PathLike]) -> int:
        """Delete documents by id, source path or folder; returns how many were deleted."""
        self._require_writable()
        return self.index.delete(path_list(ids_or_paths))  # type: ignore[attr-defined]

    def _require_writable(self) -> None:
        """StoreError naming the routes that give a retriever a writable store, where this one's is read-only."""
        if not self.index.store.writable:  # type: ignore[attr-defined]
            path = self.index.path  # type: ignore[attr-defined]
            raise StoreError(
                f"this retriever's store {path} is open read-only (persist_dir= and from_persist_dir open stores for "
                f"reading, so several processes can search one); to add or delete documents, give the retriever a "
                f"writable index: DocPCRetriever(index=DocPCIndex({str(path)!r}, writable=True)), or build it with "
                f"DocPCRetriever.from_pdfs(paths, persist_dir={str(path)!r})")

    def close(self) -> None:
        """Close the index when this retriever opened it (from_pdfs, from_persist_dir, persist_dir=...)."""
        if self._owns_index:  # type: ignore[attr-defined]
            self.index.close()  # type: ignore[attr-defined]

    def __enter__(self: _Editing) -> _Editing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
