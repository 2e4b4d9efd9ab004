"""Compact forms of what a store keeps: int8 vectors with a per-vector scale, and text-safe payload chunks.

Why int8 with one fp16 scale per vector: ColPali-family vectors are unit
length and spread over all dimensions, so ``round(v * 127 / max|v|)`` keeps
MaxSim rankings (measured in ``benchmarks/store_bench.py``) at a quarter of
float32's bytes: 130 bytes per 128-dim vector. Chroma records hold strings,
not bytes, so payloads travel as base64 split into values of at most
:data:`VALUE_CHARS` characters (hosted Chroma caps a metadata value at 4 KB).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "KEYS_PER_RECORD",
    "VALUE_CHARS",
    "chunk_payload",
    "decode_int8",
    "dequantize",
    "encode_int8",
    "int8_views",
    "join_payload",
    "pack_vectors",
    "quantize",
    "unpack_vectors",
]

#: Characters per metadata value (hosted Chroma: 4 KB per value).
VALUE_CHARS = 4000
#: Payload values per record (hosted Chroma: 32 keys per record; a few are left for bookkeeping).
KEYS_PER_RECORD = 24


def quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[n, dim]`` float -> (int8 ``[n, dim]``, float16 scales ``[n]``); ``q * scale`` approximates the input."""
    x = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(x).max(axis=1)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float16)
    q = np.clip(np.rint(x / scale.astype(np.float32)[:, None]), -127, 127).astype(np.int8)
    return q, scale


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 ``[n, dim]`` and scales ``[n]`` -> float32 ``[n, dim]``."""
    return q.astype(np.float32) * scale.astype(np.float32)[:, None]


def encode_int8(vectors: np.ndarray) -> bytes:
    """Vectors as bytes: the int8 rows, then the float16 scales (``n * (dim + 2)`` bytes)."""
    q, scale = quantize(vectors)
    return q.tobytes() + scale.astype("<f2").tobytes()


def decode_int8(data: bytes, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Bytes from :func:`encode_int8` -> (int8 ``[n, dim]``, float16 scales ``[n]``)."""
    n = len(data) // (dim + 2)
    if n * (dim + 2) != len(data):
        raise ValueError(f"{len(data)} bytes do not hold whole {dim}-dim int8 vectors")
    return int8_views(data, dim, n)


def int8_views(data: Any, dim: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Views (no copy) of the first ``n`` int8 rows ``[n, dim]`` and their float16 scales in a :func:`pack_vectors`
    buffer (bytes or a uint8 array); ValueError if it is shorter."""
    buf = np.frombuffer(data, dtype=np.uint8, count=n * (dim + 2))
    return buf[: n * dim].view(np.int8).reshape(n, dim), buf[n * dim :].view("<f2")


def pack_vectors(vectors: np.ndarray, anchors: np.ndarray | None = None) -> bytes:
    """A document's stored vectors: int8 rows and scales, then (optionally) uint16 anchors, one per row.

    An anchor is the index of the encoder token a (pooled) vector stands for,
    so evidence can still place it on the grid.
    """
    body = encode_int8(vectors)
    if anchors is None:
        return body
    return body + np.asarray(anchors, dtype="<u2").tobytes()


def unpack_vectors(data: bytes, dim: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Inverse of :func:`pack_vectors` for ``n`` rows: (int8, scales, anchors or None)."""
    body = n * (dim + 2)
    q, scale = decode_int8(data[:body], dim)
    rest = data[body:]
    anchors = np.frombuffer(rest, dtype="<u2", count=n) if len(rest) == 2 * n else None
    return q, scale, anchors


def chunk_payload(data: bytes) -> list[dict[str, str]]:
    """Bytes -> metadata dicts (``p0``, ``p1``, ...), each value at most :data:`VALUE_CHARS` characters."""
    text = base64.b64encode(data).decode("ascii")
    values = [text[i : i + VALUE_CHARS] for i in range(0, len(text), VALUE_CHARS)] or [""]
    return [
        {f"p{k}": v for k, v in enumerate(values[i : i + KEYS_PER_RECORD])}
        for i in range(0, len(values), KEYS_PER_RECORD)
    ]


def join_payload(records: Sequence[Mapping[str, Any]]) -> bytes:
    """Metadata dicts from :func:`chunk_payload` (in order) -> the original bytes."""
    parts: list[str] = []
    for meta in records:
        k = 0
        while f"p{k}" in meta:
            parts.append(str(meta[f"p{k}"]))
            k += 1
    return base64.b64decode("".join(parts))
