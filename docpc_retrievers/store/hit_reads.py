"""The one read of a search's hits: each hit's metadata, and its text, vectors and grid when asked for.

The view (``view.py``) calls it after ranking; whatever it does not return is gone from the store (deleted by
another writer since the first stage), and the view gives that slot to the next document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from docpc_retrievers.store.codec import dequantize
from docpc_retrievers.store.engine import ChromaEngine
from docpc_retrievers.store.layout import StoreLayout
from docpc_retrievers.store.payload import VectorReader, read_grid
from docpc_retrievers.store.records import MetadataCache, public

__all__ = ["HitRead", "grid_bytes", "hit_reader"]

HitRead = Callable[[list[str]], dict[str, tuple[dict[str, Any], tuple[Any, ...]]]]
"""ids -> {id: (public metadata, (text, vectors, anchors, grid))} for the ids still stored."""


def grid_bytes(layout: StoreLayout, engine: ChromaEngine, doc_id: str) -> bytes | None:
    """A document's grid preview from the local cache, else Chroma (then cached); None when it has none."""
    return read_grid(layout.cached_grid(doc_id), lambda: engine.payload([doc_id], "g").get(doc_id))


def hit_reader(engine: ChromaEngine, metadata: MetadataCache, reader: VectorReader, layout: StoreLayout, *,
               with_text: bool, with_vectors: bool, with_grid: bool) -> HitRead:
    """The read a search makes of its hits: metadata and text from one read of their records (the remembered
    metadata when no text is wanted), then their vectors and grid previews."""

    def read(ids: list[str]) -> dict[str, tuple[dict[str, Any], tuple[Any, ...]]]:
        if with_text:
            rows = engine.texts_and_records(ids)
            metas = {i: public(meta) for i, (meta, _) in rows.items()}
        else:
            metas = metadata.get(ids)
        packed = reader.packed(list(metas)) if with_vectors else {}
        out: dict[str, tuple[dict[str, Any], tuple[Any, ...]]] = {}
        for doc_id, meta in metas.items():
            if with_vectors and doc_id not in packed:
                continue
            text = rows[doc_id][1] if with_text else None
            vectors = anchors = picture = None
            if with_vectors:
                q, scale, anchors = reader.unpacked(doc_id, packed[doc_id])
                vectors = dequantize(q, scale)
            if with_grid and meta.get("mode", "grid") != "page":
                picture = grid_bytes(layout, engine, doc_id)
            out[doc_id] = (meta, (text, vectors, anchors, picture))
        return out

    return read
