"""Exception types of docpc-retrievers: one base class, one subclass per failure family."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DocPCError",
    "PDFLoadError",
    "ModelLoadError",
    "StoreError",
    "ModelMismatchError",
    "StoreLockedError",
]


class DocPCError(Exception):
    """Base class of every error this library raises on purpose."""


class PDFLoadError(DocPCError):
    """A PDF could not be opened or rendered; names the file and the reason.

    ``kind`` is a stable machine-readable code: ``not_found``, ``not_pdf``,
    ``corrupt``, ``encrypted``, ``wrong_password``, ``empty``, ``too_large``,
    ``render_failed``, ``changed`` (the source file no longer holds the
    indexed bytes).
    """

    def __init__(self, path: str | Path, kind: str, reason: str) -> None:
        self.path = str(path)
        self.kind = kind
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ModelLoadError(DocPCError):
    """A checkpoint could not be found or loaded; names the id that was tried."""


class StoreError(DocPCError):
    """The vector store cannot do what was asked (bad path, inconsistent data, ...)."""


class ModelMismatchError(StoreError):
    """A store built with one model/settings was searched or extended with another."""


class StoreLockedError(StoreError):
    """Another process holds the store's writer lock."""
