"""Helpers the framework integrations share: result metadata, base64 images, query checks.

The LlamaIndex and LangChain packages present the same results in their own
types; what a result looks like (which keys, which image bytes, which
queries are refused) is decided once, here.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any

from PIL import Image

from .results import SearchResult

__all__ = [
    "DROPPED_METADATA_KEYS",
    "IMAGE_MIME_TYPE",
    "b64_png",
    "check_query",
    "clean_metadata",
    "result_metadata",
]

IMAGE_MIME_TYPE = "image/png"

#: Stored keys left out of results: the visual-token geometry only the core's evidence code reads.
DROPPED_METADATA_KEYS: frozenset[str] = frozenset({"token_grid"})


def clean_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Stored metadata without None values (frameworks would print them as 'None') or internal keys."""
    return {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in metadata.items()
        if v is not None and k not in DROPPED_METADATA_KEYS
    }


def result_metadata(result: SearchResult) -> dict[str, Any]:
    """A search result's metadata: stored keys plus score, rank, evidence pages and rerank details.

    ``evidence_pages`` lists 1-based page numbers, the page behind most of the
    score first; after reranking ``grid_score`` is the score before fusion.
    """
    metadata = clean_metadata(result.metadata)
    metadata.update(score=result.score, rank=result.rank)
    if result.evidence_pages:
        metadata["evidence_pages"] = [e.page for e in result.evidence_pages]
    if result.reranked:
        metadata["reranked"] = True
        metadata["grid_score"] = result.grid_score
    return metadata


def b64_png(data: bytes | Image.Image) -> str:
    """Base64 text of PNG bytes, or of a PIL image encoded as PNG."""
    if isinstance(data, Image.Image):
        buf = io.BytesIO()
        data.save(buf, format="PNG", optimize=False, compress_level=6)
        data = buf.getvalue()
    return base64.b64encode(data).decode("ascii")


def check_query(query: object) -> str:
    """Return the query, or raise a clear error for a non-string (TypeError), empty or blank one (ValueError)."""
    if not isinstance(query, str):
        raise TypeError(f"the query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("the query is empty or only whitespace; DocPCRetriever needs some text to search for")
    return query
