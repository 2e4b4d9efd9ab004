"""Convert a store written by docpc-retrievers 0.1 (format 1) in place, resumably.

Format 1 kept records in Chroma but each document's float16 vectors in local
segment files (``vectors/*.f16``) and its grid as ``grids/<id>.png``. The
migration rewrites every record in the current format (compact int8 vectors,
summary and WebP grid all in Chroma; see engine.py), a batch at a time.
A record already converted is recognised and skipped, so an interrupted
migration is finished by running it again. Vectors are not pooled (pool
factor 1 is recorded): pooling needs no re-encoding, but changes scores, and
a migration should not.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from docpc_retrievers.documents.preview import encode_grid
from docpc_retrievers.errors import StoreError
from docpc_retrievers.store.codec import encode_int8, pack_vectors
from docpc_retrievers.store.chroma_client import chroma_client
from docpc_retrievers.store.chroma_quotas import HOSTED
from docpc_retrievers.store.engine import READABLE_FORMATS, STORE_FORMAT, ChromaEngine, DocumentRecord
from docpc_retrievers.store.layout import StoreLayout, write_json_atomic
from docpc_retrievers.store.locking import WriterLock
from docpc_retrievers.store.records import parts_value
from docpc_retrievers.store.search.centroids import document_centroids

__all__ = ["MigrationReport", "migrate_store"]

logger = logging.getLogger(__name__)

_OLD_INTERNAL = ("_seg", "_off", "_n", "_nc", "_parts")


@dataclass
class MigrationReport:
    """What a migration did: documents converted now, found already converted, and the bytes freed."""

    converted: int = 0
    already: int = 0
    bytes_freed: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"converted": self.converted, "already_converted": self.already, "bytes_freed": self.bytes_freed}


def migrate_store(
    path: str | Path, *, batch_size: int = 32, on_progress: Callable[[int, int], None] | None = None
) -> MigrationReport:
    """Convert the format-1 store at ``path`` to the current format in place; ``on_progress(done, total)`` after each batch.

    Raises :class:`StoreError` when ``path`` holds no store, or one that is already current.
    """
    layout = StoreLayout.at(path)
    try:
        manifest = json.loads(layout.manifest.read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"no docpc store at {layout.root} ({exc})") from None
    if manifest.get("format") in READABLE_FORMATS:
        raise StoreError(f"store {layout.root} is already in a current format ({manifest.get('format')}); nothing to"
                         " migrate")
    if manifest.get("format") != 1:
        raise StoreError(f"store {layout.root}: format {manifest.get('format')!r} cannot be migrated")
    lock = WriterLock(layout.lock)
    lock.acquire()
    try:
        return _migrate(layout, manifest, batch_size, on_progress)
    finally:
        lock.release()


def _migrate(
    layout: StoreLayout, manifest: dict[str, Any], batch_size: int, on_progress: Callable[[int, int], None] | None
) -> MigrationReport:
    name = str(manifest.get("collection") or "docpc")
    dim = manifest.get("dim")
    engine = ChromaEngine(chroma_client(layout.chroma, None, 8000), name)
    settings = dict(manifest.get("settings") or {})
    index = dict(settings.get("index") or {})
    index.setdefault("pool_factor", 1)  # 0.1 stored every vector
    settings["index"] = index
    engine.write_manifest({"format": STORE_FORMAT, "dim": dim, "settings": settings, "migrated_from": 1})
    report = MigrationReport()
    total = engine.count()
    if dim is None or total == 0:
        _finish(layout, name, report)
        return report
    dim = int(dim)
    maps: dict[str, np.ndarray] = {}
    done = 0
    batch_size = min(batch_size, HOSTED.results_per_read)
    for start in range(0, total, batch_size):
        got = engine.docs.get(include=["metadatas", "documents"], limit=batch_size, offset=start)
        records = []
        for doc_id, meta, text in zip(got["ids"], got["metadatas"], got["documents"]):
            if "_summary" in meta:  # converted by an earlier, interrupted run
                continue
            vectors = _old_vectors(layout, maps, meta, dim)
            public = {k: v for k, v in meta.items() if k not in _OLD_INTERNAL}
            records.append(_record(layout, doc_id, public, meta, text or "", vectors))
        if records:
            _write(engine, records)
        report.converted += len(records)
        done += len(got["ids"])
        if on_progress is not None:
            on_progress(done, total)
    report.already = total - report.converted
    _finish(layout, name, report)
    return report


def _old_vectors(layout: StoreLayout, maps: dict[str, np.ndarray], meta: dict[str, Any], dim: int) -> np.ndarray:
    seg, off, n = str(meta["_seg"]), int(meta["_off"]), int(meta["_n"])
    mm = maps.get(seg)
    if mm is None:
        file = layout.vectors / seg
        if not file.exists():
            raise StoreError(f"cannot migrate: vector segment {file} is missing; re-index the documents instead")
        mm = np.memmap(file, dtype="<f2", mode="r").reshape(-1, dim)
        maps[seg] = mm
    return np.asarray(mm[off : off + n], dtype=np.float32)


def _record(
    layout: StoreLayout, doc_id: str, public: dict[str, Any], old: dict[str, Any], text: str, vectors: np.ndarray
) -> tuple[str, dict[str, Any], str, np.ndarray, list[int] | None, bytes | None]:
    png = layout.grids / f"{doc_id}.png"
    grid = None
    if png.exists():
        with Image.open(png) as img:
            grid = encode_grid(img.convert("RGB"))
    parts = old.get("_parts")
    return doc_id, public, text, vectors, [int(v) for v in parts] if parts else None, grid


def _write(engine: ChromaEngine, records: list[Any]) -> None:
    out = []
    for doc_id, public, text, vectors, parts, grid in records:
        data = pack_vectors(vectors)
        meta = dict(public)
        meta.update({
            "_n": int(vectors.shape[0]),
            "_summary": base64.b64encode(encode_int8(document_centroids(vectors, 16))).decode("ascii"),
            "_vb": len(data),
        })
        if parts and len(parts) > 1:
            meta["_parts"] = parts_value(doc_id, parts)
        if grid is not None:
            meta["_gb"] = len(grid)
        mean = vectors.mean(axis=0)
        out.append(DocumentRecord(doc_id, meta, text, mean / max(float(np.linalg.norm(mean)), 1e-12), data, grid))
    engine.write(out)


def _finish(layout: StoreLayout, name: str, report: MigrationReport) -> None:
    """Mark the store current and reclaim the format-1 files."""
    for folder in (layout.vectors, layout.grids):
        if folder.exists():
            report.bytes_freed += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
    write_json_atomic(layout.manifest, {"format": STORE_FORMAT, "collection": name})
    logger.info("migrated store %s: %s", layout.root, report.to_dict())
