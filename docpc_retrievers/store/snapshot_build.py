"""A reader's first snapshot, built from the records' int8 summaries as they stream in from Chroma.

Why: opening a store with no snapshot used to decode every summary to float32, hold them all, join them into one
tensor and only then quantize them to the snapshot: about 16 KB a document at its peak, eight times what the open
store then maps. Here each summary stays in its record's compact form (int8 codes and a float16 scale a centroid,
about 2 KB) while the per-dimension peaks are gathered, and the snapshot is written one centroid slab at a time
through plain file writes (no dirty mapped pages). The file is the one :meth:`CentroidIndex.save` would write for
the same summaries, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from docpc_retrievers.store.codec import dequantize
from docpc_retrievers.store.search import CentroidSearch, SearchBackend, SummaryCodes
from docpc_retrievers.store.search.snapshot import new_snapshot, publish_snapshot
from docpc_retrievers.store.search.summary_codes import dimension_scales, encode

__all__ = ["SummaryStream", "build_snapshot"]


def build_snapshot(backend: SearchBackend, folder: Path, pages: Iterable[Sequence[SummaryCodes]], expected: int,
                   extras: Callable[[list[str]], Mapping[str, np.ndarray]]) -> None:
    """Fill an empty ``backend`` from summaries streaming in a page at a time (about ``expected`` documents) and save
    it under ``folder`` with ``extras(ids)`` (the saved ids in order), called once the pages are consumed. The
    centroid backend's snapshot is written straight from the int8 codes and mapped; another backend adds each page
    and saves. OSError when the folder cannot be written."""
    if isinstance(backend, CentroidSearch):
        index = backend.summaries
        stream = SummaryStream(index.n_centroids, index.dim, expected)
        for page in pages:
            for doc_id, codes, scales in page:
                stream.add(doc_id, codes, scales)
        stream.write(folder, index.snapshot_meta(), extras(stream.ids))
        if index.load(folder) is None:
            raise OSError(f"the snapshot just written under {folder} could not be mapped")
        return
    for page in pages:
        backend.add([doc_id for doc_id, _, _ in page], [dequantize(q, s) for _, q, s in page])
    backend.save(folder, extras(backend.ids()))

_CHUNK = 16_384
"""Documents converted at once while writing a slab (a float32 scratch of ``_CHUNK * dim`` values)."""


class SummaryStream:
    """Documents' int8 summaries held compactly until they are written as one centroid snapshot."""

    def __init__(self, n_centroids: int, dim: int, expected: int = 0) -> None:
        self.n_centroids, self.dim = n_centroids, dim
        self.ids: list[str] = []
        self._codes = np.empty((max(expected, 1), n_centroids, dim), dtype=np.int8)
        self._scales = np.empty((max(expected, 1), n_centroids), dtype=np.float32)
        self._peaks = np.zeros(dim, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, doc_id: str, codes: np.ndarray, scales: np.ndarray) -> None:
        """One document's summary: int8 ``codes [c, dim]`` and a scale per centroid ``[c]`` (fewer centroids than the
        index holds repeat the last one, as :class:`CentroidIndex` does)."""
        c = min(codes.shape[0], self.n_centroids)
        row = len(self.ids)
        if row == self._codes.shape[0]:  # more documents than expected (added meanwhile): grow by half
            grow = max(1, row // 2)
            self._codes = np.concatenate([self._codes, np.empty((grow, *self._codes.shape[1:]), np.int8)])
            self._scales = np.concatenate([self._scales, np.empty((grow, self.n_centroids), np.float32)])
        self._codes[row, :c] = codes[:c]
        self._scales[row, :c] = scales[:c]
        if c < self.n_centroids:
            self._codes[row, c:] = codes[c - 1]
            self._scales[row, c:] = scales[c - 1]
        value = np.abs(codes[:c].astype(np.float32) * np.asarray(scales[:c], np.float32)[:, None]).max(axis=0)
        np.maximum(self._peaks, value, out=self._peaks)
        self.ids.append(doc_id)

    def write(self, folder: Path, meta: Mapping[str, object], extras: Mapping[str, np.ndarray]) -> None:
        """Write the snapshot (``meta`` plus the dimension scales) under ``folder`` and make it current."""
        n = len(self.ids)
        scales = dimension_scales(self._peaks if n else np.zeros(self.dim, np.float32))
        snap = new_snapshot(folder)
        with open(snap / "fine.bin", "wb") as out:
            for c in range(self.n_centroids):
                for s in range(0, n, _CHUNK):
                    e = min(n, s + _CHUNK)
                    x = self._codes[s:e, c].astype(np.float32) * self._scales[s:e, c, None]
                    out.write(encode(x, scales).tobytes())
        publish_snapshot(snap, self.ids, {**meta, "fine_scales": scales.tolist()}, extras)
        self._codes = self._codes[:0]
        self._scales = self._scales[:0]

