"""How a retriever gets its store: opened read-only, or built from PDFs (the one ``from_pdfs`` flow both retrievers
use), and its options kept with the store so reopening restores them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

from docpc_retrievers.config import EncoderOptions, IndexSettings
from docpc_retrievers.documents.user_metadata import UserMetadata
from docpc_retrievers.encoders.protocol import Encoder
from docpc_retrievers.retrievers.arguments import PathLike, path_list
from docpc_retrievers.retrievers.options import LEGACY_NAMES, RetrieverOptions
from docpc_retrievers.store.layout import StoreLayout

if TYPE_CHECKING:
    from docpc_retrievers.index import DocPCIndex

__all__ = ["BUILD_OPTIONS", "build_index", "open_index", "retriever_from_pdfs", "save_options", "saved_options",
           "split_build_options"]

_Retriever = TypeVar("_Retriever")

def open_index(
    persist_dir: PathLike,
    *,
    model: PathLike | None = None,
    encoder: Encoder | None = None,
    encoder_kwargs: EncoderOptions | Mapping[str, Any] | None = None,
) -> DocPCIndex:
    """Open a store read-only for a retriever (the store's own model unless one is given)."""
    from docpc_retrievers.index import DocPCIndex  # the index imports this package's options: imported when used

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
    from docpc_retrievers.index import DocPCIndex

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


def saved_options_at(persist_dir: PathLike) -> dict[str, Any]:
    """:func:`saved_options` of the store at ``persist_dir``, without opening it."""
    return saved_options(StoreLayout.at(persist_dir))


def retriever_from_pdfs(
    paths: PathLike | Iterable[PathLike],
    kwargs: dict[str, Any],
    make: Callable[[DocPCIndex, dict[str, Any]], _Retriever],
    keep: Callable[[_Retriever], None],
    *,
    persist_dir: PathLike | None,
    password: str | None,
) -> _Retriever:
    """Both retrievers' ``from_pdfs``: index ``paths`` (the :data:`BUILD_OPTIONS` of ``kwargs``), make the retriever
    from the rest (``make(index, options)``, owning the index) and, with a ``persist_dir``, ``keep`` its options
    there; whatever fails closes the index it built."""
    index = build_index(paths, persist_dir=persist_dir, password=password, **split_build_options(kwargs))
    try:
        retriever = make(index, kwargs)
        if persist_dir is not None:
            keep(retriever)
        return retriever
    except BaseException:
        index.close()
        raise
