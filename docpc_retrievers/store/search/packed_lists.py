"""faiss fast-scan inverted lists kept in a memory-mapped file, so a 4-bit PQ scan need not live in RAM.

faiss's fast-scan indexes (``IndexIVFPQFastScan``) scan 4-bit codes packed
in blocks of 32 vectors with SIMD table lookups: on the benchmark's 100k
store, 7x faster than the 4-bit scalar codes at the same recall. But faiss
loads their lists (``BlockInvertedLists``) into memory. Its on-disk lists
(``OnDiskInvertedLists``) are mapped, and the scan only asks a list for its
size, codes and ids; so each list is written there padded to whole blocks
(pad entries labelled -1, coded to score low against the list's own
centroid), and the scan reads the packed blocks straight from the map.

The packed layout is faiss's own, learned once per code shape by packing
probe codes with the index's ``CodePacker``; only the flat codes' nibble
order (sub-quantizer j in byte j // 2, low nibble first) is assumed, and a
test checks it against the quantizer's own codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BlockLayout", "layout_of", "list_entries", "list_labels", "pad_codes", "quiet_stdout", "write_lists"]

BLOCK = 32
"""Vectors per packed block (faiss's ``bbs``)."""


class BlockLayout:
    """Where each 4-bit code of a block's 32 vectors sits in the packed block (``M`` sub-quantizers)."""

    def __init__(self, m: int, byte_of: np.ndarray, shift_of: np.ndarray, block_size: int) -> None:
        self.m = m
        self.block_size = block_size
        # Nibble (vector i, sub-quantizer j), at i * m + j, read from [low nibbles | high nibbles] of a block.
        self._src = np.where(shift_of == 0, byte_of, byte_of + block_size)
        sentinel = BLOCK * m  # a zero nibble for half-empty bytes (odd m)
        self._lo = np.full(block_size, sentinel, dtype=np.int64)
        self._hi = np.full(block_size, sentinel, dtype=np.int64)
        low = shift_of == 0
        self._lo[byte_of[low]] = np.flatnonzero(low)
        self._hi[byte_of[~low]] = np.flatnonzero(~low)
        self._padded = bool((self._lo == sentinel).any() or (self._hi == sentinel).any())

    def unpack(self, packed: np.ndarray) -> np.ndarray:
        """``[n_blocks, block_size]`` uint8 -> codes ``[n_blocks * 32, m]`` uint8 (one 4-bit code each)."""
        halves = np.concatenate([packed & 15, packed >> 4], axis=1)
        return np.take(halves, self._src, axis=1).reshape(-1, self.m)

    def pack(self, codes: np.ndarray) -> np.ndarray:
        """Codes ``[n_blocks * 32, m]`` -> ``[n_blocks, block_size]`` uint8 in faiss's packed order."""
        nib = codes.reshape(-1, BLOCK * self.m)
        if self._padded:
            nib = np.concatenate([nib, np.zeros((len(nib), 1), dtype=np.uint8)], axis=1)
        return np.take(nib, self._lo, axis=1) | (np.take(nib, self._hi, axis=1) << 4)


def layout_of(index: Any) -> BlockLayout:
    """The packed layout of a 4-bit fast-scan ``index`` (probed with its own packer, cached per code shape)."""
    packer = index.get_CodePacker()
    return _probe(int(index.pq.M), int(packer.code_size), int(packer.block_size), packer)


_LAYOUTS: dict[tuple[int, int, int], BlockLayout] = {}


def _probe(m: int, code_size: int, block_size: int, packer: Any) -> BlockLayout:
    import faiss

    key = (m, code_size, block_size)
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    byte_of = np.empty(BLOCK * m, dtype=np.int64)
    shift_of = np.empty(BLOCK * m, dtype=np.int64)
    flat = np.zeros((BLOCK, code_size), dtype=np.uint8)
    block = np.zeros(block_size, dtype=np.uint8)
    for i in range(BLOCK):
        for j in range(m):
            flat[:] = 0
            flat[i, j // 2] = 15 << (4 * (j % 2))  # faiss writes sub-quantizer j into byte j // 2, low nibble first
            packer.pack_all(faiss.swig_ptr(flat), faiss.swig_ptr(block))
            where = np.flatnonzero(block)
            if len(where) != 1 or block[where[0]] not in (0x0F, 0xF0):
                raise RuntimeError("faiss's fast-scan packing is not the one expected (one nibble per code)")
            byte_of[i * m + j] = where[0]
            shift_of[i * m + j] = 0 if block[where[0]] == 0x0F else 4
    layout = BlockLayout(m, byte_of, shift_of, block_size)
    _LAYOUTS[key] = layout
    return layout


def list_entries(index: Any, lst: int, layout: BlockLayout) -> tuple[np.ndarray, np.ndarray]:
    """Labels ``[n]`` and codes ``[n, m]`` of one list, in memory or mapped (pad entries included, label -1)."""
    import faiss

    labels = list_labels(index, lst)
    if not len(labels):
        return labels, np.empty((0, layout.m), dtype=np.uint8)
    blocks = -(-len(labels) // BLOCK)
    packed = np.array(faiss.rev_swig_ptr(index.invlists.get_codes(lst), blocks * layout.block_size), dtype=np.uint8)
    return labels, layout.unpack(packed.reshape(blocks, layout.block_size))[: len(labels)]


def pad_codes(index: Any) -> np.ndarray:
    """Per list, the code ``[nlist, m]`` least like its centroid: pads score low for the tokens that probe it.

    A code's score is the query's product with its decoded vector (with residuals: the list's centroid plus the
    decoded offset); each one-dimensional sub-quantizer takes the value most opposed to the centroid's coordinate.
    """
    import faiss

    pq = index.pq
    if pq.dsub != 1:
        return np.zeros((index.nlist, pq.M), dtype=np.uint8)
    values = faiss.vector_to_array(pq.centroids).reshape(pq.M, pq.ksub)
    centroids = index.quantizer.reconstruct_n(0, index.nlist)
    return np.argmin(centroids[:, :, None] * values[None, :, :], axis=2).astype(np.uint8)


def write_lists(path: Path, sizes: np.ndarray, entries: Callable[[int], tuple[np.ndarray, np.ndarray]],
                layout: BlockLayout, pads: np.ndarray) -> Any:
    """Write every list, padded to whole blocks, into ``path``: the on-disk lists to give the index header.

    ``sizes[i]`` is list i's entry count and ``entries(i)`` its ``(labels [n],
    codes [n, m])``, asked for one list at a time (the whole index never sits
    in memory). The file holds the lists back to back at exact sizes; the
    index header written beside it names it, and faiss maps it on read.
    """
    import faiss

    padded_sizes = np.array([-(-int(n) // BLOCK) * BLOCK for n in sizes], dtype=np.uint64)
    ondisk = faiss.OnDiskInvertedLists(len(sizes), layout.block_size // BLOCK, str(path))
    ondisk.set_all_lists_sizes(faiss.swig_ptr(padded_sizes))  # offsets and sizes only: the file is sized next
    with quiet_stdout():  # faiss reports the resize on stdout
        ondisk.update_totsize(max(int(padded_sizes.sum()) * (layout.block_size // BLOCK + 8), 4096))
    for lst, size in enumerate(padded_sizes.tolist()):
        if not size:
            continue
        labels, codes = entries(lst)
        if len(labels) != int(sizes[lst]):
            raise RuntimeError(f"list {lst} changed while it was written ({len(labels)} != {int(sizes[lst])})")
        full_labels = np.full(size, -1, dtype=np.int64)
        full_labels[: len(labels)] = labels
        full = np.repeat(pads[lst][None, :], size, axis=0)
        full[: len(codes)] = codes
        packed = np.ascontiguousarray(layout.pack(full))
        ondisk.update_entries(lst, 0, size, faiss.swig_ptr(full_labels), faiss.swig_ptr(packed))
    return ondisk


def list_labels(index: Any, lst: int) -> np.ndarray:
    """One list's labels ``[n]`` (pad entries included, label -1), without its codes."""
    import faiss

    n = index.invlists.list_size(lst)
    if not n:
        return np.empty(0, dtype=np.int64)
    return np.array(faiss.rev_swig_ptr(index.invlists.get_ids(lst), n), dtype=np.int64)


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence the process's stdout file descriptor for the block: faiss's on-disk lists print from C++.

    Process-wide for its few microseconds (another thread's output then is lost);
    used around a file resize and a moved cache's first read only.
    """
    import os
    import sys

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no stdout to silence (closed, or a daemon's)
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
