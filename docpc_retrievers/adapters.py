"""The one layer both framework integrations stand on: options, one retrieval call, metadata, images, loading.

The LlamaIndex and LangChain packages present the same results in their own
types. Everything else is decided once, here: which options a retriever has
and how they are checked and saved (:class:`RetrieverOptions`), how a store is
opened or built (:func:`open_index`, :func:`build_index`) and how loaders compose
PDFs without a model (:func:`compose_pdfs`). How a query becomes hits with text,
metadata and pictures is :mod:`docpc_retrievers.hits` (re-exported here).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict
from typing import Any

from docpc_retrievers.config import EncoderOptions, GridSpec, IndexSettings
from docpc_retrievers.documents.discovery import discover_pdfs
from docpc_retrievers.documents.represent import RepresentedDocument, represent_pdf
from docpc_retrievers.documents.user_metadata import UserMetadata, resolve_user_metadata
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.errors import PDFLoadError
from docpc_retrievers.image_bytes import b64_png, convert_image
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.options import (
    DEFAULT_PAGE_DPI, IMAGE_FORMATS, RETURN_IMAGES, ImageFormat, ReturnImages,
)
from docpc_retrievers.queries import check_query
from docpc_retrievers.grid_previews import GRID_MIME_TYPE
from docpc_retrievers.retriever_options import LEGACY_NAMES, RetrieverOptions
from docpc_retrievers.hits import DROPPED_METADATA_KEYS, IMAGE_MIME_TYPE, above_thresholds, clean_metadata, result_metadata, retrieve
from docpc_retrievers.store.layout import RETRIEVER_OPTIONS_FILE, StoreLayout

__all__ = [
    "DEFAULT_PAGE_DPI",
    "DROPPED_METADATA_KEYS",
    "above_thresholds",
    "GRID_MIME_TYPE",
    "IMAGE_FORMATS",
    "IMAGE_MIME_TYPE",
    "ImageFormat",
    "PathLike",
    "RETRIEVER_OPTIONS_FILE",
    "RETURN_IMAGES",
    "RetrieverOptions",
    "ReturnImages",
    "b64_png",
    "BUILD_OPTIONS",
    "build_index",
    "check_known",
    "check_query",
    "clean_metadata",
    "compose_pdfs",
    "convert_image",
    "open_index",
    "path_list",
    "result_metadata",
    "retrieve",
    "save_options",
    "saved_options",
    "split_build_options",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


def check_known(given: Iterable[str], known: Iterable[str], who: str) -> None:
    """Raise ``TypeError`` naming each unknown option and listing the known ones (no option is ever dropped silently)."""
    known_set = set(known)
    unknown = sorted(set(given) - known_set)
    if unknown:
        raise TypeError(
            f"{who} got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known options: {', '.join(sorted(known_set))}"
        )


def path_list(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    """One path or many, as a list (a bare string is one path, not its characters)."""
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def open_index(
    persist_dir: PathLike,
    *,
    model: PathLike | None = None,
    encoder: Encoder | None = None,
    encoder_kwargs: EncoderOptions | Mapping[str, Any] | None = None,
) -> DocPCIndex:
    """Open a store read-only for a retriever (the store's own model unless one is given)."""
    return DocPCIndex(persist_dir, model=model, encoder=encoder, encoder_kwargs=encoder_kwargs)


def build_index(
    paths: PathLike | Iterable[PathLike],
    *,
    persist_dir: PathLike | None = None,
    model: PathLike | None = None,
    encoder: Encoder | None = None,
    strategy: str | None = None,
    pages: int | None = None,
    settings: IndexSettings | None = None,
    password: str | None = None,
    progress: bool = False,
    encoder_kwargs: EncoderOptions | Mapping[str, Any] | None = None,
    prune: bool = False,
    metadata: UserMetadata = None,
    workers: int | None = None,
) -> DocPCIndex:
    """Index PDF files and folders for a retriever's ``from_pdfs``; the index stays writable.

    With ``persist_dir`` the store is created there, or reopened and extended
    (unchanged files are skipped, moved ones followed; ``prune=True`` also deletes
    documents whose source under ``paths`` is gone); without it a temporary store is used.
    ``metadata``: the user's keys, a dict for every file or ``path -> dict`` (see
    :meth:`docpc_retrievers.indexing.Indexer.add_pdfs`). Failures are logged and listed in ``index.last_report``.
    """
    return DocPCIndex.from_pdfs(
        path_list(paths),
        persist_dir,
        prune=prune,
        metadata=metadata,
        workers=workers,
        model=model,
        encoder=encoder,
        settings=settings,
        strategy=strategy,
        pages=pages,
        password=password,
        progress=progress,
        encoder_kwargs=encoder_kwargs,
    )


#: ``from_pdfs`` keywords that configure the index being built; every other keyword is a retriever option.
BUILD_OPTIONS = ("model", "encoder", "strategy", "pages", "settings", "progress", "encoder_kwargs", "prune", "metadata",
                 "workers")


def split_build_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the index-building keywords (:data:`BUILD_OPTIONS`) out of ``kwargs`` and return them."""
    return {name: kwargs.pop(name) for name in BUILD_OPTIONS if name in kwargs}


def save_options(layout: StoreLayout, options: RetrieverOptions, extra: Mapping[str, Any] | None = None) -> None:
    """Keep a retriever's options with its store (``extra``: framework-specific keys), so reopening restores them."""
    layout.write_retriever_options({**options.to_dict(), **dict(extra or {})})


def saved_options(layout: StoreLayout) -> dict[str, Any]:
    """Options a retriever saved with this store, as :class:`RetrieverOptions` keywords ({} when none)."""
    data = layout.read_retriever_options()
    if not data:
        return {}
    saved = asdict(RetrieverOptions.from_dict(data))
    given = {LEGACY_NAMES.get(k, k) for k in data}
    return {k: v for k, v in saved.items() if k in given and k != "password"}


def compose_pdfs(
    paths: PathLike | Iterable[PathLike],
    spec: GridSpec,
    *,
    password: str | None = None,
    raise_on_error: bool = False,
    metadata: UserMetadata = None,
) -> Iterator[RepresentedDocument]:
    """For document loaders: each readable PDF composed as the index would, lazily, identical files once.

    No model is loaded. Files that cannot be used are logged and skipped
    unless ``raise_on_error``; the yielded metadata is already cleaned and
    carries the user's keys (``metadata`` and ``<name>.pdf.json`` sidecars, checked
    before the first file is read, as an index would store them).
    """
    seen: set[str] = set()
    files = discover_pdfs(path_list(paths))
    user = resolve_user_metadata([f for f in files if f.exists()], metadata)
    for path in files:
        try:
            doc = represent_pdf(path, spec, password=password)
        except PDFLoadError as exc:
            if raise_on_error:
                raise
            logger.warning("skipping %s", exc)
            continue
        if doc.doc_id in seen:
            logger.info("skipping %s: same content as a file already loaded", path)
            continue
        seen.add(doc.doc_id)
        doc.metadata = clean_metadata({**doc.metadata, **user.get(path, {})})
        yield doc
