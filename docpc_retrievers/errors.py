"""Exception types of docpc-retrievers: one base class, one subclass per failure family."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = [
    "PDF_ERROR_KINDS",
    "DocPCError",
    "DocumentNotFoundError",
    "InvalidFilterError",
    "InvalidMetadataError",
    "ModelLoadError",
    "ModelMismatchError",
    "PDFErrorKind",
    "PDFLoadError",
    "SettingsMismatchError",
    "SourceRootError",
    "StoreError",
    "StoreLockedError",
]

#: Why a PDF could not be used; stable machine-readable codes (``IndexFailure.kind``, ``--json``).
PDFErrorKind = Literal[
    "not_found",  # the file is missing or unreadable
    "not_pdf",  # not a PDF (another format, or garbage)
    "corrupt",  # a PDF that MuPDF cannot open
    "encrypted",  # needs a password and none was given
    "wrong_password",  # the password given does not open it
    "empty",  # zero bytes, or zero pages
    "too_large",  # over the size or page-pixel limit
    "render_failed",  # opened but a selected page could not be rendered
    "render_timeout",  # rendering took longer than the time limit (a render worker was stopped)
    "render_crashed",  # the render worker died on it (MuPDF crashed)
    "changed",  # the source no longer holds the bytes that were indexed
]
PDF_ERROR_KINDS: tuple[str, ...] = PDFErrorKind.__args__  # type: ignore[attr-defined]


class DocPCError(Exception):
    """Base class of every error this library raises on purpose."""


class PDFLoadError(DocPCError):
    """A PDF could not be opened or rendered; names the file and the reason (``kind``, see :data:`PDFErrorKind`)."""

    def __init__(self, path: str | Path, kind: PDFErrorKind, reason: str) -> None:
        if kind not in PDF_ERROR_KINDS:
            raise ValueError(f"unknown PDF error kind {kind!r}")
        self.path = str(path)
        self.kind: PDFErrorKind = kind
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ModelLoadError(DocPCError):
    """A checkpoint could not be found or loaded; names the id that was tried."""


class EncodingProcessError(DocPCError):
    """The process encoding for an indexing run failed or ended; what the run committed stays indexed."""


class StoreError(DocPCError):
    """The vector store cannot do what was asked (bad path, inconsistent data, ...)."""


class SettingsMismatchError(StoreError):
    """A store built with some settings was opened or extended with different ones; names each setting."""


class ModelMismatchError(SettingsMismatchError):
    """A store built with one model (or encoder settings) was searched or extended with another."""


class StoreLockedError(StoreError):
    """Another process holds the store's writer lock."""


class DocumentNotFoundError(StoreError, KeyError):
    """No stored document has this id; a ``KeyError`` too, so ``except KeyError`` still catches it."""

    def __init__(self, doc_id: object, store: str | Path = "the store") -> None:
        self.doc_id = doc_id
        self.store = str(store)
        super().__init__(f"no document {doc_id!r} in {self.store}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ExplainUnavailableError(DocPCError):
    """A match cannot be laid back onto the image: the encoder family or the stored record has no patch positions."""


class InvalidMetadataError(DocPCError, ValueError):
    """User metadata that a store cannot keep (reserved key, unsupported type, too many keys, too long a value)."""


class SourceRootError(DocPCError, ValueError):
    """A folder or file given to index or prune does not exist or holds no PDF; nothing was changed."""


class InvalidFilterError(DocPCError, ValueError):
    """A metadata filter (``where``, ``filters``) that is malformed: names the operator or key and lists the valid ones."""
