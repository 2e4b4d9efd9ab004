"""The change feed: one record per commit in ``C.log``, so readers learn what other writers did.

Key ``<sequence>-<put|delete>-<random>-<i>`` (the microsecond sequence orders commits), metadata ``seq`` and
``op``, the ids as text: one record per 400 ids, fewer where long ids would pass a document's 16 KB. The feed is
append-only: no entry is deleted or rewritten, so its size tells whether anything happened.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from docpc_retrievers.store.chroma_reads import TEXT_BYTES, WRITE_BATCH, read_ids, read_pages

__all__ = ["LOOKBACK_US", "Change", "ChangeFeed"]

#: A reader re-reads this much of the change feed before its last position (microseconds), so a
#: commit that took a sequence number just before another writer's, but landed after it, is not missed.
LOOKBACK_US = 120_000_000
#: Ids per feed record (fewer where their text would pass TEXT_BYTES).
_IDS_PER_RECORD = 400


@dataclass(frozen=True)
class Change:
    """One commit in the change feed: ``op`` is ``put`` or ``delete``."""

    key: str
    seq: int
    op: str
    ids: tuple[str, ...] = field(default=())


class ChangeFeed:
    """Appends commits to a log collection and reads them back."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def append(self, seq: int, op: str, ids: Sequence[str]) -> list[str]:
        """Record one commit of ``op`` on ``ids``; the keys written."""
        chunks: list[list[str]] = [[]]
        size = 0
        for doc_id in ids:
            n = len(doc_id.encode("utf-8")) + 1
            if len(chunks[-1]) == _IDS_PER_RECORD or (chunks[-1] and size + n > TEXT_BYTES):
                chunks.append([])
                size = 0
            chunks[-1].append(doc_id)
            size += n
        token = secrets.token_hex(4)
        keys = [f"{seq:019d}-{op}-{token}-{i}" for i in range(len(chunks))]
        for s in range(0, len(keys), WRITE_BATCH):
            e = s + WRITE_BATCH
            self.log.upsert(
                ids=keys[s:e],
                metadatas=[{"seq": seq, "op": op} for _ in keys[s:e]],
                documents=["\n".join(c) for c in chunks[s:e]],
                embeddings=np.ones((len(keys[s:e]), 1), np.float32),
            )
        return keys

    def changes(self, since: int, *, skip: set[str] | frozenset[str] = frozenset()) -> list[Change]:
        """Commits after ``since`` (minus the look-back), oldest first; keys in ``skip`` are not fetched again.

        Cheap when nothing happened: one query for keys alone (they carry the sequence and the operation).
        """
        got = read_pages(self.log, where={"seq": {"$gt": int(since) - LOOKBACK_US}}, include=[])
        new = [k for k in got["ids"] if k not in skip]
        if not new:
            return []
        texts = read_ids(self.log, new, include=["documents"])
        out = [_change(key, text) for key, text in zip(texts["ids"], texts["documents"])]
        out.sort(key=lambda c: (c.seq, c.key))
        return out

    def size(self) -> int:
        """Entries in the feed: a 0.4 ms count detects a change where the keyed query costs 5-20 ms."""
        return int(self.log.count())

    def position(self) -> tuple[int, set[str]]:
        """The newest sequence, and the keys within the look-back before it."""
        keys = read_pages(self.log, include=[])["ids"]
        newest = max((int(k.split("-")[0]) for k in keys), default=0)
        return newest, {k for k in keys if int(k.split("-")[0]) > newest - LOOKBACK_US}

    def replayed_ids(self) -> list[str]:
        """The ids every commit put and no later commit deleted, in the order they were first put."""
        got = read_pages(self.log, include=["documents"])
        live: dict[str, None] = {}
        for change in sorted((_change(k, t) for k, t in zip(got["ids"], got["documents"])),
                             key=lambda c: (c.seq, c.key)):
            if change.op == "delete":
                for doc_id in change.ids:
                    live.pop(doc_id, None)
            else:
                live.update(dict.fromkeys(change.ids))
        return list(live)


def _change(key: str, text: str | None) -> Change:
    seq, op = key.split("-")[:2]
    return Change(key, int(seq), op, tuple(i for i in (text or "").split("\n") if i))
