"""What a store holds, named the ways users name documents: by id, by source path, by folder, by filter.

Used by :class:`~docpc_retrievers.index.DocPCIndex` for ``delete``, ``documents`` and the
``docpc list`` / ``docpc delete`` commands; reads page by page so a large store is never loaded whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from docpc_retrievers.documents.discovery import under_roots
from docpc_retrievers.results import SearchResult
from docpc_retrievers.store.multivector import MultiVectorStore

__all__ = ["documents", "resolve_ids"]


def resolve_ids(
    store: MultiVectorStore, ids_or_paths: Iterable[str | os.PathLike[str]], *, where: Mapping[str, Any] | None = None
) -> list[str]:
    """Stored ids for document ids, source paths, folders and a ``where`` filter (unknown ones are dropped), in order.

    A folder stands for every document whose source lies under it, whether or not it still exists on disk.
    """
    out: list[str] = []
    folders: list[Path] = []
    for item in ids_or_paths:
        key = str(item)
        if key in store:
            out.append(key)
            continue
        path = Path(key).expanduser().resolve()
        exact = store.ids(where={"source": str(path)})
        out.extend(exact)
        if not exact and not path.is_file():
            folders.append(path)
    if folders:
        out.extend(d.id for d in store.iter_documents() if under_roots(str(d.metadata.get("source") or ""), folders))
    if where is not None:
        out.extend(store.ids(where=where))
    return list(dict.fromkeys(out))


def documents(store: MultiVectorStore, where: Mapping[str, Any] | None = None, *, page: int = 500) -> Iterator[SearchResult]:
    """Every stored document (or those matching a Chroma ``where`` filter) as results with score 0, lazily."""
    for doc in store.iter_documents(where, page=page):
        yield SearchResult.from_metadata(doc.id, 0.0, 0, doc.metadata)
