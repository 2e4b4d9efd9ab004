"""The store: owns a store directory and everything in it (records, vectors, grids, caches, locks)."""

from docpc_retrievers.store.multivector import (
    AGGREGATES,
    STORE_FORMAT,
    MultiVectorStore,
    ScoredDocument,
    StoredDocument,
)

__all__ = ["AGGREGATES", "STORE_FORMAT", "MultiVectorStore", "ScoredDocument", "StoredDocument"]
