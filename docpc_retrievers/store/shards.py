"""A store in shards on one Chroma deployment, searched shard by shard and merged by exact score.

Chroma cannot run MaxSim, so past the documents one reader can hold, the search runs beside it in pieces: shard
``i`` of a store named ``C`` keeps its records, payload and change feed in its own collections (``C.s<i>``,
``C.s<i>.blobs``, ``C.s<i>.log``), each a whole :class:`MultiVectorStore` (with its own cache folder under
``<path>/shards/<i>``), and a document always lives in the shard its id hashes to, so its writes and deletions
reach the same shard whichever writer makes them. The shard count is recorded in Chroma (collection ``C.shards``),
so a reader with only the server's address finds every shard.

A search asks every shard for its own top k and keeps the best k of their union, ties by id: MaxSim scores are
exact and every shard breaks ties by id as the whole store would (store/search/ranking.py), so the merge is the
top k of the whole store, not an approximation of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store import statistics
from docpc_retrievers.store.chroma_client import chroma_client
from docpc_retrievers.store.layout import StoreLayout, write_json_atomic
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.records import ScoredDocument, StoredDocument
from docpc_retrievers.store.remote_shards import RemoteShards
from docpc_retrievers.store.shard_routing import merge_top_k, shard_of
from docpc_retrievers.store.search import SearchConfig
from docpc_retrievers.store.settings import check_settings
from docpc_retrievers.store.writer import PreparedAdd

__all__ = ["MAX_SHARDS", "ShardedStore", "merge_top_k", "open_shard", "open_store", "recorded_shards", "shard_of"]

MAX_SHARDS = 64
"""Most shards a store may have (each is three collections and a cache folder)."""
_SHARDS_SUFFIX = ".shards"
"""The collection whose metadata records a sharded store's shard count."""

_T = TypeVar("_T")


def _shard_name(collection: str, i: int) -> str:
    return f"{collection}.s{i}"


def recorded_shards(path: str | Path, *, host: str | None = None, port: int = 8000, ssl: bool = False,
                    headers: Mapping[str, str] | None = None, collection: str = "docpc") -> int | None:
    """The shard count a store at ``path`` (or on ``host``) records, or None for a store that is not sharded."""
    layout = StoreLayout.at(path)
    if host is None:
        return layout.read_manifest().get("shards")  # type: ignore[no-any-return]
    client = chroma_client(layout.chroma, host, port, ssl, headers)
    try:
        meta = client.get_collection(collection + _SHARDS_SUFFIX).metadata or {}
    except Exception:  # no such collection: not a sharded store (or no store yet)
        return None
    return int(meta["shards"]) if "shards" in meta else None


def open_shard(path: str | Path, shard: int, *, host: str | None = None, port: int = 8000,
               collection: str = "docpc", search: SearchConfig | None = None) -> tuple[MultiVectorStore, int]:
    """Shard ``shard`` of the sharded store at ``path`` (or on ``host``), read-only, and the store's shard count:
    what a shard searcher holds."""
    count = recorded_shards(path, host=host, port=port, collection=collection)
    if count is None:
        raise StoreError(f"no sharded docpc store at {path}{f' on {host}:{port}' if host else ''}")
    if not 0 <= shard < count:
        raise StoreError(f"the store has shards 0 to {count - 1}; there is no shard {shard}")
    store = MultiVectorStore(StoreLayout.at(path).shards / str(shard), host=host, port=port,
                             collection=_shard_name(collection, shard), search=search)
    return store, count


def open_store(path: str | Path, *, shards: int | None = None, **options: Any) -> MultiVectorStore | ShardedStore:
    """The store at ``path`` (or on ``host=``): sharded when it records shards or ``shards`` asks for a new sharded
    store, else one :class:`MultiVectorStore`. A count that differs from the recorded one is refused."""
    keys = ("host", "port", "ssl", "headers", "collection")
    recorded = recorded_shards(path, **{k: options[k] for k in keys if k in options})
    if recorded is None and shards is None:
        if options.get("searchers"):
            raise StoreError(f"store {path} is not sharded: shard searchers serve a store made with shards=N")
        options.pop("searchers", None)
        options.pop("token", None)
        return MultiVectorStore(path, **options)
    return ShardedStore(path, shards=shards, **options)


