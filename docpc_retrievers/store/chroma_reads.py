"""Requests to a Chroma collection within hosted Chroma's quotas: the sizes the store writes and reads in, and reads
of 300 results, by id or by page, at most 10 of one collection in flight from this process (chroma_quotas.py has
the quotas)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from docpc_retrievers.store.chroma_quotas import HOSTED

__all__ = ["READ_PAGE", "TEXT_BYTES", "WRITE_BATCH", "read", "read_ids", "read_pages"]

#: Records per Chroma read, by ids or by page (hosted Chroma: 300 results per read).
READ_PAGE = HOSTED.results_per_read
#: Records per Chroma write (hosted Chroma: 300).
WRITE_BATCH = 250
#: Bytes of text kept in one record's document field (hosted Chroma: 16 KB a document).
TEXT_BYTES = 16_000

_READ_SLOTS: dict[str, threading.BoundedSemaphore] = {}
_READ_SLOTS_LOCK = threading.Lock()


def _read_slot(collection_id: str) -> threading.BoundedSemaphore:
    """The semaphore that keeps this process's reads of one collection within hosted Chroma's concurrent reads."""
    with _READ_SLOTS_LOCK:
        slot = _READ_SLOTS.get(collection_id)
        if slot is None:
            slot = _READ_SLOTS[collection_id] = threading.BoundedSemaphore(HOSTED.concurrent_reads)
        return slot


def read(collection: Any, **kwargs: Any) -> Any:
    """One ``get``, waiting for a free read slot of its collection."""
    with _read_slot(str(collection.id)):
        return collection.get(**kwargs)


def read_ids(collection: Any, ids: Sequence[str], *, include: list[str],
             where: Mapping[str, Any] | None = None) -> dict[str, list[Any]]:
    """Records by id, :data:`READ_PAGE` ids a read; the fields of ``include`` concatenated."""
    wanted = list(dict.fromkeys(ids))
    out: dict[str, list[Any]] = {"ids": [], **{k: [] for k in include}}
    for s in range(0, len(wanted), READ_PAGE):
        _extend(out, read(collection, ids=wanted[s : s + READ_PAGE], where=where, include=include), include)
    return out


def read_pages(collection: Any, *, include: list[str], where: Mapping[str, Any] | None = None) -> dict[str, list[Any]]:
    """Every record (matching ``where``), a page of :data:`READ_PAGE` a read (Chroma skips the records before each
    page's offset, so prefer :func:`read_ids` where the ids are known)."""
    out: dict[str, list[Any]] = {"ids": [], **{k: [] for k in include}}
    start = 0
    while True:
        got = read(collection, where=where, include=include, limit=READ_PAGE, offset=start)
        _extend(out, got, include)
        if len(got["ids"]) < READ_PAGE:
            return out
        start += READ_PAGE


def _extend(out: dict[str, list[Any]], got: Mapping[str, Any], include: Sequence[str]) -> None:
    out["ids"].extend(got["ids"])
    for key in include:
        out[key].extend(got.get(key) or [])
