"""What indexing cost, for the efficiency table: counts and seconds taken from the indexing report."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


logger = logging.getLogger(__name__)

class TimedEncoder:
    """A thin proxy around an encoder that times and counts image and query encoding.

    Why: at query time the efficiency table reports how many images reranking
    encoded; pass it as ``DocPCIndex(encoder=...)``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.images = 0
        self.encode_s = 0.0
        self.queries = 0
        self.query_s = 0.0

    def _timed(self, call: Any, items: Sequence[Any], seconds: str, count: str) -> list[Any]:
        """``call()``, its seconds added to ``seconds`` and ``len(items)`` to ``count`` (even if it raises)."""
        start = time.perf_counter()
        try:
            return call()
        finally:
            setattr(self, seconds, getattr(self, seconds) + time.perf_counter() - start)
            setattr(self, count, getattr(self, count) + len(items))

    def encode_images(self, images: Sequence[Any], *, batch_size: int | None = None) -> list[Any]:
        return self._timed(lambda: self.inner.encode_images(images, batch_size=batch_size), images, "encode_s", "images")

    def encode_images_with_info(self, images: Sequence[Any], *, batch_size: int | None = None) -> list[Any]:
        return self._timed(lambda: self.inner.encode_images_with_info(images, batch_size=batch_size), images,
                           "encode_s", "images")

    def encode_queries(self, queries: Sequence[str], *, batch_size: int | None = None) -> list[Any]:
        return self._timed(lambda: self.inner.encode_queries(queries, batch_size=batch_size), queries,
                           "query_s", "queries")

    def settings(self) -> dict[str, Any]:
        return self.inner.settings()

    def reset(self) -> None:
        self.images, self.encode_s, self.queries, self.query_s = 0, 0.0, 0, 0.0

    def __getattr__(self, name: str) -> Any:  # everything else (image_patch_grid, family, ...) passes through
        return getattr(self.inner, name)


@dataclass
class IndexStats:
    """One system's efficiency row: what indexing cost and what it stored (time in seconds)."""

    documents: int = 0
    images_encoded: int = 0
    vectors_stored: int = 0
    bytes_on_disk: int = 0
    encode_s: float = 0.0
    insert_s: float = 0.0
    total_index_s: float = 0.0
    query_p50_ms: float | None = None
    query_images_encoded: int = 0
    pages_total: int = 0
    bytes_excluded: int = 0
    reused: bool = False
    failures: list[dict[str, str]] = field(default_factory=list)

    @property
    def render_s(self) -> float:
        """Indexing time not spent encoding or inserting: opening, rendering, composing, previews."""
        return max(0.0, self.total_index_s - self.encode_s - self.insert_s)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["render_s"] = self.render_s
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IndexStats:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


ACCUMULATED_STATS = ("documents", "images_encoded", "encode_s", "insert_s", "total_index_s", "pages_total")


def load_stats(path: Path) -> IndexStats | None:
    try:
        return IndexStats.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def save_stats(path: Path, stats: IndexStats) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stats.to_dict(), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def timed_index_build(
    paths: Sequence[Path],
    index_dir: Path,
    encoder: Any,
    settings: Any,
    *,
    batch_size: int = 8,
    workers: int | None = None,
) -> tuple[Any, IndexStats]:
    """Index ``paths`` into ``index_dir`` (creating or extending it); return the open index and this call's stats.

    Counts and seconds come from the indexing report (``IndexReport.timings``):
    encode seconds, commit seconds (store writes and grid previews) and the
    wall time of the whole call.
    """
    from docpc_retrievers.index import DocPCIndex

    index = DocPCIndex(index_dir, encoder=encoder, settings=settings, writable=True)
    try:
        report = index.add_pdfs(paths, batch_size=batch_size, workers=workers)
    except BaseException:
        index.close()
        raise
    stats = IndexStats(
        documents=len(report.indexed),
        images_encoded=report.images_encoded,
        encode_s=report.timings.get("encode_s", 0.0),
        insert_s=report.timings.get("commit_s", 0.0),
        total_index_s=report.timings.get("total_s", 0.0),
        failures=[f.to_dict() for f in report.failed],
    )
    return index, stats
