"""``DocPCRetriever``: LlamaIndex retriever over a DocPC index, one ``ImageNode`` per ranked PDF.

Why: LlamaIndex users compose retrievers into query engines and evaluators;
this adapter makes a :class:`docpc_retrievers.DocPCIndex` one of them. Options,
search and images come from :mod:`docpc_retrievers.retrievers`; this module
only maps hits to LlamaIndex's types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import inspect

from docpc_retrievers.retrievers import (
    BY_NAME,
    DEFAULT_PAGE_DPI,
    DEFAULT_TOP_K,
    RETRIEVER_OPTIONS_FILE,
    DocPCIndex,
    Encoder,
    PathLike,
    RetrieverOptions,
    ReturnImages,
    StoreEditing,
    check_known,
    framework_names,
    open_index,
    option_parameters,
    options_help,
    retrieve,
    retriever_from_pdfs,
    save_options,
    saved_options,
)
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from .filters import metadata_filters_to_where
from .nodes import hit_to_nodes

__all__ = ["CONFIG_FILE", "DEFAULT_PAGE_DPI", "DEFAULT_TOP_K", "DocPCRetriever", "ReturnImages"]

#: Where the retriever's options are kept, inside the store directory.
CONFIG_FILE = RETRIEVER_OPTIONS_FILE

_RENAMED = {name: core for name, core in framework_names("llamaindex").items() if name != core}
#: Options set as attributes (``filters`` is taken apart: LlamaIndex's MetadataFilters or a where dict).
_OPTION_ATTRS = tuple(name for name in framework_names("llamaindex") if name != "filters")


class DocPCRetriever(StoreEditing, BaseRetriever):
    """Rank whole PDFs by visual late-interaction (MaxSim) over their composed page grids.

    Build one with :meth:`from_pdfs`, :meth:`from_persist_dir`, :meth:`from_defaults` or
    from an open :class:`~docpc_retrievers.DocPCIndex`. ``retrieve`` returns one
    ``NodeWithScore`` per document, best first: an ``ImageNode`` whose id is the
    document id, text the text of the selected pages and image the grid PNG (base64).

    ``filters`` takes LlamaIndex's ``MetadataFilters`` or a Chroma ``where`` dict. With ``return_images="pages"``
    the node's image is the page behind most of the score, every selected page is in ``page_images_base64`` and
    their numbers in ``page_numbers``, still one node per document. ``password`` opens encrypted sources;
    ``owns_index`` closes the index in :meth:`close`. Node metadata: the stored keys plus ``score``, ``rank``,
    ``evidence_pages`` and, after reranking, ``reranked`` and ``grid_score``.
    """

    def __init__(
        self,
        index: DocPCIndex,
        *,
        similarity_top_k: int = DEFAULT_TOP_K,
        filters: MetadataFilters | Mapping[str, Any] | None = None,
        password: str | None = None,
        owns_index: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **options: Any,
    ) -> None:
        if not isinstance(index, DocPCIndex):
            raise TypeError(f"index must be a docpc_retrievers.DocPCIndex, not {type(index).__name__}")
        check_known(options, [*_OPTION_ATTRS, "filters", "password", "owns_index", "callback_manager", "verbose"],
                    "DocPCRetriever")
        for name, core in framework_names("llamaindex").items():
            if name not in ("similarity_top_k", "filters"):
                setattr(self, name, options.pop(name, BY_NAME[core].default))
        self._index, self.similarity_top_k, self.filters = index, similarity_top_k, filters
        self._password, self._owns_index = password, owns_index
        self.options()  # every option fails now, not at the first query
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_pdfs(
        cls,
        paths: PathLike | Iterable[PathLike],
        *,
        persist_dir: PathLike | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> DocPCRetriever:
        """Index PDF files and folders and return a retriever over them (its options saved with a ``persist_dir``).

        ``model``, ``encoder``, ``strategy``, ``pages``, ``settings``, ``progress``, ``workers`` and
        ``encoder_kwargs`` configure the index; ``prune=True`` makes a ``persist_dir`` store mirror
        ``paths`` (documents whose source under them is gone are deleted); ``metadata`` attaches your
        keys (a dict, or ``path -> dict``), filterable like the built-in ones
        (see :func:`docpc_retrievers.retrievers.build_index`);
        other ``kwargs`` are retriever options. Without ``persist_dir`` a temporary store is
        deleted by :meth:`close` (keep it with :meth:`persist`).
        """
        return retriever_from_pdfs(
            paths, kwargs, lambda index, options: cls(index, password=password, owns_index=True, **options),
            lambda retriever: retriever.persist(persist_dir),  # type: ignore[arg-type]
            persist_dir=persist_dir, password=password)

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: PathLike,
        *,
        model: PathLike | None = None,
        encoder: Encoder | None = None,
        encoder_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> DocPCRetriever:
        """Open a store read-only; options saved with it are restored and ``kwargs`` override them."""
        index = open_index(persist_dir, model=model, encoder=encoder, encoder_kwargs=encoder_kwargs)
        try:
            saved = {("similarity_top_k" if k == "top_k" else k): v for k, v in saved_options(index.layout).items()}
            raw = index.layout.read_retriever_options()
            if raw.get("metadata_filters") is not None:
                saved["filters"] = MetadataFilters.model_validate(raw["metadata_filters"])
            return cls(index, owns_index=True, **{**saved, **kwargs})
        except BaseException:
            index.close()
            raise

    @classmethod
    def from_defaults(
        cls, index: DocPCIndex | None = None, *, persist_dir: PathLike | None = None, **kwargs: Any
    ) -> DocPCRetriever:
        """LlamaIndex-style factory: from an open ``index``, else from ``persist_dir``."""
        if index is not None:
            if persist_dir is not None or kwargs.get("model") is not None or kwargs.get("encoder") is not None:
                raise ValueError("pass either index or persist_dir (with model/encoder), not both")
            return cls(index, **kwargs)
        if persist_dir is None:
            raise ValueError("DocPCRetriever.from_defaults needs index=... or persist_dir=...; to index PDFs use from_pdfs")
        return cls.from_persist_dir(persist_dir, **kwargs)

    # -------------------------------------------------------------- options
    @property
    def index(self) -> DocPCIndex:
        """The underlying DocPC index (search, add PDFs, info)."""
        return self._index

    def options(self) -> RetrieverOptions:
        """The current attributes as the core's checked options."""
        values = {a: getattr(self, a) for a in _OPTION_ATTRS}
        return RetrieverOptions.from_framework(
            {**values, "filters": metadata_filters_to_where(self.filters)}, _RENAMED, password=self._password
        )

    def persist(self, persist_dir: PathLike) -> None:
        """Save the store (copied when ``persist_dir`` is elsewhere; it must be new or empty) and these options."""
        layout = self._index.layout
        if Path(persist_dir).expanduser().resolve() != layout.root:
            if self._index.store.host is not None:
                raise NotImplementedError(
                    f"persist() copies a local store; this one keeps its records on a Chroma server ({self._index.store.host})."
                )
            layout = layout.copy_to(persist_dir)
        extra = {"metadata_filters": self.filters.model_dump(mode="json")} if isinstance(self.filters, MetadataFilters) else {}
        save_options(layout, self.options(), extra)

    # -------------------------------------------------------------- retrieval
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [node for hit in retrieve(self._index, query_bundle.query_str, self.options()) for node in hit_to_nodes(hit)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """:meth:`_retrieve` in a worker thread, so the event loop keeps running while the query encodes."""
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(path={str(self._index.path)!r}, similarity_top_k={self.similarity_top_k}, "
                f"return_images={self.return_images!r}, rerank={self.rerank})")


def _signature() -> inspect.Signature:
    """``__init__``'s signature with every option of the schema by name, so ``help()`` and completion show them."""
    p = inspect.Parameter
    return inspect.Signature([
        p("self", p.POSITIONAL_OR_KEYWORD), p("index", p.POSITIONAL_OR_KEYWORD, annotation=DocPCIndex),
        *option_parameters("llamaindex", {"filters": MetadataFilters | Mapping[str, Any] | None}),
        p("password", p.KEYWORD_ONLY, default=None, annotation=str | None),
        p("owns_index", p.KEYWORD_ONLY, default=False, annotation=bool),
        p("callback_manager", p.KEYWORD_ONLY, default=None, annotation=CallbackManager | None),
        p("verbose", p.KEYWORD_ONLY, default=False, annotation=bool),
    ], return_annotation=None)


DocPCRetriever.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
DocPCRetriever.__doc__ = f"{DocPCRetriever.__doc__}\n{options_help('llamaindex')}\n"
