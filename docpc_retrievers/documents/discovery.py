"""Finding PDF files and naming documents by their content."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["discover_pdfs", "document_id"]

_CHUNK = 1 << 20


def discover_pdfs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders (recursively, ``*.pdf`` in any case) into a sorted, de-duplicated list.

    Paths that do not exist are returned as given, so the indexer can report
    them as failures instead of silently dropping them.
    """
    seen: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")
            for p in found:
                seen.setdefault(p.resolve(), None)
        else:
            seen.setdefault(path.resolve() if path.exists() else path, None)
    return list(seen)


def document_id(path: str | os.PathLike[str]) -> str:
    """A stable id from the file's bytes (SHA-256, 32 hex chars): renamed copies share it, edits change it."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()[:32]
