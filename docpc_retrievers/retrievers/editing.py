"""What both framework retrievers are made of besides their options: editing the store through the retriever."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from docpc_retrievers.retrievers.arguments import PathLike, path_list
from docpc_retrievers.documents.user_metadata import UserMetadata
from docpc_retrievers.errors import StoreError
from docpc_retrievers.results import IndexReport

__all__ = ["StoreEditing"]

_Editing = TypeVar("_Editing", bound="StoreEditing")
"""The retriever class itself (``typing.Self`` needs Python 3.11; the package supports 3.10)."""

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
