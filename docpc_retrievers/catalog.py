"""What a store holds, named the ways users name documents: by id, by source path, by folder, by filter.

Used by :class:`~docpc_retrievers.index.DocPCIndex` for ``delete``, ``documents`` and the
``docpc list`` / ``docpc delete`` commands; reads page by page so a large store is never loaded whole. A filter that
matches nothing is explained from the keys and values the store holds (``no_match_reason``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from docpc_retrievers.documents.discovery import under_roots
from docpc_retrievers.documents.user_metadata import BUILTIN_KEYS, metadata_keys
from docpc_retrievers.filters import check_where, filter_keys
from docpc_retrievers.results import SearchResult
from docpc_retrievers.store.multivector import MultiVectorStore

__all__ = ["documents", "ids_under", "no_match_reason", "resolve_ids"]


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
        out.extend(ids_under(store, folders))
    if where is not None:
        out.extend(store.ids(where=where))
    return list(dict.fromkeys(out))


def ids_under(store: MultiVectorStore, folders: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Ids of the documents whose source is one of ``folders`` (absolute paths) or lies under one, by path."""
    roots = [Path(f) for f in folders]
    return [d.id for d in store.iter_documents() if under_roots(str(d.metadata.get("source") or ""), roots)]


def under_reason(store: MultiVectorStore, under: Iterable[str | os.PathLike[str]]) -> str | None:
    """Why ``under`` may hold no stored document (a mistyped or relative folder, say): each path no source lies
    under, whether it exists here, and the folders the store's documents do come from; None when each holds some."""
    folders: Counter[str] = Counter()
    sources = []
    for doc in store.iter_documents():
        source = str(doc.metadata.get("source") or "")
        sources.append(source)
        folders[str(Path(source).parent)] += 1
    empty = [Path(u).expanduser().resolve() for u in under]
    empty = [p for p in empty if not any(under_roots(s, [p]) for s in sources)]
    if not empty:
        return None
    said = "; ".join(f"no stored document comes from {p}" + ("" if p.exists() else " (no such file or folder here)")
                     for p in empty)
    if not sources:
        return f"{said}: the store holds no documents"
    shown = ", ".join(f"{f} ({n})" for f, n in folders.most_common(_VALUES_SHOWN))
    more = f" and {len(folders) - _VALUES_SHOWN} more" if len(folders) > _VALUES_SHOWN else ""
    return f"{said}; the store's documents come from {shown}{more}"


def documents(store: MultiVectorStore, where: Mapping[str, Any] | None = None, *, page: int = 500) -> Iterator[SearchResult]:
    """Every stored document (or those matching a Chroma ``where`` filter) as results with score 0, lazily."""
    for doc in store.iter_documents(where, page=page):
        yield SearchResult.from_metadata(doc.id, 0.0, 0, doc.metadata)


_VALUES_SHOWN = 5
"""Most common values of a key a no-match reason shows."""
_VALUES_COUNTED = 10_000
"""Distinct values counted per key (a key unique to every document would otherwise hold the store's size)."""


def _count_values(counter: Counter[str], value: Any) -> None:
    for v in value if isinstance(value, list) else [value]:
        text = json.dumps(v, ensure_ascii=False)
        if text in counter or len(counter) < _VALUES_COUNTED:
            counter[text] += 1


def _contained(where: Any) -> set[str]:
    """Keys a filter tests with ``$contains`` or ``$not_contains``."""
    if isinstance(where, list):
        return set().union(*map(_contained, where)) if where else set()
    if not isinstance(where, Mapping):
        return set()
    out: set[str] = set()
    for key, value in where.items():
        if key.startswith("$"):
            out |= _contained(value)
        elif isinstance(value, Mapping) and {"$contains", "$not_contains"} & set(value):
            out.add(key)
    return out


def no_match_reason(store: MultiVectorStore, where: Mapping[str, Any]) -> str:
    """Why ``where`` may match no stored document, from one read of every record's metadata: the keys it names that
    no document has (with the keys there are), and the values the others take (a typo in a value, a number stored as
    text). Meant for the moment a filter matched nothing: it reads the whole store page by page."""
    where = check_where(where) or {}
    matched = len(store.ids(where=where)) if where else store.count()
    if matched:  # asked after all: nothing to explain
        return f"the filter {json.dumps(where, ensure_ascii=False)} matches {matched} stored documents"
    named = filter_keys(where)
    values: dict[str, Counter[str]] = {key: Counter() for key in named}
    having: Counter[str] = Counter()
    total = 0

    def read() -> Iterator[Mapping[str, Any]]:  # every record once: the named keys' values tallied on the way
        nonlocal total
        for doc in store.iter_documents():
            total += 1
            for key in named:
                if doc.metadata.get(key) is not None:
                    having[key] += 1
                    _count_values(values[key], doc.metadata[key])
            yield doc.metadata

    users = metadata_keys(read())
    if not total:
        return "the store holds no documents"
    mine = ", ".join(f"{k} ({n})" for k, n in users.items()) or "none"
    lines = [f"the filter {json.dumps(where, ensure_ascii=False)} matches none of the {total} stored documents"]
    absent = [key for key in named if not values[key]]
    if absent:
        lines.append(
            f"no document has {'the key' if len(absent) == 1 else 'the keys'} {', '.join(repr(k) for k in absent)}; "
            f"your keys in this store (documents): {mine}; the library's: {', '.join(sorted(BUILTIN_KEYS))}"
        )
    for key in named:
        if values[key]:
            common = ", ".join(f"{text} ({n})" for text, n in values[key].most_common(_VALUES_SHOWN))
            more = len(values[key]) - _VALUES_SHOWN
            exact = " (strings match exactly, case included)" if any(t.startswith('"') for t in values[key]) else ""
            lines.append(f"{key!r} takes {common}{f' and {more} other values' if more > 0 else ''} "
                         f"in the {having[key]} of {total} documents that have it{exact}")
            if key in _contained(where) and all(t.startswith('"') for t in values[key]):
                lines.append(f"{key!r} holds text, not lists: $contains tests a list's items, never text within a "
                             "string; use $eq or $in, or --under PATH (under=) for a folder's documents")
    return "; ".join(lines[:1]) + ("\n  " + "\n  ".join(lines[1:]) if len(lines) > 1 else "")
