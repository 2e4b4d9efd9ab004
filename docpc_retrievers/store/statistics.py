"""What a store holds and costs: bytes by part, on disk, and the ``docpc info`` description."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from docpc_retrievers.documents.user_metadata import metadata_keys
from docpc_retrievers.encoders.identity import ModelIdentity

__all__ = ["bytes_by_part", "bytes_under", "describe"]


def bytes_under(path: Path) -> int:
    """Bytes of every file under ``path`` (files vanishing meanwhile are skipped)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                pass
    return total


def bytes_by_part(records: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Payload bytes per document part over ``records`` (with their summaries): vectors, first stage, grids."""
    vectors = sum(int(m.get("_vb", 0)) for m in records.values())
    summaries = sum(len(base64.b64decode(str(m["_summary"]))) for m in records.values() if "_summary" in m)
    grids = sum(int(m.get("_gb", 0)) for m in records.values())
    return {"vectors": vectors, "first_stage": summaries, "grids": grids}


def describe(
    store: Any, *, model: str, settings: Mapping[str, Any], page_cache: Mapping[str, int]
) -> dict[str, Any]:
    """What a ``MultiVectorStore`` holds and how it was built; arguments fill what the store cannot know."""
    recorded = store.settings
    encoder = recorded.get("encoder") or {}
    identity = ModelIdentity.from_settings(encoder)
    index = recorded.get("index") or dict(settings)
    docs = store.count()
    records = store.engine.records(include_summary=True)  # read once: bytes by part and the users' keys
    parts = bytes_by_part(records)
    on_disk = store.bytes_on_disk()
    per_doc = {k: (round(v / docs) if docs else 0) for k, v in parts.items()}
    return {
        "path": str(store.path),
        "server": f"{store.host}" if store.host else None,
        "collection": store.collection_name,
        "documents": docs,
        "images_encoded": store.images_encoded(),
        "vectors": store.total_vectors(),
        "bytes_on_disk": on_disk,
        "bytes_grid_images": parts["grids"],
        "bytes_cache": store.cache.bytes(),
        "bytes_per_document": {**per_doc, "on_disk": round(on_disk / docs) if docs else 0},
        "model": (identity.hub_id or identity.path or identity.model_id or model) if encoder else None,
        "model_fingerprint": identity.fingerprint,
        "model_revision": identity.revision,
        "model_path": identity.path,
        "family": encoder.get("family"),
        "dim": store.dim,
        "max_num_visual_tokens": encoder.get("max_num_visual_tokens"),
        "mode": index.get("mode", "grid"),
        "strategy": index.get("strategy"),
        "pages": index.get("pages"),
        "grid": "x".join(str(v) for v in index.get("grid", [])) or None,
        "cell_size": index.get("cell_size"),
        "page_size": index.get("page_size"),
        "pool_factor": index.get("pool_factor"),
        "grid_previews": bool(index.get("grid_previews", True)) if index.get("mode", "grid") == "grid" else None,
        "metadata_keys": metadata_keys(records.values()),
        "page_cache_pages": page_cache.get("pages", 0),
        "page_cache_bytes": page_cache.get("bytes", 0),
    }
