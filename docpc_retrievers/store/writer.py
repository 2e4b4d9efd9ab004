"""The store's writer: adds, deletes, metadata edits and the recorded settings, under the writer lock.

A writer reads only what it replaces (the records of the ids it writes); it tells the reader of its own process
about each commit, so that process's next search needs no feed read for it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from docpc_retrievers.blas_threads import single_blas_thread
from docpc_retrievers.errors import DocumentNotFoundError, StoreError
from docpc_retrievers.store.engine import STORE_FORMAT, ChromaEngine, DocumentRecord
from docpc_retrievers.store.locking import WriterLock, synchronized
from docpc_retrievers.store.reader import StoreReader
from docpc_retrievers.store.records import build_record, check_batch, parts_of, replaced_metadata
from docpc_retrievers.store.settings import check_settings, with_current_identity

__all__ = ["PreparedAdd", "StoreWriter"]


@dataclass
class PreparedAdd:
    """Documents ready to write: their records (summaries built), centroids and packed payload records."""

    records: list[DocumentRecord]
    centroids: list[np.ndarray]
    payloads: list[list[tuple[str, dict[str, Any]]]]
    dim: int


class StoreWriter:
    """Changes to one store. ``lock``: the embedded directory's writer lock (None with a server, or read-only)."""

    def __init__(self, engine: ChromaEngine, reader: StoreReader, path: Path, *, writable: bool,
                 lock: WriterLock | None, n_centroids: int, mutex: threading.RLock) -> None:
        self.engine, self.reader, self.path = engine, reader, path
        self._writable, self.lock, self.n_centroids = writable, lock, n_centroids
        self._mutex = mutex

    @property
    def writable(self) -> bool:
        """Whether this object may change the store (opened writable and still holding the writer lock)."""
        return self._writable and (self.lock is None or self.lock.held)

    def require(self) -> None:
        if not self.writable:
            raise StoreError(f"store {self.path} was opened read-only; open it with DocPCIndex(path, writable=True) "
                             "to change it")

    @synchronized
    def set_settings(self, settings: Mapping[str, Any]) -> None:
        """Record the settings on first write; later writes must match them.

        A matching write also refreshes the recorded model identity (a store written before
        identities gains its fingerprint; the path becomes the one last written with).
        """
        self.require()
        manifest = self.reader.manifest
        manifest.update(self.engine.read_manifest())
        recorded = dict(manifest.get("settings") or {})
        if recorded:
            check_settings(self.path, recorded, settings)
            refreshed = with_current_identity(recorded, settings)
            if refreshed is not None:
                manifest["settings"] = refreshed
                self.engine.write_manifest(manifest)
            return
        manifest["settings"] = json.loads(json.dumps(dict(settings)))
        manifest.setdefault("format", STORE_FORMAT)
        self.engine.write_manifest(manifest)

    def prepare(self, ids: Sequence[str], vectors: Sequence[np.ndarray], metadatas: Sequence[Mapping[str, Any]],
                texts: Sequence[str | None] | None = None, parts: Sequence[Sequence[int] | None] | None = None, *,
                anchors: Sequence[np.ndarray | None] | None = None,
                grids: Sequence[bytes | None] | None = None) -> PreparedAdd | None:
        """Check documents and build what :meth:`add_prepared` writes (records, summaries, packed payload): the
        CPU part of a commit, which needs neither the writer's lock nor Chroma, so it can run while another
        commit writes. None when there is nothing to add."""
        mats = check_batch(ids, vectors, metadatas, texts, parts, anchors, grids, self.reader.dim)
        if not mats:
            return None
        records, cents = [], []
        with single_blas_thread():  # the summaries' small products: more BLAS threads only spin
            for i, (doc_id, m, meta) in enumerate(zip(ids, mats, metadatas)):
                record, centroids = build_record(
                    doc_id, m, meta, self.n_centroids, text=None if texts is None else texts[i],
                    parts=None if parts is None else parts[i], anchors=None if anchors is None else anchors[i],
                    grid=None if grids is None else grids[i],
                )
                records.append(record)
                cents.append(centroids)
        return PreparedAdd(records, cents, [self.engine.pack_payload(r) for r in records], int(mats[0].shape[1]))

    @synchronized
    def add_prepared(self, batch: PreparedAdd | None) -> None:
        """Write documents :meth:`prepare` built, as one commit, and tell this process's reader."""
        self.require()
        if batch is None:
            return
        reader = self.reader
        if reader.dim is None:
            reader.manifest.update(self.engine.read_manifest())
            if reader.dim is None:
                reader.manifest.update(dim=batch.dim, format=STORE_FORMAT)
                self.engine.write_manifest(reader.manifest)
        if batch.dim != reader.dim:  # prepared before the store recorded its dimension (another commit's)
            raise ValueError(f"document {batch.records[0].id}: expected a non-empty [n, {reader.dim}] matrix, got "
                             f"[n, {batch.dim}] (store {self.path})")
        if reader.load_if_cheap() and reader.view is None:
            reader.view = reader.new_view(batch.dim)
        records = batch.records
        seq = self.engine.write(records, batch.payloads)
        reader.committed(seq, [r.id for r in records], batch.centroids, [int(r.metadata["_n"]) for r in records],
                         [parts_of(r.metadata.get("_parts")) for r in records], {r.id: r.vectors for r in records})

    def add(self, ids: Sequence[str], vectors: Sequence[np.ndarray], metadatas: Sequence[Mapping[str, Any]],
            texts: Sequence[str | None] | None = None, parts: Sequence[Sequence[int] | None] | None = None, *,
            anchors: Sequence[np.ndarray | None] | None = None, grids: Sequence[bytes | None] | None = None) -> None:
        """Insert or replace documents (arguments as :meth:`MultiVectorStore.add`)."""
        self.require()
        self.add_prepared(self.prepare(ids, vectors, metadatas, texts, parts, anchors=anchors, grids=grids))

    @synchronized
    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id (records, vectors, grids); returns how many existed."""
        self.require()
        present = self.reader.present(list(ids))
        if present:
            self.reader.removed(self.engine.delete(present), present)
        return len(present)

    @synchronized
    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Replace the public metadata of existing documents, keeping their vectors."""
        self.require()
        old = self.engine.records(ids)
        missing = [doc_id for doc_id in ids if doc_id not in old]
        if missing:
            raise DocumentNotFoundError(missing[0], self.path)
        new = [replaced_metadata(doc_id, old[doc_id], meta) for doc_id, meta in zip(ids, metadatas)]
        if new:
            self.reader.relabelled(self.engine.update_metadata(list(ids), new), ids)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
