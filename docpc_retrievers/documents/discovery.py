"""Finding PDF files and naming documents by their content."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from docpc_retrievers.errors import SourceRootError

__all__ = ["check_roots", "discover_pdfs", "document_id", "require_pdfs", "under_roots"]

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


def require_pdfs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """:func:`discover_pdfs`, with :class:`SourceRootError` when paths were given and none holds a PDF (checked before
    a store is created or changed: an index run over nothing is a mistake, not a success)."""
    given = list(paths)
    files = discover_pdfs(given)
    if given and not files:
        where = ", ".join(str(p) for p in given)
        raise SourceRootError(f"no PDF under {where}; nothing to index (nothing was created or changed)")
    return files


def document_id(path: str | os.PathLike[str]) -> str:
    """A stable id from the file's bytes (SHA-256, 32 hex chars): renamed copies share it, edits change it."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()[:32]


def _is_pdf(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".pdf"


def check_roots(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The roots of a sync, resolved; :class:`SourceRootError` for one that does not exist or holds no PDF.

    Checked before anything changes: a mistyped root must never empty a store.
    """
    roots: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise SourceRootError(f"{path}: no such file or folder; nothing was indexed or deleted")
        if path.is_dir():
            if not any(_is_pdf(p) for p in path.rglob("*")):
                raise SourceRootError(f"{path}: the folder holds no PDF; nothing was indexed or deleted")
        elif not path.is_file():
            raise SourceRootError(f"{path}: not a file or folder; nothing was indexed or deleted")
        roots.append(path.resolve())
    if not roots:
        raise SourceRootError("no folder or file given")
    return roots


def under_roots(source: str, roots: Iterable[Path]) -> bool:
    """Whether a stored source path is one of ``roots`` or lies under one of them (by path, not on disk)."""
    if not source:
        return False
    path = Path(source)
    return any(path == root or root in path.parents for root in roots)
