"""Where a store's records live: the engine interface, and Chroma behind it.

Everything a search needs is in the engine, so any process that can reach
it (an embedded Chroma directory, or ``chroma run`` / Chroma's distributed
deployment over HTTP) can search; local files are only a cache (cache.py).

Chroma layout for a store named ``C``:

* ``C``: one record per document. Embedding: the mean of its vectors (unit
  length; plain Chroma tools can query it). Document: the text of its
  selected pages. Metadata: the public keys (filterable) plus internal ``_``
  keys: vector count, page parts, first-stage summary (``_summary``, base64
  int8 centroids), write sequence, payload record counts.
* ``C.blobs``: payload records keyed ``<doc id>.<kind><i>`` (``v`` compact
  vectors, ``g`` grid preview, ``t`` text beyond what one document field may
  hold), as text split over metadata values of at most 4,000 characters
  (payload in the document field would be full-text indexed: 7x the bytes):
  base64 in format 2, zlib and base85 in format 3 (codec.py).
* ``C.log``: the change feed, one record per commit (per 400 ids): key
  ``<sequence>-<put|delete>-<random>-<i>``, the ids as its text; the
  microsecond sequence orders commits. Readers list the keys after their
  position on every search (one cheap query) and fetch only those unseen.
* Store-wide settings (format, dim, encoder and index settings) in ``C``'s
  collection metadata.

How a Chroma client is made (embedded or over HTTP) lives in chroma_client.py.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.chroma_client import unreachable
from docpc_retrievers.store.chroma_quotas import HOSTED
from docpc_retrievers.store.codec import chunk_payload, join_payload

__all__ = ["READABLE_FORMATS", "STORE_FORMAT", "Change", "ChromaEngine", "DocumentRecord", "payload_packing"]

logger = logging.getLogger(__name__)

#: Format 1 (0.1): records in Chroma, vectors and grids in local files. Format 2: everything in Chroma, payloads
#: as base64. Format 3 (new stores): payloads packed as zlib and base85, about 0.9x the characters, each record
#: naming its packing (an older version refuses the store by its format instead of misreading it).
STORE_FORMAT = 3
#: The formats this version reads and writes (a format-2 store keeps writing base64, so older versions still read it).
READABLE_FORMATS = (2, 3)


def payload_packing(store_format: int) -> str:
    """How a store of ``store_format`` packs new payloads (codec.PACKINGS)."""
    return "b64" if store_format < 3 else "z85"


#: A reader re-reads this much of the change feed before its last position (microseconds), so a
#: commit that took a sequence number just before another writer's, but landed after it, is not missed.
_LOOKBACK_US = 120_000_000
#: Records per Chroma write (hosted Chroma: 300).
_WRITE_BATCH = 250
#: Records per Chroma read, by ids or by page (hosted Chroma: 300 results per read).
_READ_PAGE = HOSTED.results_per_read
#: Characters of the manifest's JSON per collection metadata value (hosted Chroma: 4 KB per value).
_MANIFEST_CHARS = 4000
#: Bytes of text kept in a document record's text field (hosted Chroma: 16 KB); the rest goes to blobs.
_TEXT_BYTES = 16_000


@dataclass
class DocumentRecord:
    """One document as the engine keeps it.

    ``metadata``: public keys plus the internal ``_`` keys; ``embedding``: its
    mean unit vector ``[dim]``; ``vectors``: the packed compact multi-vector
    (codec.pack_vectors); ``grid``: the preview image bytes or None.
    """

    id: str
    metadata: dict[str, Any]
    text: str
    embedding: np.ndarray
    vectors: bytes
    grid: bytes | None = None


@dataclass(frozen=True)
class Change:
    """One commit in the change feed: ``op`` is ``put`` or ``delete``."""

    key: str
    seq: int
    op: str
    ids: tuple[str, ...] = field(default=())


def _translated(method: Any) -> Any:
    """Turn "the server is gone" into a StoreError that says what happened and that nothing committed is lost."""
    from functools import wraps

    @wraps(method)
    def wrapper(self: ChromaEngine, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if unreachable(exc):
                raise StoreError(
                    f"the Chroma server behind store {self.name!r} cannot be reached ({type(exc).__name__}: {exc}); "
                    "what was committed is kept: re-run once the server is back"
                ) from exc
            raise

    return wrapper


def _now_seq() -> int:
    return time.time_ns() // 1000


class ChromaEngine:
    """:class:`StoreEngine` on three Chroma collections (see the module docstring)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        self.docs = self._collection(name, {"hnsw": {"space": "ip"}})
        # The payload's vectors are 1-d placeholders, so its index can save often; Chroma keeps each record in its
        # write log until that collection's index saves (every 1,000 records by default): saving every 50 purges
        # the log of payload copies sooner (new stores; an existing collection keeps its own).
        self.blobs = self._collection(f"{name}.blobs", None, indexed=("doc", "kind"), sync_every=50)
        self.log = self._collection(f"{name}.log", None, indexed=("op",))
        self.identity = str(self.docs.id)
        #: How new payloads become text (see :func:`payload_packing`); the store sets it from its format.
        self.packing = payload_packing(STORE_FORMAT)
        #: Change-feed keys of this engine's own last commit (so its reader need not re-read them).
        self.last_keys: list[str] = []

    def _collection(self, name: str, configuration: Mapping[str, Any] | None, indexed: Sequence[str] = (),
                    sync_every: int | None = None) -> Any:
        """Get or create a collection; payload collections index only the string keys searches filter on.

        Why: a payload value needs no inverted index. Chroma's distributed deployment honours the
        schema; local Chroma (1.5) accepts it and indexes every string anyway (measured).
        """
        kwargs: dict[str, Any] = {"embedding_function": None}
        if configuration is not None:
            kwargs["configuration"] = dict(configuration)
        if indexed:
            try:
                from chromadb import Schema, StringInvertedIndexConfig

                schema = Schema()
                schema.delete_index(config=StringInvertedIndexConfig())
                for key in indexed:
                    schema.create_index(config=StringInvertedIndexConfig(), key=key)
                if sync_every is not None:
                    from chromadb import HnswIndexConfig, VectorIndexConfig

                    hnsw = HnswIndexConfig(sync_threshold=sync_every, batch_size=sync_every)
                    schema.create_index(config=VectorIndexConfig(hnsw=hnsw))
                return self.client.get_or_create_collection(name, schema=schema, **kwargs)
            except (ImportError, TypeError, ValueError) as exc:
                logger.debug("collection %s without a schema: %s", name, exc)
        return self.client.get_or_create_collection(name, **kwargs)

    # ---------------------------------------------------------------- manifest
    @_translated
    def read_manifest(self) -> dict[str, Any]:
        self.docs = self.client.get_collection(self.name, embedding_function=None)  # collection metadata is cached per handle
        raw = _joined_manifest(dict(self.docs.metadata or {}))
        if not raw:
            return {}
        try:
            return json.loads(str(raw))
        except json.JSONDecodeError as exc:
            raise StoreError(f"collection {self.name}: unreadable docpc manifest: {exc}") from exc

    @_translated
    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Merge ``manifest`` into the recorded one (another writer may have recorded keys meanwhile)."""
        merged = {**self.read_manifest(), **dict(manifest)}
        text = json.dumps(merged, sort_keys=True, separators=(",", ":"))
        self.docs = self.client.get_collection(self.name, embedding_function=None)  # fresh collection metadata
        meta = {k: v for k, v in (self.docs.metadata or {}).items()
                if not k.startswith("hnsw:") and not k.startswith("docpc_manifest")}
        meta.update(_split_manifest(text))
        self.docs.modify(metadata=meta)

    # ------------------------------------------------------------------ writes
    @_translated
    def write(self, docs: Sequence[DocumentRecord]) -> int:
        if not docs:
            return 0
        seq = _now_seq()
        blob_ids, blob_metas = [], []
        old = self.records([d.id for d in docs], include_summary=False)
        for d in docs:
            for kind, data in (("v", d.vectors), ("g", d.grid), ("t", self._overflow(d.text))):
                n = 0
                if data is not None:
                    for i, chunk in enumerate(chunk_payload(data, self.packing)):
                        blob_ids.append(f"{d.id}.{kind}{i}")
                        blob_metas.append({"doc": d.id, "kind": kind, "i": i, "seq": seq, **chunk})
                        n += 1
                d.metadata[f"_{kind}"] = n
            d.metadata["_seq"] = seq
        self._upsert(self.blobs, blob_ids, blob_metas)
        stale = self._stale_blobs(docs, old)
        ids = [d.id for d in docs]
        metas = [_replacing(d.metadata, old.get(d.id)) for d in docs]
        texts = [_clip_text(d.text) for d in docs]
        emb = np.stack([np.asarray(d.embedding, dtype=np.float32) for d in docs])
        for s in range(0, len(ids), _WRITE_BATCH):
            e = s + _WRITE_BATCH
            self.docs.upsert(ids=ids[s:e], embeddings=emb[s:e], metadatas=metas[s:e], documents=texts[s:e])
        if stale:
            self._delete_ids(self.blobs, stale)
        self._append_log(seq, "put", ids)
        return seq

    @_translated
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> int:
        """Replace documents' metadata in place (a ``put`` in the feed, so readers refetch it)."""
        seq = _now_seq()
        self.docs.update(ids=list(ids), metadatas=[{**m, "_seq": seq} for m in metadatas])
        self._append_log(seq, "put", ids)
        return seq

    @_translated
    def delete(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return 0
        seq = _now_seq()
        self._delete_ids(self.docs, ids)
        for s in range(0, len(ids), 100):
            got = self._get_pages(self.blobs, where={"doc": {"$in": ids[s : s + 100]}}, include=[])
            self._delete_ids(self.blobs, got["ids"])
        self._append_log(seq, "delete", ids)
        return seq

    def _overflow(self, text: str) -> bytes | None:
        data = text.encode("utf-8")
        return data if len(data) > _TEXT_BYTES else None

    def _stale_blobs(self, docs: Sequence[DocumentRecord], old: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Payload records of a replaced document that its new version no longer uses."""
        out = []
        for d in docs:
            before = old.get(d.id) or {}
            for kind in ("v", "g", "t"):
                out.extend(f"{d.id}.{kind}{i}" for i in range(int(d.metadata[f"_{kind}"]), int(before.get(f"_{kind}", 0))))
        return out

    def _upsert(self, collection: Any, ids: list[str], metas: list[dict[str, Any]]) -> None:
        for s in range(0, len(ids), _WRITE_BATCH):
            e = s + _WRITE_BATCH
            collection.upsert(ids=ids[s:e], metadatas=metas[s:e], embeddings=np.ones((len(ids[s:e]), 1), np.float32))

    def _delete_ids(self, collection: Any, ids: Sequence[str]) -> None:
        ids = list(ids)
        for s in range(0, len(ids), _WRITE_BATCH):
            collection.delete(ids=ids[s : s + _WRITE_BATCH])

    def _append_log(self, seq: int, op: str, ids: Sequence[str]) -> None:
        """One feed record per 400 ids: key ``<seq>-<op>-<random>-<i>``, the ids as its text."""
        ids = list(ids)
        chunks = [ids[i : i + 400] for i in range(0, len(ids), 400)] or [[]]
        token = secrets.token_hex(4)
        keys = [f"{seq:019d}-{op}-{token}-{i}" for i in range(len(chunks))]
        for s in range(0, len(keys), _WRITE_BATCH):
            e = s + _WRITE_BATCH
            self.log.upsert(
                ids=keys[s:e],
                metadatas=[{"seq": seq, "op": op} for _ in keys[s:e]],
                documents=["\n".join(c) for c in chunks[s:e]],
                embeddings=np.ones((len(keys[s:e]), 1), np.float32),
            )
        self.last_keys = keys

    # ------------------------------------------------------------------- reads
    @_translated
    def count(self) -> int:
        """Documents in the store."""
        return int(self.docs.count())

    @_translated
    def records(self, ids: Sequence[str] | None = None, *, include_summary: bool = True) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if ids is not None:
            got = self._get_ids(self.docs, ids, include=["metadatas"])
        else:
            got = self._get_pages(self.docs, include=["metadatas"])
        out.update(zip(got["ids"], got["metadatas"]))
        if not include_summary:
            for meta in out.values():
                meta.pop("_summary", None)
        return {k: dict(v) for k, v in out.items()}

    @_translated
    def records_page(
        self, where: Mapping[str, Any] | None, limit: int, offset: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """One page of ``(id, metadata)`` without the first-stage summary, in Chroma's order."""
        out = []
        got: dict[str, list[Any]] = {"ids": [], "metadatas": []}
        for start in range(offset, offset + limit, _READ_PAGE):
            page = self._get(self.docs, where=dict(where) if where else None, include=["metadatas"],
                             limit=min(_READ_PAGE, offset + limit - start), offset=start)
            got["ids"] += page["ids"]
            got["metadatas"] += page["metadatas"] or []
            if len(page["ids"]) < min(_READ_PAGE, offset + limit - start):
                break
        for doc_id, meta in zip(got["ids"], got["metadatas"] or []):
            meta = dict(meta or {})
            meta.pop("_summary", None)
            out.append((doc_id, meta))
        return out

    @_translated
    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """Document ids, optionally those matching a Chroma ``where`` filter."""
        return list(self._get_pages(self.docs, where=dict(where) if where else None, include=[])["ids"])

    @_translated
    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        """Ids of the documents whose ``source`` is one of ``sources``, by source (one query for all)."""
        wanted = sorted(set(sources))
        if not wanted:
            return {}
        where = {"source": wanted[0]} if len(wanted) == 1 else {"source": {"$in": wanted}}
        got = self._get_pages(self.docs, where=where, include=["metadatas"])
        out: dict[str, list[str]] = {}
        for doc_id, meta in zip(got["ids"], got["metadatas"] or []):
            out.setdefault(str((meta or {}).get("source")), []).append(doc_id)
        return out

    @_translated
    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """Full text of documents (the record's text, or the overflow payload when it was longer)."""
        return {doc_id: text for doc_id, (_, text) in self.texts_and_records(ids).items()}

    @_translated
    def texts_and_records(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], str]]:
        """Each stored document's metadata (without the summary) and full text, from one read of its record."""
        if not ids:
            return {}
        got = self._get_ids(self.docs, ids, include=["documents", "metadatas"])
        out: dict[str, tuple[dict[str, Any], str]] = {}
        for doc_id, text, meta in zip(got["ids"], got["documents"] or [], got["metadatas"] or []):
            meta = dict(meta or {})
            meta.pop("_summary", None)
            out[doc_id] = (meta, text or "")
        long = [i for i, (m, _) in out.items() if int(m.get("_t", 0))]
        for doc_id, data in self.payload(long, "t").items():
            out[doc_id] = (out[doc_id][0], data.decode("utf-8"))
        return out

    @_translated
    def payload(self, ids: Sequence[str], kind: str) -> dict[str, bytes]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        parts: dict[str, dict[int, dict[str, Any]]] = {}
        for s in range(0, len(ids), 100):
            got = self._get_pages(self.blobs, where={"$and": [{"doc": {"$in": ids[s : s + 100]}}, {"kind": kind}]},
                                  include=["metadatas"])
            for meta in got["metadatas"]:
                parts.setdefault(str(meta["doc"]), {})[int(meta["i"])] = meta
        return {doc: join_payload([chunks[i] for i in sorted(chunks)]) for doc, chunks in parts.items()}

    @_translated
    def changes(self, since: int, *, skip: set[str] | frozenset[str] = frozenset()) -> list[Change]:
        """Commits after ``since`` (minus the look-back), oldest first; keys in ``skip`` are not fetched again.

        Cheap when nothing happened: one query for keys alone (they carry the sequence and the operation).
        """
        got = self._get_pages(self.log, where={"seq": {"$gt": int(since) - _LOOKBACK_US}}, include=[])
        new = [k for k in got["ids"] if k not in skip]
        if not new:
            return []
        texts = self._get_ids(self.log, new, include=["documents"])
        out = []
        for key, text in zip(texts["ids"], texts["documents"] or []):
            seq, op = key.split("-")[:2]
            out.append(Change(key, int(seq), op, tuple(i for i in (text or "").split("\n") if i)))
        out.sort(key=lambda c: (c.seq, c.key))
        return out


    @_translated
    def feed_size(self) -> int:
        # Append-only (no entry is deleted or rewritten): a 0.4 ms count detects change; the keyed query costs 5-20 ms.
        return int(self.log.count())

    @_translated
    def position(self) -> tuple[int, set[str]]:
        keys = self._get_pages(self.log, include=[])["ids"]
        newest = max((int(k.split("-")[0]) for k in keys), default=0)
        return newest, {k for k in keys if int(k.split("-")[0]) > newest - _LOOKBACK_US}


    # ------------------------------------------------------- paged reads (quotas)
    def _get(self, collection: Any, **kwargs: Any) -> Any:
        """One ``get``, at most hosted Chroma's concurrent reads of a collection in flight from this process."""
        with _read_slot(str(collection.id)):
            return collection.get(**kwargs)

    def _get_ids(self, collection: Any, ids: Sequence[str], *, include: list[str],
                 where: Mapping[str, Any] | None = None) -> dict[str, list[Any]]:
        """Records by id, :data:`_READ_PAGE` ids a read; the fields of ``include`` concatenated."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, list[Any]] = {"ids": [], **{k: [] for k in include}}
        for s in range(0, len(wanted), _READ_PAGE):
            _extend(out, self._get(collection, ids=wanted[s : s + _READ_PAGE], where=where, include=include), include)
        return out

    def _get_pages(self, collection: Any, *, include: list[str],
                   where: Mapping[str, Any] | None = None) -> dict[str, list[Any]]:
        """Every record (matching ``where``), a page of :data:`_READ_PAGE` a read."""
        out: dict[str, list[Any]] = {"ids": [], **{k: [] for k in include}}
        start = 0
        while True:
            got = self._get(collection, where=where, include=include, limit=_READ_PAGE, offset=start)
            _extend(out, got, include)
            if len(got["ids"]) < _READ_PAGE:
                return out
            start += _READ_PAGE


_READ_SLOTS: dict[str, threading.BoundedSemaphore] = {}
_READ_SLOTS_LOCK = threading.Lock()


def _read_slot(collection_id: str) -> threading.BoundedSemaphore:
    """The semaphore that keeps this process's reads of one collection within hosted Chroma's concurrent reads."""
    with _READ_SLOTS_LOCK:
        slot = _READ_SLOTS.get(collection_id)
        if slot is None:
            slot = _READ_SLOTS[collection_id] = threading.BoundedSemaphore(HOSTED.concurrent_reads)
        return slot


def _extend(out: dict[str, list[Any]], got: Mapping[str, Any], include: Sequence[str]) -> None:
    out["ids"].extend(got["ids"])
    for key in include:
        out[key].extend(got.get(key) or [])


def _split_manifest(text: str) -> dict[str, str]:
    """The manifest's JSON over collection metadata values of at most :data:`_MANIFEST_CHARS` characters:
    ``docpc_manifest``, then ``docpc_manifest.1``, ``docpc_manifest.2``... (hosted Chroma: 4 KB a value)."""
    pieces = [text[i : i + _MANIFEST_CHARS] for i in range(0, len(text), _MANIFEST_CHARS)] or [""]
    return {("docpc_manifest" if i == 0 else f"docpc_manifest.{i}"): piece for i, piece in enumerate(pieces)}


def _joined_manifest(meta: Mapping[str, Any]) -> str:
    """The manifest's JSON from :func:`_split_manifest`'s values (one value in stores written before the split)."""
    raw = meta.get("docpc_manifest")
    if not raw:
        return ""
    pieces, i = [str(raw)], 1
    while f"docpc_manifest.{i}" in meta:
        pieces.append(str(meta[f"docpc_manifest.{i}"]))
        i += 1
    return "".join(pieces)


def _replacing(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chroma merges metadata on upsert; a None for every dropped key makes it a replacement."""
    out = dict(new)
    for key in old or {}:
        out.setdefault(key, None)
    return out


def _clip_text(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= _TEXT_BYTES:
        return text
    return data[:_TEXT_BYTES].decode("utf-8", errors="ignore")
