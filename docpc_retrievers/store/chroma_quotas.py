"""Hosted Chroma's published quotas, and a client wrapper that refuses whatever exceeds them (the test mode).

The store keeps every read and write within these limits on any deployment, so a
store that runs on an embedded folder runs unchanged on hosted Chroma. Set
``DOCPC_CHROMA_QUOTAS=hosted`` and every Chroma client the store makes is
wrapped by :class:`QuotaClient`: a read, write or metadata value over a quota
raises :class:`QuotaExceeded` naming the quota, as hosted Chroma would refuse it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docpc_retrievers.errors import StoreError

__all__ = ["HOSTED", "QUOTAS_ENV", "ChromaQuotas", "QuotaClient", "QuotaExceeded", "quotas_from_env"]

#: Environment variable naming the quotas to enforce on every client the store makes (``hosted``; empty: none).
QUOTAS_ENV = "DOCPC_CHROMA_QUOTAS"


@dataclass(frozen=True)
class ChromaQuotas:
    """Per-request limits of a Chroma deployment (hosted Chroma's published quotas by default)."""

    results_per_read: int = 300
    """Records one ``get`` may ask for (its ``limit``, or its ``ids``) or return; results per ``query`` vector."""
    records_per_write: int = 300
    """Records one ``add``, ``upsert``, ``update`` or ``delete`` by ids may carry."""
    metadata_value_bytes: int = 4096
    """UTF-8 bytes of one metadata value (a list counts as its JSON text)."""
    metadata_keys: int = 32
    """Keys of one record's (or a collection's) metadata."""
    document_bytes: int = 16_384
    """UTF-8 bytes of one record's document text."""
    concurrent_reads: int = 10
    """Reads in flight at once on one collection."""


#: Hosted Chroma (Chroma Cloud, the managed distributed deployment).
HOSTED = ChromaQuotas()


class QuotaExceeded(StoreError):
    """A Chroma request over a quota: hosted Chroma would refuse it."""


def quotas_from_env() -> ChromaQuotas | None:
    """The quotas ``DOCPC_CHROMA_QUOTAS`` asks to enforce, or None (unset or empty)."""
    value = os.environ.get(QUOTAS_ENV, "").strip().lower()
    if not value:
        return None
    if value == "hosted":
        return HOSTED
    raise StoreError(f"{QUOTAS_ENV}={value!r} is not known; use 'hosted' or leave it unset")


_IN_FLIGHT: dict[str, int] = {}
_IN_FLIGHT_LOCK = threading.Lock()


class QuotaClient:
    """A Chroma client whose collections refuse requests over ``quotas``; everything else passes through."""

    def __init__(self, client: Any, quotas: ChromaQuotas = HOSTED) -> None:
        self._client = client
        self.quotas = quotas

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _wrap(self, collection: Any) -> QuotaCollection:
        return QuotaCollection(collection, self.quotas)

    def get_collection(self, *args: Any, **kwargs: Any) -> QuotaCollection:
        return self._wrap(self._client.get_collection(*args, **kwargs))

    def get_or_create_collection(self, name: str, *args: Any, metadata: Mapping[str, Any] | None = None,
                                 **kwargs: Any) -> QuotaCollection:
        if metadata:
            _check_metadata(self.quotas, f"collection {name}", metadata)
        return self._wrap(self._client.get_or_create_collection(name, *args, metadata=metadata, **kwargs))

    def create_collection(self, name: str, *args: Any, metadata: Mapping[str, Any] | None = None,
                          **kwargs: Any) -> QuotaCollection:
        if metadata:
            _check_metadata(self.quotas, f"collection {name}", metadata)
        return self._wrap(self._client.create_collection(name, *args, metadata=metadata, **kwargs))


class QuotaCollection:
    """One collection behind :class:`QuotaClient`: reads, writes and metadata checked against the quotas."""

    def __init__(self, collection: Any, quotas: ChromaQuotas) -> None:
        self._collection = collection
        self.quotas = quotas

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    # ------------------------------------------------------------------ reads
    def get(self, ids: Sequence[str] | None = None, *args: Any, limit: int | None = None, **kwargs: Any) -> Any:
        q = self.quotas.results_per_read
        if limit is not None and limit > q:
            raise QuotaExceeded(f"{self.name}: a read with limit {limit} (the quota is {q} results per read)")
        if ids is not None and len(ids) > q:
            raise QuotaExceeded(f"{self.name}: a read of {len(ids)} ids (the quota is {q} results per read)")
        got = self._read(lambda: self._collection.get(ids, *args, limit=limit, **kwargs))
        if len(got["ids"]) > q:
            raise QuotaExceeded(f"{self.name}: a read returned {len(got['ids'])} records (the quota is {q} results "
                                "per read; page it with limit and offset)")
        return got

    def query(self, *args: Any, n_results: int = 10, **kwargs: Any) -> Any:
        q = self.quotas.results_per_read
        if n_results > q:
            raise QuotaExceeded(f"{self.name}: a query for {n_results} results (the quota is {q} results per read)")
        return self._read(lambda: self._collection.query(*args, n_results=n_results, **kwargs))

    def count(self) -> int:
        return int(self._read(self._collection.count))

    def _read(self, call: Any) -> Any:
        key = str(self._collection.id)
        with _IN_FLIGHT_LOCK:
            n = _IN_FLIGHT.get(key, 0) + 1
            if n > self.quotas.concurrent_reads:
                raise QuotaExceeded(f"{self.name}: {n} reads in flight at once (the quota is "
                                    f"{self.quotas.concurrent_reads} concurrent reads per collection)")
            _IN_FLIGHT[key] = n
        try:
            return call()
        finally:
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT[key] -= 1

    # ----------------------------------------------------------------- writes
    def add(self, ids: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        self._check_write("add", ids, kwargs)
        return self._collection.add(ids, *args, **kwargs)

    def upsert(self, ids: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        self._check_write("upsert", ids, kwargs)
        return self._collection.upsert(ids, *args, **kwargs)

    def update(self, ids: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        self._check_write("update", ids, kwargs)
        return self._collection.update(ids, *args, **kwargs)

    def delete(self, ids: Sequence[str] | None = None, *args: Any, **kwargs: Any) -> Any:
        if ids is not None and len(ids) > self.quotas.records_per_write:
            raise QuotaExceeded(f"{self.name}: a delete of {len(ids)} ids (the quota is "
                                f"{self.quotas.records_per_write} records per write)")
        return self._collection.delete(ids, *args, **kwargs)

    def modify(self, *args: Any, metadata: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if metadata:
            _check_metadata(self.quotas, f"collection {self.name}", metadata)
        return self._collection.modify(*args, metadata=metadata, **kwargs)

    def _check_write(self, op: str, ids: Sequence[str], kwargs: Mapping[str, Any]) -> None:
        q = self.quotas
        if len(ids) > q.records_per_write:
            raise QuotaExceeded(f"{self.name}: {op} of {len(ids)} records (the quota is {q.records_per_write} "
                                "records per write)")
        for doc_id, meta in zip(ids, kwargs.get("metadatas") or []):
            if meta:
                _check_metadata(q, f"{self.name} record {doc_id}", meta)
        for doc_id, text in zip(ids, kwargs.get("documents") or []):
            size = len((text or "").encode("utf-8"))
            if size > q.document_bytes:
                raise QuotaExceeded(f"{self.name} record {doc_id}: a document of {size} bytes (the quota is "
                                    f"{q.document_bytes})")


def _check_metadata(quotas: ChromaQuotas, what: str, metadata: Mapping[str, Any]) -> None:
    kept = {k: v for k, v in metadata.items() if v is not None}  # None removes a key: it is not stored
    if len(kept) > quotas.metadata_keys:
        raise QuotaExceeded(f"{what}: {len(kept)} metadata keys (the quota is {quotas.metadata_keys})")
    for key, value in kept.items():
        size = len((value if isinstance(value, str) else json.dumps(value)).encode("utf-8"))
        if size > quotas.metadata_value_bytes:
            raise QuotaExceeded(f"{what}: metadata {key!r} holds {size} bytes (the quota is "
                                f"{quotas.metadata_value_bytes} a value)")
