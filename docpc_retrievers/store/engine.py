"""Where a store's records live: the engine interface, and Chroma behind it.

Everything a search needs is in the engine, so any process that can reach
it (an embedded Chroma directory, or ``chroma run`` / Chroma's distributed
deployment over HTTP) can search; local files are only a cache (cache.py).

Chroma layout for a store named ``C``:

* ``C``: one record per document. Embedding: the mean of its vectors (unit
  length; plain Chroma tools can query it). Document: the start of its text
  (``fields.SNIPPET_BYTES``; the whole text when that short). Metadata: the public keys (filterable) plus internal ``_``
  keys: vector count, page parts, first-stage summary (``_summary``, base64
  int8 centroids), write sequence, payload record counts.
* ``C.blobs``: payload records keyed ``<doc id>.<kind><i>`` (``v`` compact
  vectors, ``g`` grid preview, ``t`` the text, when longer than the snippet), as text split over metadata values of at most 4,000 characters
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
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.chroma_client import unreachable
from docpc_retrievers.store.chroma_reads import READ_PAGE, WRITE_BATCH, read, read_ids, read_pages
from docpc_retrievers.store.codec import chunk_payload, join_payload
from docpc_retrievers.store.feed import Change, ChangeFeed
from docpc_retrievers.store.fields import joined_manifest, long_text, snippet, split_manifest

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
        self.feed = ChangeFeed(self.log)
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
        raw = joined_manifest(dict(self.docs.metadata or {}))
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
        meta.update(split_manifest(text))
        self.docs.modify(metadata=meta)

    # ------------------------------------------------------------------ writes
    def pack_payload(self, doc: DocumentRecord) -> list[tuple[str, dict[str, Any]]]:
        """A document's payload records ``(id, metadata)``: its vectors, grid preview and long text as text chunks.

        CPU work that needs no lock and no Chroma call (the packing's compression and base85 release Python's
        lock), so an indexing run packs the next commit while this one writes. Sets the record's ``_v``, ``_g``
        and ``_t`` counts; :meth:`write` adds the commit's sequence number.
        """
        out: list[tuple[str, dict[str, Any]]] = []
        for kind, data in (("v", doc.vectors), ("g", doc.grid), ("t", long_text(doc.text))):
            n = 0
            if data is not None:
                # a grid preview is WebP already: compressing it again only costs time
                chunks = chunk_payload(data, self.packing, compress=kind != "g")
                for i, chunk in enumerate(chunks):
                    out.append((f"{doc.id}.{kind}{i}", {"doc": doc.id, "kind": kind, "i": i, "of": len(chunks), **chunk}))
                    n += 1
            doc.metadata[f"_{kind}"] = n
        return out

    @_translated
    def write(self, docs: Sequence[DocumentRecord],
              payloads: Sequence[list[tuple[str, dict[str, Any]]]] | None = None) -> int:
        """Write documents (payload first, then records, then a feed entry); ``payloads``: each document's
        :meth:`pack_payload`, packed beforehand (None: packed here)."""
        if not docs:
            return 0
        seq = _now_seq()
        if payloads is None:
            payloads = [self.pack_payload(d) for d in docs]
        blob_ids, blob_metas = [], []
        old = self.records([d.id for d in docs], include_summary=False)
        for d, payload in zip(docs, payloads):
            for blob_id, meta in payload:
                blob_ids.append(blob_id)
                blob_metas.append({**meta, "seq": seq})
            d.metadata["_seq"] = seq
        self._upsert(self.blobs, blob_ids, blob_metas)
        stale = self._stale_blobs(docs, old)
        ids = [d.id for d in docs]
        metas = [_replacing(d.metadata, old.get(d.id)) for d in docs]
        texts = [snippet(d.text) for d in docs]
        emb = np.stack([np.asarray(d.embedding, dtype=np.float32) for d in docs])
        for s in range(0, len(ids), WRITE_BATCH):
            e = s + WRITE_BATCH
            self.docs.upsert(ids=ids[s:e], embeddings=emb[s:e], metadatas=metas[s:e], documents=texts[s:e])
        if stale:
            self._delete_ids(self.blobs, stale)
        self.last_keys = self.feed.append(seq, "put", ids)
        return seq

    @_translated
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> int:
        """Replace documents' metadata in place (a ``put`` in the feed, so readers refetch it)."""
        seq = _now_seq()
        ids, metas = list(ids), [{**m, "_seq": seq} for m in metadatas]
        for s in range(0, len(ids), WRITE_BATCH):
            self.docs.update(ids=ids[s : s + WRITE_BATCH], metadatas=metas[s : s + WRITE_BATCH])
        self.last_keys = self.feed.append(seq, "put", ids)
        return seq

    @_translated
    def delete(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return 0
        seq = _now_seq()
        self._delete_ids(self.docs, ids)
        for s in range(0, len(ids), 100):
            got = read_pages(self.blobs, where={"doc": {"$in": ids[s : s + 100]}}, include=[])
            self._delete_ids(self.blobs, got["ids"])
        self.last_keys = self.feed.append(seq, "delete", ids)
        return seq

    def _stale_blobs(self, docs: Sequence[DocumentRecord], old: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Payload records of a replaced document that its new version no longer uses."""
        out = []
        for d in docs:
            before = old.get(d.id) or {}
            for kind in ("v", "g", "t"):
                out.extend(f"{d.id}.{kind}{i}" for i in range(int(d.metadata[f"_{kind}"]), int(before.get(f"_{kind}", 0))))
        return out

    def _upsert(self, collection: Any, ids: list[str], metas: list[dict[str, Any]]) -> None:
        for s in range(0, len(ids), WRITE_BATCH):
            e = s + WRITE_BATCH
            collection.upsert(ids=ids[s:e], metadatas=metas[s:e], embeddings=np.ones((len(ids[s:e]), 1), np.float32))

    def _delete_ids(self, collection: Any, ids: Sequence[str]) -> None:
        ids = list(ids)
        for s in range(0, len(ids), WRITE_BATCH):
            collection.delete(ids=ids[s : s + WRITE_BATCH])

    # ------------------------------------------------------------------- reads
    @_translated
    def count(self) -> int:
        """Documents in the store."""
        return int(self.docs.count())

    @_translated
    def records(self, ids: Sequence[str] | None = None, *, include_summary: bool = True) -> dict[str, dict[str, Any]]:
        """Documents' metadata by id (``ids`` None: every document, as :meth:`record_pages` reads them)."""
        out: dict[str, dict[str, Any]] = {}
        if ids is not None:
            got = read_ids(self.docs, ids, include=["metadatas"])
            out.update(zip(got["ids"], got["metadatas"]))
        else:
            for page in self.record_pages():
                out.update(page)
        if not include_summary:
            for meta in out.values():
                meta.pop("_summary", None)
        return {k: dict(v) for k, v in out.items()}

    def record_pages(self) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """Every document's ``(id, metadata)``, summary included, one read's page at a time (memory: one page).

        By id where the feed lists every stored document (key lookups, 300 a read); else by offset, which Chroma
        answers by skipping the records before it, so each page costs more than the last.
        """
        ids = self.live_ids()
        if ids is not None:
            for s in range(0, len(ids), READ_PAGE):
                got = read_ids(self.docs, ids[s : s + READ_PAGE], include=["metadatas"])
                yield [(doc_id, dict(meta or {})) for doc_id, meta in zip(got["ids"], got["metadatas"])]
            return
        start = 0
        while True:
            got = read(self.docs, include=["metadatas"], limit=READ_PAGE, offset=start)
            yield [(doc_id, dict(meta or {})) for doc_id, meta in zip(got["ids"], got["metadatas"] or [])]
            if len(got["ids"]) < READ_PAGE:
                return
            start += READ_PAGE

    @_translated
    def live_ids(self) -> list[str] | None:
        """Every stored document's id from the feed replayed (a few reads where listing the records takes one per
        300); None when the feed and the store disagree on the count (a commit landing meanwhile)."""
        ids = self.feed.replayed_ids()
        return ids if len(ids) == self.count() else None

    @_translated
    def records_page(
        self, where: Mapping[str, Any] | None, limit: int, offset: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """One page of ``(id, metadata)`` without the first-stage summary, in Chroma's order."""
        out = []
        got: dict[str, list[Any]] = {"ids": [], "metadatas": []}
        for start in range(offset, offset + limit, READ_PAGE):
            page = read(self.docs, where=dict(where) if where else None, include=["metadatas"],
                             limit=min(READ_PAGE, offset + limit - start), offset=start)
            got["ids"] += page["ids"]
            got["metadatas"] += page["metadatas"] or []
            if len(page["ids"]) < min(READ_PAGE, offset + limit - start):
                break
        for doc_id, meta in zip(got["ids"], got["metadatas"] or []):
            meta = dict(meta or {})
            meta.pop("_summary", None)
            out.append((doc_id, meta))
        return out

    @_translated
    def ids(self, where: Mapping[str, Any] | None = None) -> list[str]:
        """Document ids, optionally those matching a Chroma ``where`` filter."""
        if not where:
            ids = self.live_ids()
            if ids is not None:
                return ids
        return list(read_pages(self.docs, where=dict(where) if where else None, include=[])["ids"])

    @_translated
    def ids_by_source(self, sources: Sequence[str]) -> dict[str, list[str]]:
        """Ids of the documents whose ``source`` is one of ``sources``, by source (one query for all)."""
        wanted = sorted(set(sources))
        if not wanted:
            return {}
        where = {"source": wanted[0]} if len(wanted) == 1 else {"source": {"$in": wanted}}
        got = read_pages(self.docs, where=where, include=["metadatas"])
        out: dict[str, list[str]] = {}
        for doc_id, meta in zip(got["ids"], got["metadatas"] or []):
            out.setdefault(str((meta or {}).get("source")), []).append(doc_id)
        return out

    @_translated
    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """Full text of documents (the record's snippet when that is all of it, else the text payload)."""
        return {doc_id: text for doc_id, (_, text) in self.texts_and_records(ids).items()}

    @_translated
    def texts_and_records(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], str]]:
        """Each stored document's metadata (without the summary) and full text, from one read of its record."""
        if not ids:
            return {}
        got = read_ids(self.docs, ids, include=["documents", "metadatas"])
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
        """Documents' payload of ``kind`` (``v`` vectors, ``g`` grid, ``t`` long text); absent for those without.

        Read by record id (``<doc>.<kind><i>``, a key lookup, 300 a read): each document's first record names how many
        it has (``of``); records written before that are found by their ``doc`` key instead. A document whose
        records are not all there (deleted or replaced while being read) is left out.
        """
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        parts: dict[str, dict[int, dict[str, Any]]] = {}
        total: dict[str, int] = {}

        def take(metas: Sequence[Mapping[str, Any]]) -> None:
            for meta in metas:
                doc = str(meta["doc"])
                parts.setdefault(doc, {})[int(meta["i"])] = dict(meta)
                if meta.get("of") is not None:
                    total[doc] = int(meta["of"])

        take(read_ids(self.blobs, [f"{d}.{kind}0" for d in ids], include=["metadatas"])["metadatas"])
        rest = [f"{d}.{kind}{i}" for d, n in total.items() for i in range(1, n)]
        take(read_ids(self.blobs, rest, include=["metadatas"])["metadatas"])
        older = [d for d in parts if d not in total]
        for s in range(0, len(older), 100):
            take(read_pages(self.blobs, where={"$and": [{"doc": {"$in": older[s : s + 100]}}, {"kind": kind}]},
                                 include=["metadatas"])["metadatas"])
        return {doc: join_payload([chunks[i] for i in sorted(chunks)]) for doc, chunks in parts.items()
                if len(chunks) == total.get(doc, len(chunks))}

    @_translated
    def changes(self, since: int, *, skip: set[str] | frozenset[str] = frozenset()) -> list[Change]:
        """Commits after ``since`` (minus the feed's look-back), oldest first, except those keyed in ``skip``."""
        return self.feed.changes(since, skip=skip)

    @_translated
    def feed_size(self) -> int:
        """Entries in the change feed (it only grows: a new size means a new commit)."""
        return self.feed.size()

    @_translated
    def position(self) -> tuple[int, set[str]]:
        """The feed's newest sequence and the keys within its look-back (where a new reader starts)."""
        return self.feed.position()


def _replacing(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chroma merges metadata on upsert; a None for every dropped key makes it a replacement."""
    out = dict(new)
    for key in old or {}:
        out.setdefault(key, None)
    return out
