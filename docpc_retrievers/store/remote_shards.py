"""A sharded store's searches answered by its shard searchers (``docpc serve-shard``) over HTTP and merged here."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.records import MISSING_SHARDS, ScoredDocument, shards_named
from docpc_retrievers.store.shard_routing import merge_top_k, shard_of
from docpc_retrievers.store.shard_wire import array_from, hits_from, search_request

__all__ = ["RemoteShards"]

logger = logging.getLogger(__name__)


class RemoteShards:
    """Each shard's searcher over HTTP (store/shard_wire.py): asked at once, merged here; a searcher that does not
    answer is a :class:`StoreError` naming its shard and address, never silently fewer hits."""

    def __init__(self, urls: list[str], token: str | None, pool: ThreadPoolExecutor) -> None:
        import httpx

        self.urls = [u.rstrip("/") for u in urls]
        self.client = httpx.Client(timeout=300.0, headers={"Authorization": f"Bearer {token}"} if token else {})
        self.pool = pool

    def _post(self, shard: int, route: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        url = f"{self.urls[shard]}{route}"
        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise StoreError(f"shard {shard}'s searcher at {self.urls[shard]} did not answer: {exc}") from None
        if response.status_code != 200:
            raise StoreError(f"shard {shard}'s searcher at {self.urls[shard]} answered {response.status_code}: "
                             f"{response.text[:300]}")
        return response.json()  # type: ignore[no-any-return]

    def search(self, queries: Sequence[np.ndarray], top_k: int, groups: dict[int, list[str]] | None, shards: int,
               options: dict[str, Any], *, partial: bool = False) -> list[list[ScoredDocument]]:
        """Each query's top ``top_k`` over the shards asked (``groups``: the ids each shard is searched within). A
        searcher that does not answer raises, or with ``partial`` is left out: the others' hits then name it in
        their metadata (``missing_shards``) and a warning is logged, so fewer hits are never silent; a query the
        others hold no match for leaves nothing to mark, so that is a :class:`StoreError` naming the missing shards."""
        with_vectors = bool(options.pop("with_vectors", False))
        asked = [i for i in range(shards) if groups is None or i in groups]

        def one(i: int) -> list[list[ScoredDocument]] | StoreError:
            body = search_request(queries, top_k, {**options, **({} if groups is None else {"ids": groups[i]})})
            try:
                return [hits_from(hits) for hits in self._post(i, "/search", body)["hits"]]
            except StoreError as exc:
                if not partial:
                    raise
                return exc

        answered = list(self.pool.map(one, asked))
        failed = {i: a for i, a in zip(asked, answered) if isinstance(a, StoreError)}
        if failed and len(failed) == len(asked):
            raise StoreError(f"no shard searcher answered: {'; '.join(map(str, failed.values()))}")
        answers = [a for a in answered if not isinstance(a, StoreError)]
        merged = [merge_top_k((answer[q] for answer in answers), top_k) for q in range(len(queries))]
        if failed:
            missing = sorted(failed)
            if any(not hits for hits in merged):  # nothing to carry the mark: an empty answer would read as whole
                raise StoreError(f"a partial answer found no match to mark as partial: {shards_named(missing)} did "
                                 f"not answer and the others hold no match ({'; '.join(map(str, failed.values()))})")
            for exc in failed.values():
                logger.warning("partial answer: %s", exc)
            merged = [[replace(h, metadata={**h.metadata, MISSING_SHARDS: missing}) for h in hits] for hits in merged]
        if with_vectors:
            owners: dict[int, set[str]] = {}
            for hits in merged:
                for h in hits:
                    owners.setdefault(shard_of(h.id, shards), set()).add(h.id)
            fetched: dict[str, Any] = {}
            for found in self.pool.map(lambda i: self._post(i, "/vectors", {"ids": sorted(owners[i])}), owners):
                fetched.update(found["documents"])
            merged = [[replace(h, vectors=array_from(fetched[h.id]["vectors"]),
                               anchors=None if fetched[h.id]["anchors"] is None
                               else array_from(fetched[h.id]["anchors"])) for h in hits] for hits in merged]
        return merged

    def close(self) -> None:
        self.client.close()
