"""Compact forms of what a store keeps: int8 vectors with a per-vector scale, and text-safe payload chunks.

Why int8 with one fp16 scale per vector: ColPali-family vectors are unit
length and spread over all dimensions, so ``round(v * 127 / max|v|)`` keeps
MaxSim rankings (measured in ``benchmarks/store_bench.py``) at a quarter of
float32's bytes: 130 bytes per 128-dim vector. Chroma records hold strings,
not bytes, so payloads travel as text split into values of at most
:data:`VALUE_CHARS` characters (hosted Chroma caps a metadata value at 4 KB).
Chroma's embedded SQLite indexes every string value, so each payload character
is stored twice: new stores pack payloads as zlib (where it saves bytes) then
base85, 0.88-0.94x base64's characters (:data:`PACKINGS`).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "KEYS_PER_RECORD",
    "PACKINGS",
    "VALUE_CHARS",
    "b85_decode",
    "b85_encode",
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
#: How payload bytes become text: ``b64`` (base64; stores of format 2, read by every version), ``b85`` (base85:
#: four bytes in five characters, none of them a quote or backslash, so JSON carries it unescaped to a server) and
#: ``z85`` (zlib at level 1, then base85; chosen per payload when it is smaller).
PACKINGS = ("b64", "b85", "z85")
#: The metadata key that names a record's packing (absent: ``b64``).
PACKING_KEY = "c"

_B85 = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~", np.uint8)
_B85_VALUE = np.full(256, 255, dtype=np.uint8)
_B85_VALUE[_B85] = np.arange(85, dtype=np.uint8)
_POWERS = 85 ** np.arange(4, -1, -1, dtype=np.uint64)


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


def b85_encode(data: bytes) -> str:
    """Base85 text of ``data``, the same as :func:`base64.b85encode` (unpadded), vectorised: ~50x faster."""
    pad = -len(data) % 4
    words = np.frombuffer(data + b"\0" * pad, dtype=">u4").astype(np.uint32)
    digits = np.empty((words.size, 5), dtype=np.uint8)
    for k in range(4, -1, -1):  # 32-bit divisions, least significant digit first: twice as fast as 64-bit powers
        words, digits[:, k] = np.divmod(words, np.uint32(85))
    text = _B85[digits].tobytes()
    return text[: len(text) - pad].decode("ascii")


def b85_decode(text: str) -> bytes:
    """Inverse of :func:`b85_encode` (and of :func:`base64.b85encode`); ValueError on a character outside base85."""
    raw = text.encode("ascii")
    pad = -len(raw) % 5
    values = _B85_VALUE[np.frombuffer(raw + b"~" * pad, dtype=np.uint8)]
    if (values == 255).any():
        raise ValueError("payload text holds a character outside base85")
    words = values.reshape(-1, 5).astype(np.uint64) @ _POWERS
    if (words > 0xFFFFFFFF).any():
        raise ValueError("payload text holds a base85 group over 32 bits")
    out = words.astype(">u4").tobytes()
    return out[: len(out) - pad]


def chunk_payload(data: bytes, packing: str = "b64", *, compress: bool = True) -> list[dict[str, str]]:
    """Bytes -> metadata dicts (``p0``, ``p1``, ...), each value at most :data:`VALUE_CHARS` characters.

    ``packing`` is one of :data:`PACKINGS`; ``z85`` falls back to ``b85`` where zlib does not shrink the bytes, or
    without trying when ``compress`` is False (bytes known not to shrink: WebP grids). Records packed other than
    base64 carry their packing under :data:`PACKING_KEY`.
    """
    if packing not in PACKINGS:
        raise ValueError(f"unknown payload packing {packing!r}; expected one of {PACKINGS}")
    if packing == "z85" and not compress:
        packing = "b85"
    if packing == "z85":
        squeezed = zlib.compress(data, 1)
        if len(squeezed) < len(data):
            data = squeezed
        else:
            packing = "b85"
    text = base64.b64encode(data).decode("ascii") if packing == "b64" else b85_encode(data)
    values = [text[i : i + VALUE_CHARS] for i in range(0, len(text), VALUE_CHARS)] or [""]
    tag = {} if packing == "b64" else {PACKING_KEY: packing}
    return [
        {**tag, **{f"p{k}": v for k, v in enumerate(values[i : i + KEYS_PER_RECORD])}}
        for i in range(0, len(values), KEYS_PER_RECORD)
    ]


def join_payload(records: Sequence[Mapping[str, Any]]) -> bytes:
    """Metadata dicts from :func:`chunk_payload` (in order) -> the original bytes, whatever their packing."""
    parts: list[str] = []
    for meta in records:
        k = 0
        while f"p{k}" in meta:
            parts.append(str(meta[f"p{k}"]))
            k += 1
    packing = str(records[0].get(PACKING_KEY, "b64")) if records else "b64"
    text = "".join(parts)
    if packing == "b64":
        return base64.b64decode(text)
    if packing not in PACKINGS:
        raise ValueError(f"payload packed as {packing!r}, which this version cannot read; upgrade docpc-retrievers")
    data = b85_decode(text)
    return zlib.decompress(data) if packing == "z85" else data
