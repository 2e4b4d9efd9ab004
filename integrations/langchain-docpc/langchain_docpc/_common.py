"""Helpers for the retriever and the loader: the core's shared framework helpers plus path handling."""

from __future__ import annotations

import os
from collections.abc import Iterable

from docpc_retrievers.frameworks import (
    DROPPED_METADATA_KEYS,
    IMAGE_MIME_TYPE,
    b64_png,
    check_query,
    clean_metadata,
    result_metadata,
)

__all__ = [
    "DROPPED_METADATA_KEYS",
    "IMAGE_MIME_TYPE",
    "PathLike",
    "b64_png",
    "check_query",
    "clean_metadata",
    "path_list",
    "result_metadata",
]


PathLike = str | os.PathLike[str]


def path_list(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    """One path or many, as a list (a bare string is one path, not its characters)."""
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)
