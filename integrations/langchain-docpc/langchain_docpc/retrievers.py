"""``DocPCRetriever``: LangChain retriever over a DocPC index, one ``Document`` per ranked PDF.

Options come from the schema (:mod:`docpc_retrievers.retrievers.schema`), hits from
:mod:`docpc_retrievers.retrievers.hits`; LangChain's ``search_type`` and ``search_kwargs``
from :mod:`langchain_docpc.search_kwargs`. This module maps hits to ``Document``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from docpc_retrievers.retrievers import (
    DEFAULT_PAGE_DPI,
    DEFAULT_TOP_K,
    OPTIONS,
    DocPCIndex,
    Encoder,
    Hit,
    PathLike,
    RetrieverOptions,
    StoreEditing,
    b64_png,
    check_known,
    framework_names,
    open_index,
    options_help,
    retrieve,
    retriever_from_pdfs,
    save_options,
    saved_options_at,
    search_aliases,
)
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, create_model

from langchain_docpc.search_kwargs import check_search_type, merge_search_kwargs

__all__ = ["DEFAULT_K", "DEFAULT_PAGE_DPI", "DocPCRetriever"]

DEFAULT_K = DEFAULT_TOP_K

#: invoke() forwards every keyword it gets; these are LangChain's own and carry no meaning here.
_IGNORED_KWARGS = frozenset({"verbose"})
#: Retriever fields that are core options under another name (LangChain spells top k and filters its own way).
_RENAMED = {name: core for name, core in framework_names("langchain").items() if name != core}
#: Other names LangChain users write for the same options in search_kwargs.
_SEARCH_ALIASES = search_aliases()
_OPTION_FIELDS = tuple(framework_names("langchain"))

_OptionFields: type[BaseRetriever] = create_model(  # one pydantic field per option of the schema, as LangChain names it
    "_OptionFields",
    __base__=BaseRetriever,
    **{o.langchain: (o.annotation, Field(default=o.default, description=o.doc, **(o.bounds or {}))) for o in OPTIONS},
)


class DocPCRetriever(StoreEditing, _OptionFields):
    """Rank whole PDFs by visual late-interaction (MaxSim) over their composed page grids.

    Build one with :meth:`from_pdfs`, :meth:`from_persist_dir` or ``DocPCRetriever(persist_dir=...)`` (read-only),
    or ``DocPCRetriever(index=...)``. Each result is a ``Document`` with ``id`` the document id, ``page_content``
    the text of the selected pages and ``metadata`` the stored keys (``source``, ``title``, ``total_pages``,
    ``selected_pages`` (1-based), ...) plus ``score``, ``rank``, ``evidence_pages``, after reranking ``reranked``
    and ``grid_score``, and the image: ``image_base64`` with its true ``image_mime_type`` (the grid, WebP;
    the evidence picture, PNG; with ``return_images="pages"`` the page behind most of the score, PNG, and every
    selected page in ``page_images_base64`` / ``page_numbers``). ``invoke(query, k=..., filter=...)`` overrides
    any option per call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    search_type: str = "similarity"
    """``"similarity"``, or ``"similarity_score_threshold"`` with ``score_threshold`` (LangChain's names)."""
    persist_dir: str | None = None
    """Store directory to open read-only when no ``index`` is given."""
    model: str | None = None
    """Checkpoint id or path (default: the store's own model)."""
    password: str | None = Field(default=None, repr=False, exclude=True)
    """Opens encrypted source PDFs when rendering or reranking pages."""

    _index: DocPCIndex = PrivateAttr()
    _owns_index: bool = PrivateAttr(default=False)

    def __init__(
        self,
        index: DocPCIndex | None = None,
        *,
        encoder: Encoder | None = None,
        encoder_kwargs: Mapping[str, Any] | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
        **data: Any,
    ) -> None:
        check_known(data, [*type(self).model_fields, "search_kwargs", "encoder", "encoder_kwargs"], "DocPCRetriever")
        # LangChain's as_retriever(search_kwargs={"k": ..., "filter": ...}) spelling, checked like the fields
        data.update(merge_search_kwargs(data, search_kwargs, _OPTION_FIELDS, _SEARCH_ALIASES))
        check_search_type(data.get("search_type", "similarity"), data.get("score_threshold"))
        super().__init__(**data)
        if index is not None:
            if not isinstance(index, DocPCIndex):
                raise TypeError(f"index must be a docpc_retrievers.DocPCIndex, not {type(index).__name__}")
            if self.persist_dir is not None or self.model is not None or encoder is not None:
                raise ValueError("pass either index or persist_dir (with model/encoder), not both")
            self._index = index
        elif self.persist_dir is not None:
            self._index = open_index(Path(self.persist_dir), model=self.model, encoder=encoder, encoder_kwargs=encoder_kwargs)
            self._owns_index = True
        else:
            raise ValueError("DocPCRetriever needs index=DocPCIndex(...) or persist_dir=...; to index PDFs use from_pdfs")
        self.options()  # every option fails now, not at the first query

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

        ``model``, ``encoder``, ``strategy``, ``pages``, ``settings``, ``progress``, ``workers`` and ``encoder_kwargs``
        configure the index; ``prune=True`` makes a ``persist_dir`` store mirror ``paths`` (documents whose source
        under them is gone are deleted); ``metadata`` attaches your keys (a dict, or ``path -> dict``), filterable
        like the built-in ones (see :func:`docpc_retrievers.retrievers.build_index`); other ``kwargs`` are retriever
        fields (k, filter, ...). Without ``persist_dir`` a temporary store is deleted by :meth:`close`.
        """

        def make(index: DocPCIndex, options: dict[str, Any]) -> DocPCRetriever:
            retriever = cls(index=index, password=password, **options)
            retriever._owns_index = True
            return retriever

        return retriever_from_pdfs(paths, kwargs, make, lambda r: save_options(r.index.layout, r.options()),
                                   persist_dir=persist_dir, password=password)

    @classmethod
    def from_persist_dir(cls, persist_dir: PathLike, **kwargs: Any) -> DocPCRetriever:
        """Open a store read-only; options saved with it are restored and ``kwargs`` override them."""
        saved = saved_options_at(persist_dir)
        saved = {next((f for f, o in _RENAMED.items() if o == k), k): v for k, v in saved.items()}
        return cls(persist_dir=str(persist_dir), **{**saved, **kwargs})

    @property
    def index(self) -> DocPCIndex:
        """The underlying DocPC index (search, add PDFs, info)."""
        return self._index

    def options(self, **overrides: Any) -> RetrieverOptions:
        """The current fields (with per-call ``overrides``) as the core's checked options."""
        values = {f: getattr(self, f) for f in _OPTION_FIELDS}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return RetrieverOptions.from_framework(values, _RENAMED, password=self.password)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filter: Mapping[str, Any] | None = None,  # noqa: A002 - LangChain's name for it
        rerank: bool | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        kwargs = {k: v for k, v in kwargs.items() if k not in _IGNORED_KWARGS}
        check_known(kwargs, _OPTION_FIELDS, "DocPCRetriever.invoke")
        options = self.options(k=k, filter=filter, rerank=rerank, **kwargs)
        return [_document(hit) for hit in retrieve(self._index, query, options)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        """The sync search in a worker thread, so the event loop keeps running while the query encodes."""
        return await asyncio.to_thread(self._get_relevant_documents, query, run_manager=run_manager.get_sync(), **kwargs)


DocPCRetriever.__doc__ = f"{DocPCRetriever.__doc__}\n{options_help('langchain')}\n"


def _document(hit: Hit) -> Document:
    metadata = dict(hit.metadata)
    if hit.image is not None:
        metadata.update(image_base64=b64_png(hit.image), image_mime_type=hit.image_mime_type)
    if hit.pages:
        metadata["page_images_base64"] = [b64_png(data) for _, data, _ in hit.pages]
    return Document(id=hit.id, page_content=hit.text, metadata=metadata)
