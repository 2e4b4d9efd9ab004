"""Append-only fp16 vector segment files: where multi-vector embeddings live on disk.

Chroma cannot hold a document's ~760 vectors in one record (no bytes, no
nested lists in metadata; one HNSW row per vector inserts at 1-3 documents/s),
so each store keeps its vectors in raw little-endian float16 files (no header,
no pickle): ``<dir>/seg-<stamp>-<rand>.f16``, rows of ``dim`` values. A
writer session always starts a new file, so a killed run can at worst leave
unreferenced rows at the end of its own file; rows are only referenced by a
Chroma record after they were flushed and fsynced.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from pathlib import Path

import numpy as np

__all__ = ["SegmentReader", "SegmentWriter", "SEGMENT_SUFFIX"]

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".f16"
_DTYPE = np.dtype("<f2")


class SegmentWriter:
    """Appends float16 rows to one new segment file and reports where they went."""

    def __init__(self, directory: str | Path, dim: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.name = f"seg-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}{SEGMENT_SUFFIX}"
        self.path = self.directory / self.name
        self._file = open(self.path, "ab")
        self._rows = 0

    def append(self, vectors: np.ndarray) -> int:
        """Append ``[n, dim]`` vectors; returns the row offset of the first one."""
        arr = np.ascontiguousarray(vectors, dtype=_DTYPE)
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ValueError(f"expected [n, {self.dim}] vectors, got {arr.shape}")
        offset = self._rows
        self._file.write(arr.tobytes())
        self._rows += arr.shape[0]
        return offset

    def flush(self) -> None:
        """Make appended rows durable before any record points at them."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()
            if self._rows == 0:
                self.path.unlink(missing_ok=True)


class SegmentReader:
    """Reads rows from segment files through memory maps, remapping files that grew."""

    def __init__(self, directory: str | Path, dim: int) -> None:
        self.directory = Path(directory)
        self.dim = dim
        self._maps: dict[str, np.ndarray] = {}

    def _map(self, name: str, need_rows: int) -> np.ndarray:
        mm = self._maps.get(name)
        if mm is None or mm.shape[0] < need_rows:
            path = self.directory / name
            if not path.exists():
                raise FileNotFoundError(f"vector segment {path} is missing")
            rows = path.stat().st_size // (self.dim * _DTYPE.itemsize)
            if rows < need_rows:
                raise ValueError(f"vector segment {path} has {rows} rows, a record needs {need_rows}")
            # A plain ndarray view of the map: slicing it skips np.memmap's per-slice bookkeeping.
            mm = np.asarray(np.memmap(path, dtype=_DTYPE, mode="r", shape=(rows, self.dim)))
            self._maps[name] = mm
        return mm

    def read(self, name: str, offset: int, n: int) -> np.ndarray:
        """Rows ``[offset, offset + n)`` of a segment, as a read-only float16 view."""
        return self._map(name, offset + n)[offset : offset + n]

    def segment_names(self) -> list[str]:
        if not self.directory.exists():
            return []
        return sorted(p.name for p in self.directory.glob(f"*{SEGMENT_SUFFIX}"))

    def close(self) -> None:
        self._maps.clear()
