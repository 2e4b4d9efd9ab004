"""``DocPCRetriever``: LangChain retriever over a DocPC index, one ``Document`` per ranked PDF.

Why: LangChain users compose retrievers into chains; this adapter makes a
:class:`docpc_retrievers.DocPCIndex` one of them. ``page_content`` is the
text of the document's selected pages (for text LLMs); the composed grid
travels in ``metadata["image_base64"]`` (PNG) so a multimodal LLM can read it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from docpc_retrievers import DocPCIndex, IndexSettings, SearchResult
from docpc_retrievers.encoders import Encoder
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from ._common import IMAGE_MIME_TYPE, PathLike, b64_png, check_query, path_list, result_metadata

__all__ = ["DEFAULT_K", "DEFAULT_PAGE_DPI", "DocPCRetriever"]

logger = logging.getLogger(__name__)

DEFAULT_K = 5
#: Resolution of on-demand page images (``return_images="pages"``).
DEFAULT_PAGE_DPI = 144.0

#: invoke() forwards every keyword it gets; these are LangChain's own and carry no meaning here.
_IGNORED_KWARGS = frozenset({"verbose"})


class DocPCRetriever(BaseRetriever):
    """Rank whole PDFs by visual late-interaction (MaxSim) over their composed page grids.

    Build one with :meth:`from_pdfs` (indexes PDFs), :meth:`from_persist_dir`
    or ``DocPCRetriever(persist_dir=...)`` (opens a store read-only), or
    ``DocPCRetriever(index=...)`` with an open :class:`~docpc_retrievers.DocPCIndex`.
    Each result is a ``Document`` with ``id`` the document id, ``page_content``
    the text layer of the selected pages, and ``metadata`` the stored keys
    (``source``, ``file_name``, ``title``, ``total_pages``, ``selected_pages``
    (1-based), ``selected_labels``, ``strategy``, ...) plus ``score``, ``rank``,
    ``evidence_pages`` (1-based, the page behind most of the score first),
    after reranking ``reranked`` and ``grid_score``, and the image:
    ``image_base64`` (the grid PNG) or, with ``return_images="pages"``,
    ``page_images_base64`` (one PNG per selected page, rendered from the
    source PDF on demand), with ``image_mime_type``. Page-mode stores keep
    no grid, so their documents carry no ``image_base64``.

    ``invoke(query, k=..., filter=..., rerank=...)`` overrides those fields per call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    k: int = Field(default=DEFAULT_K, ge=0)
    """Documents to return; 0 returns nothing, more than the corpus returns the whole corpus."""
    filter: dict[str, Any] | None = None
    """Chroma ``where`` filter on stored metadata, e.g. ``{"total_pages": {"$gte": 2}}``."""
    rerank: bool = False
    """Grid-then-page reranking: rescore the top documents from some of their pages at full resolution."""
    rerank_top_n: int | None = Field(default=None, ge=1)
    """Documents reranked (core default 20)."""
    page_budget: int | None = Field(default=None, ge=1)
    """Pages encoded per reranked document (core default 4)."""
    grid_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    """Weight of the grid score in the fused score (core default 0.5)."""
    return_images: Literal["grid", "pages"] | None = "grid"
    """``"grid"``: the composed grid; ``"pages"``: the selected pages; None: no image."""
    page_dpi: float = Field(default=DEFAULT_PAGE_DPI, gt=0)
    """Resolution of page images with ``return_images="pages"``."""
    persist_dir: str | None = None
    """Store directory to open read-only when no ``index`` is given."""
    model: str | None = None
    """Checkpoint id or path (default: the store's own model)."""
    password: str | None = Field(default=None, repr=False, exclude=True)
    """Opens encrypted source PDFs when rendering or reranking pages."""

    _index: DocPCIndex = PrivateAttr()
    _owns_index: bool = PrivateAttr(default=False)
    _warned_no_grid: bool = PrivateAttr(default=False)

    def __init__(
        self,
        index: DocPCIndex | None = None,
        *,
        encoder: Encoder | None = None,
        encoder_kwargs: Mapping[str, Any] | None = None,
        **data: Any,
    ) -> None:
        super().__init__(**data)
        if index is not None:
            if not isinstance(index, DocPCIndex):
                raise TypeError(f"index must be a docpc_retrievers.DocPCIndex, not {type(index).__name__}")
            if self.persist_dir is not None or self.model is not None or encoder is not None:
                raise ValueError("pass either index or persist_dir (with model/encoder), not both")
            self._index = index
        elif self.persist_dir is not None:
            self._index = DocPCIndex(
                Path(self.persist_dir).expanduser(), model=self.model, encoder=encoder, encoder_kwargs=encoder_kwargs
            )
            self._owns_index = True
        else:
            raise ValueError(
                "DocPCRetriever needs index=DocPCIndex(...) or persist_dir=...; "
                "to index PDFs use DocPCRetriever.from_pdfs"
            )

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_pdfs(
        cls,
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
        encoder_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> DocPCRetriever:
        """Index PDF files and folders and return a retriever over them.

        With ``persist_dir`` the store is created there, or reopened and
        extended (unchanged files are skipped); without it a temporary store
        is used and deleted by :meth:`close`. ``strategy`` (default
        ``"first"``) and ``pages`` (K, default 4), or a full ``settings``, apply to new stores. Files
        that cannot be indexed are logged and skipped (see
        ``retriever.index.last_report``). The retriever holds the store's
        writer lock until :meth:`close`. ``kwargs`` are retriever fields (k, filter, ...).
        """
        index = DocPCIndex.from_pdfs(
            path_list(paths),
            persist_dir,
            model=model,
            encoder=encoder,
            settings=settings,
            strategy=strategy,
            pages=pages,
            password=password,
            progress=progress,
            encoder_kwargs=encoder_kwargs,
        )
        try:
            retriever = cls(index=index, password=password, **kwargs)
        except BaseException:
            index.close()
            raise
        retriever._owns_index = True
        return retriever

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
        """Open a store read-only (written by the core, the CLI or another retriever)."""
        return cls(
            persist_dir=str(persist_dir),
            model=str(model) if model is not None else None,
            encoder=encoder,
            encoder_kwargs=encoder_kwargs,
            **kwargs,
        )

    @property
    def index(self) -> DocPCIndex:
        """The underlying DocPC index (search, add PDFs, info)."""
        return self._index

    # -------------------------------------------------------------- retrieval
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
        query = check_query(query)
        unknown = set(kwargs) - _IGNORED_KWARGS
        if unknown:
            raise TypeError(
                f"DocPCRetriever got unexpected keyword arguments {sorted(unknown)}; it accepts k, filter and rerank"
            )
        top_k = self.k if k is None else k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"k must be an integer >= 0, got {top_k!r}")
        where = self.filter if filter is None else filter
        filters = dict(where) if where else None
        # The core serialises reranking and PDF rendering itself (PyMuPDF is not thread-safe).
        results = self._index.search(
            query,
            top_k,
            filters=filters,
            rerank=self.rerank if rerank is None else rerank,
            rerank_top_n=self.rerank_top_n,
            page_budget=self.page_budget,
            grid_weight=self.grid_weight,
            password=self.password,
        )
        logger.debug("DocPC retrieved %d documents for %r", len(results), query)
        return self._to_documents(results)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
        rerank: bool | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The sync search in a worker thread, so the event loop keeps running while the query encodes."""
        return await asyncio.to_thread(
            self._get_relevant_documents,
            query,
            run_manager=run_manager.get_sync(),
            k=k,
            filter=filter,
            rerank=rerank,
            **kwargs,
        )

    def _to_documents(self, results: list[SearchResult]) -> list[Document]:
        if not results:
            return []
        texts = self._index.store.texts([r.id for r in results])
        docs: list[Document] = []
        for r in results:
            metadata = result_metadata(r)
            if self.return_images == "grid":
                grid = self._grid_png(r)
                if grid is not None:
                    metadata["image_base64"] = b64_png(grid)
                    metadata["image_mime_type"] = IMAGE_MIME_TYPE
            elif self.return_images == "pages":
                pages = self._index.render_pages(r.id, dpi=self.page_dpi, password=self.password)
                metadata["page_images_base64"] = [b64_png(image) for _, image, _ in pages]
                metadata["image_mime_type"] = IMAGE_MIME_TYPE
            docs.append(Document(id=r.id, page_content=texts.get(r.id, ""), metadata=metadata))
        return docs

    def _grid_png(self, r: SearchResult) -> bytes | None:
        """The stored grid PNG; None for page-mode stores, which keep no grid (warned once)."""
        try:
            return self._index.grid_image_bytes(r.id)
        except KeyError:
            if r.metadata.get("mode") != "page":
                raise
            if not self._warned_no_grid:
                logger.warning(
                    "store %s is page-mode: it has no grid images; use return_images='pages'", self._index.path
                )
                self._warned_no_grid = True
            return None

    # ---------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Close the index when this retriever opened it (from_pdfs, from_persist_dir, persist_dir=...)."""
        if self._owns_index:
            self._index.close()

    def __enter__(self) -> DocPCRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
