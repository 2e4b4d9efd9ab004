"""Where a document of a sharded store lives, and how the shards' answers become the store's (store/shards.py)."""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Sequence

from docpc_retrievers.store.records import ScoredDocument

__all__ = ["merge_top_k", "shard_of"]


def shard_of(doc_id: str, shards: int) -> int:
    """The shard a document lives in: a hash of its id, the same in every process and on every machine."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def merge_top_k(per_shard: Iterable[Sequence[ScoredDocument]], top_k: int) -> list[ScoredDocument]:
    """The best ``top_k`` of the shards' own top ``top_k`` lists, best first, ties by id: exactly the whole store's
    top ``top_k``, since each document lives in one shard and each shard's list is exact."""
    return heapq.nsmallest(top_k, (h for hits in per_shard for h in hits), key=lambda h: (-h.score, h.id))
