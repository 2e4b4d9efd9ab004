"""How the store's values fit Chroma's fields: the manifest over 4 KB metadata values, a text over a snippet.

Hosted Chroma allows 4,096 bytes a metadata value, and Chroma full-text indexes a record's document field while
holding Python's lock; these helpers keep both within bounds for the engine (engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MANIFEST_CHARS", "SNIPPET_BYTES", "joined_manifest", "long_text", "snippet", "split_manifest"]

MANIFEST_CHARS = 4000
"""Characters of the manifest's JSON per collection metadata value (hosted Chroma: 4 KB per value)."""


def split_manifest(text: str) -> dict[str, str]:
    """The manifest's JSON over collection metadata values of at most :data:`MANIFEST_CHARS` characters:
    ``docpc_manifest``, then ``docpc_manifest.1``, ``docpc_manifest.2``... (hosted Chroma: 4 KB a value)."""
    pieces = [text[i : i + MANIFEST_CHARS] for i in range(0, len(text), MANIFEST_CHARS)] or [""]
    return {("docpc_manifest" if i == 0 else f"docpc_manifest.{i}"): piece for i, piece in enumerate(pieces)}


def joined_manifest(meta: Mapping[str, Any]) -> str:
    """The manifest's JSON from :func:`split_manifest`'s values (one value in stores written before the split)."""
    raw = meta.get("docpc_manifest")
    if not raw:
        return ""
    pieces, i = [str(raw)], 1
    while f"docpc_manifest.{i}" in meta:
        pieces.append(str(meta[f"docpc_manifest.{i}"]))
        i += 1
    return "".join(pieces)


SNIPPET_BYTES = 512
"""Bytes of a document's text kept in its record's document field; longer texts are kept whole as payload.

Chroma full-text indexes the document field inside the write, holding Python's lock all the while (about 1.1 ms a
kilobyte): 16 KB of text made each commit cost 18 ms a document and starved the encoding thread of a GPU
indexing run. The store never searches that index, so the field keeps a snippet for plain Chroma tools."""


def long_text(text: str) -> bytes | None:
    """The text as payload bytes, when it is longer than the snippet the record holds."""
    data = text.encode("utf-8")
    return data if len(data) > SNIPPET_BYTES else None


def snippet(text: str) -> str:
    """The text's first :data:`SNIPPET_BYTES` bytes (cut on a character boundary): the record's document field."""
    data = text.encode("utf-8")
    if len(data) <= SNIPPET_BYTES:
        return text
    return data[:SNIPPET_BYTES].decode("utf-8", errors="ignore")