class ShardedStore:
    """A store in ``shards`` shards (:mod:`this module <docpc_retrievers.store.shards>`), with the API of
    :class:`MultiVectorStore`: writes go to each document's shard, reads gather from all, a search merges the
    shards' exact top k.

    Args:
        path: the store directory (embedded mode: each shard's Chroma files and cache; a server: the caches only).
        shards: the shard count for a new store; an existing store's recorded count is used (another is refused).
        host, port, ssl, headers, collection, writable, search: as :class:`MultiVectorStore`.
        chroma_process: each shard's Chroma folder served by a child ``chroma run`` of its own (as
            :class:`MultiVectorStore`), so the shards' writes leave this process.
        searchers: each shard's searcher (``docpc serve-shard``), in shard order: searches go to them and are merged
            here, so this process holds no shard's summaries or vectors (reads of records still go to Chroma).
        token: the searchers' bearer token.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        shards: int | None = None,
        host: str | None = None,
        port: int = 8000,
        ssl: bool = False,
        headers: Mapping[str, str] | None = None,
        collection: str = "docpc",
        writable: bool = False,
        search: SearchConfig | None = None,
        searchers: Sequence[str] | None = None,
        token: str | None = None,
        chroma_process: bool = False,
    ) -> None:
        self.layout = StoreLayout.at(path)
        self.path = self.layout.root
        self.host = host
        self.collection_name = collection
        recorded = recorded_shards(path, host=host, port=port, ssl=ssl, headers=headers, collection=collection)
        if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)
                                   or not 1 <= shards <= MAX_SHARDS):
            raise ValueError(f"shards must be an integer from 1 to {MAX_SHARDS}, got {shards!r}")
        if recorded is not None and shards is not None and shards != recorded:
            raise StoreError(f"store {self.path} has {recorded} shards; it cannot be opened as {shards} "
                             "(documents live in the shard their id hashes to)")
        count = recorded if recorded is not None else shards
        if count is None:
            raise StoreError(f"store {self.path} is not sharded")
        if recorded is None and not writable:
            raise StoreError(f"no sharded docpc store at {self.path}; index some documents first")
        self.shards: list[MultiVectorStore] = []
        try:
            for i in range(count):
                self.shards.append(MultiVectorStore(
                    self.layout.shards / str(i), host=host, port=port, ssl=ssl, headers=headers,
                    collection=_shard_name(collection, i), writable=writable, search=search,
                    chroma_process=chroma_process))
            if recorded is None:
                self._record(count, port, ssl, headers)
        except BaseException:
            self.close()
            raise
        self.search_config = self.shards[0].search_config
        self._pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="docpc-shard")
        self.remote: RemoteShards | None = None
        if searchers:
            if len(searchers) != count:
                self.close()
                raise StoreError(f"store {self.path} has {count} shards; {len(searchers)} searchers were given "
                                 "(one per shard, in shard order)")
            self.remote = RemoteShards(list(searchers), token, self._pool)

    def _record(self, count: int, port: int, ssl: bool, headers: Mapping[str, str] | None) -> None:
        """Write the shard count where readers look for it: the store's manifest (embedded) or Chroma (a server)."""
        if self.host is None:
            write_json_atomic(self.layout.manifest, {"format": 3, "collection": self.collection_name, "shards": count})
            return
        client = chroma_client(self.layout.chroma, self.host, port, ssl, headers)
        client.get_or_create_collection(self.collection_name + _SHARDS_SUFFIX, metadata={"shards": count})

    # ------------------------------------------------------------------ fan-out
    def _each(self, call: Callable[[MultiVectorStore], _T]) -> list[_T]:
        """``call`` on every shard at once (each shard's reads and searches wait on Chroma or release the GIL)."""
        return list(self._pool.map(call, self.shards))

    def _by_shard(self, ids: Iterable[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for doc_id in ids:
            groups.setdefault(shard_of(doc_id, len(self.shards)), []).append(doc_id)
        return groups

    def _owner(self, doc_id: str) -> MultiVectorStore:
        return self.shards[shard_of(doc_id, len(self.shards))]

    # --------------------------------------------------------------- properties
    @property
    def dim(self) -> int | None:
        return next((s.dim for s in self.shards if s.dim is not None), None)

    @property
    def settings(self) -> dict[str, Any]:
        """What the store was built with (recorded in every shard alike)."""
        return next((s.settings for s in self.shards if s.settings), {})

    def check_settings(self, settings: Mapping[str, Any], *, section: str | None = None) -> None:
        check_settings(self.path, self.settings, settings, section=section)

    @property
    def writable(self) -> bool:
        return all(s.writable for s in self.shards)

    # ------------------------------------------------------------------- writes
    def set_settings(self, settings: Mapping[str, Any]) -> None:
        for shard in self.shards:
            shard.set_settings(settings)

    def add(
        self,
        ids: Sequence[str],
        vectors: Sequence[np.ndarray],
        metadatas: Sequence[Mapping[str, Any]],
        texts: Sequence[str | None] | None = None,
        parts: Sequence[Sequence[int] | None] | None = None,
        *,
        anchors: Sequence[np.ndarray | None] | None = None,
        grids: Sequence[bytes | None] | None = None,
    ) -> None:
        """Insert or replace documents, each in its shard (as :meth:`MultiVectorStore.add`)."""
        self.add_prepared(self.prepare_add(ids, vectors, metadatas, texts, parts, anchors=anchors, grids=grids))

    def prepare_add(
        self,
        ids: Sequence[str],
        vectors: Sequence[np.ndarray],
        metadatas: Sequence[Mapping[str, Any]],
        texts: Sequence[str | None] | None = None,
        parts: Sequence[Sequence[int] | None] | None = None,
        *,
        anchors: Sequence[np.ndarray | None] | None = None,
        grids: Sequence[bytes | None] | None = None,
    ) -> dict[int, PreparedAdd | None]:
        """Each shard's part of an add, prepared (as :meth:`MultiVectorStore.prepare_add`)."""
        prepared: dict[int, PreparedAdd | None] = {}
        for i, rows in self._by_shard_rows(ids).items():
            def pick(values: Sequence[Any] | None) -> list[Any] | None:
                return None if values is None else [values[r] for r in rows]

            prepared[i] = self.shards[i].prepare_add(
                [ids[r] for r in rows], [vectors[r] for r in rows], [metadatas[r] for r in rows], pick(texts),
                pick(parts), anchors=pick(anchors), grids=pick(grids))
        return prepared

    def add_prepared(self, batch: dict[int, PreparedAdd | None]) -> None:
        """Write each shard's prepared part (one commit a shard)."""
        for i, part in batch.items():
            self.shards[i].add_prepared(part)

    def _by_shard_rows(self, ids: Sequence[str]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for r, doc_id in enumerate(ids):
            groups.setdefault(shard_of(doc_id, len(self.shards)), []).append(r)
        return groups

    def delete(self, ids: Iterable[str]) -> int:
        return sum(self.shards[i].delete(group) for i, group in self._by_shard(ids).items())

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        for i, rows in self._by_shard_rows(ids).items():
            self.shards[i].update_metadata([ids[r] for r in rows], [metadatas[r] for r in rows])

    # -------------------------------------------------------------------- reads
    def refresh(self) -> None:
        self._each(lambda s: s.refresh())

    def count(self) -> int:
        return sum(self._each(lambda s: s.count()))

    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        return [d for ids in self._each(lambda s: s.ids(where)) for d in ids]

    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for found in self._each(lambda s: s.ids_by_source(sources)):
            for source, ids in found.items():
                out.setdefault(source, []).extend(ids)
        return out

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and doc_id in self._owner(doc_id)

    def known(self, doc_id: str) -> bool:
        return self._owner(doc_id).known(doc_id)

    def vectors(self, doc_id: str) -> np.ndarray:
        return self._owner(doc_id).vectors(doc_id)

    def vectors_with_anchors(self, doc_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        return self._owner(doc_id).vectors_with_anchors(doc_id)

    def get(self, ids: Sequence[str] | None = None, *, include_vectors: bool = False) -> list[StoredDocument]:
        """Records by id, in the order asked (missing ids are skipped), or all records."""
        if ids is None:
            return [d for docs in self._each(lambda s: s.get(None, include_vectors=include_vectors)) for d in docs]
        found = {d.id: d for i, group in self._by_shard(ids).items()
                 for d in self.shards[i].get(group, include_vectors=include_vectors)}
        return [found[d] for d in ids if d in found]

    def iter_documents(self, where: Mapping[str, Any] | None = None, *, page: int = 500) -> Iterator[StoredDocument]:
        for shard in self.shards:
            yield from shard.iter_documents(where, page=page)

    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        return {k: v for i, group in self._by_shard(ids).items() for k, v in self.shards[i].texts(group).items()}

    def grid(self, doc_id: str) -> bytes:
        return self._owner(doc_id).grid(doc_id)

    def total_vectors(self) -> int:
        return sum(s.total_vectors() for s in self.shards)

    def images_encoded(self) -> int:
        return sum(s.images_encoded() for s in self.shards)

    def bytes_on_disk(self) -> int:
        return statistics.bytes_under(self.path)

    def bytes_by_part(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for shard in self.shards:
            for part, n in shard.bytes_by_part().items():
                out[part] = out.get(part, 0) + n
        return out

    def describe(self, *, model: str, settings: Mapping[str, Any], page_cache: Mapping[str, int]) -> dict[str, Any]:
        """``docpc info``'s description: the shards' summed, with the store's path, collection and shard count."""
        each = [s.describe(model=model, settings=settings, page_cache=page_cache) for s in self.shards]
        out = dict(each[0])
        for key in ("documents", "images_encoded", "vectors", "bytes_grid_images", "bytes_cache"):
            out[key] = sum(d[key] for d in each)
        out["bytes_on_disk"] = self.bytes_on_disk()
        docs = out["documents"]
        parts = self.bytes_by_part()
        out["bytes_per_document"] = {**{k: (round(v / docs) if docs else 0) for k, v in parts.items()},
                                     "on_disk": round(out["bytes_on_disk"] / docs) if docs else 0}
        keys: dict[str, int] = {}
        for d in each:
            for k, n in (d.get("metadata_keys") or {}).items():
                keys[k] = keys.get(k, 0) + n
        out.update(path=str(self.path), collection=self.collection_name, metadata_keys=keys, shards=len(self.shards))
        return out

    def warm(self, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Every shard's vectors into this process's caches; nothing with searchers (they hold the vectors)."""
        if self.remote is not None:
            return {"shards": [], "searchers": self.remote.urls}
        done = [s.warm(on_progress) for s in self.shards]
        return {"shards": done}

    def prefetch(self) -> None:
        """Fetch every shard's vectors in the background; nothing with searchers: a reader of them holds none."""
        if self.remote is not None:
            return
        for shard in self.shards:
            shard.prefetch()

    # ------------------------------------------------------------------- search
    def search(self, query: np.ndarray, top_k: int = 10, **options: Any) -> list[ScoredDocument]:
        return self.search_batch([query], top_k, **options)[0]

    def search_batch(self, queries: Sequence[np.ndarray], top_k: int = 10, *, ids: Iterable[str] | None = None,
                     partial: bool = False, **options: Any) -> list[list[ScoredDocument]]:
        """Every shard's own top ``top_k`` per query (options as :meth:`MultiVectorStore.search_batch`; ``ids`` go
        to their shards), merged: the whole store's exact top ``top_k``. With searchers, each shard's answer comes
        from its searcher, and vectors (``with_vectors``) only for the merged hits; a searcher that does not answer
        is a :class:`StoreError` naming it, or with ``partial`` the others' merged answer, each hit's metadata
        naming the ``missing_shards`` (an error still when the others hold no match: an empty answer cannot be
        marked). Shards read in this process always answer."""
        groups = None if ids is None else self._by_shard(ids)
        if groups is not None and not groups:
            return [[] for _ in queries]
        if self.remote is not None:
            return self.remote.search(queries, top_k, groups, len(self.shards), options, partial=partial)

        def one(i: int) -> list[list[ScoredDocument]]:
            if groups is not None and i not in groups:
                return [[] for _ in queries]
            within = None if groups is None else groups[i]
            return self.shards[i].search_batch(queries, top_k, ids=within, **options)

        answers = list(self._pool.map(one, range(len(self.shards))))
        return [merge_top_k((answer[q] for answer in answers), top_k) for q in range(len(queries))]

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if getattr(self, "remote", None) is not None:
            self.remote.close()  # type: ignore[union-attr]
        for shard in getattr(self, "shards", []):
            shard.close()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)

    def __enter__(self) -> ShardedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
