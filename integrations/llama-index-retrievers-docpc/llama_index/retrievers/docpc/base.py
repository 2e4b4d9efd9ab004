"""``DocPCRetriever``: LlamaIndex retriever over a DocPC index, one ``ImageNode`` per ranked PDF.

Why: LlamaIndex users compose retrievers into query engines and evaluators;
this adapter makes a :class:`docpc_retrievers.DocPCIndex` one of them. Each
result carries the document's composed grid (base64 PNG) so a multimodal LLM
can read it, plus the text of the selected pages for text-only LLMs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from docpc_retrievers import DocPCIndex, IndexSettings, SearchResult
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.rerank import RerankSettings
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import ImageNode, NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo
from llama_index.core.vector_stores.types import MetadataFilters

from ._common import (
    EXCLUDED_EMBED_METADATA_KEYS,
    EXCLUDED_LLM_METADATA_KEYS,
    IMAGE_MIMETYPE,
    b64_png,
    check_query,
    result_metadata,
)
from .filters import metadata_filters_to_where

__all__ = ["CONFIG_FILE", "DEFAULT_PAGE_DPI", "DEFAULT_TOP_K", "DocPCRetriever", "ReturnImages"]

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 5
#: Resolution of on-demand page images (``return_images="pages"``).
DEFAULT_PAGE_DPI = 144.0
#: Retriever settings written by :meth:`DocPCRetriever.persist` next to the store's own files.
CONFIG_FILE = "docpc_retriever.json"
_CONFIG_FORMAT = 1

#: ``"grid"``: the composed grid; ``"pages"``: the selected pages rendered from the source PDF; None: no image.
ReturnImages = Literal["grid", "pages"] | None
_RETURN_IMAGES = ("grid", "pages", None)

_SAVED_SETTINGS = (
    "similarity_top_k",
    "return_images",
    "page_dpi",
    "rerank",
    "rerank_top_n",
    "page_budget",
    "grid_weight",
)

PathLike = str | os.PathLike[str]


def _path_list(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


class DocPCRetriever(BaseRetriever):
    """Rank whole PDFs by visual late-interaction (MaxSim) over their composed page grids.

    Build one with :meth:`from_pdfs` (indexes PDFs), :meth:`from_persist_dir`
    (opens a store), :meth:`from_defaults`, or pass an open
    :class:`~docpc_retrievers.DocPCIndex`. ``retrieve`` returns one
    :class:`NodeWithScore` per document, best first: an ``ImageNode`` whose id
    is the document id (stable across calls and processes), text is the text
    layer of the selected pages and image the grid PNG (base64).

    Args:
        index: an open DocPC index (not closed by :meth:`close` unless ``owns_index``).
        similarity_top_k: documents to return (0 returns nothing; more than
            the corpus returns the whole corpus).
        filters: ``MetadataFilters`` (EQ, NE, GT, GTE, LT, LTE, IN, NIN,
            CONTAINS, ANY, ALL with AND/OR) or a Chroma ``where`` dict.
        return_images: ``"grid"`` (default), ``"pages"`` (one ImageNode per
            selected page, rendered from the source PDF on demand, node id
            ``<doc id>#page=<n>``) or None (text only). Page-mode stores have
            no grid: their nodes carry no image unless ``"pages"`` is asked for.
        rerank: grid-then-page reranking: the top ``rerank_top_n`` (default
            20) documents are rescored from up to ``page_budget`` (default 4)
            of their pages encoded at full resolution, fused with the grid
            score by ``grid_weight`` (default 0.5). Needs the source PDFs.
        page_dpi: resolution of page images in ``"pages"`` mode.
        password: opens encrypted source PDFs (``"pages"`` mode, reranking).
        owns_index: close the index in :meth:`close`.

    Node metadata: the stored keys (``source``, ``file_name``, ``title``,
    ``total_pages``, ``selected_pages`` (1-based), ``selected_labels``,
    ``strategy``, ``layout``, ...) plus ``score``, ``rank``,
    ``evidence_pages`` (1-based, the page behind most of the score first) and,
    after reranking, ``reranked`` and ``grid_score``. Noisy keys are listed in
    the nodes' ``excluded_llm_metadata_keys``/``excluded_embed_metadata_keys``.
    """

    def __init__(
        self,
        index: DocPCIndex,
        *,
        similarity_top_k: int = DEFAULT_TOP_K,
        filters: MetadataFilters | Mapping[str, Any] | None = None,
        return_images: ReturnImages = "grid",
        rerank: bool = False,
        rerank_top_n: int | None = None,
        page_budget: int | None = None,
        grid_weight: float | None = None,
        page_dpi: float = DEFAULT_PAGE_DPI,
        password: str | None = None,
        owns_index: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(index, DocPCIndex):
            raise TypeError(f"index must be a docpc_retrievers.DocPCIndex, not {type(index).__name__}")
        if isinstance(similarity_top_k, bool) or not isinstance(similarity_top_k, int) or similarity_top_k < 0:
            raise ValueError(f"similarity_top_k must be an integer >= 0, got {similarity_top_k!r}")
        if return_images not in _RETURN_IMAGES:
            raise ValueError(f"return_images must be 'grid', 'pages' or None, got {return_images!r}")
        if not page_dpi > 0:
            raise ValueError(f"page_dpi must be > 0, got {page_dpi!r}")
        metadata_filters_to_where(filters)  # fail now, not at the first query
        _rerank_settings(rerank_top_n, page_budget, grid_weight)  # likewise
        self._index = index
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.return_images: ReturnImages = return_images
        self.rerank = bool(rerank)
        self.rerank_top_n = rerank_top_n
        self.page_budget = page_budget
        self.grid_weight = grid_weight
        self.page_dpi = float(page_dpi)
        self._password = password
        self._owns_index = owns_index
        self._warned_no_grid = False
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_pdfs(
        cls,
        paths: PathLike | Iterable[PathLike],
        *,
        model: PathLike | None = None,
        encoder: Encoder | None = None,
        persist_dir: PathLike | None = None,
        strategy: str | None = None,
        pages: int | None = None,
        settings: IndexSettings | None = None,
        password: str | None = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        rerank: bool = False,
        progress: bool = False,
        encoder_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> DocPCRetriever:
        """Index PDF files and folders and return a retriever over them.

        With ``persist_dir`` the store is created there, or reopened and
        extended (unchanged files are skipped); without it a temporary store
        is used and deleted by :meth:`close` (keep it with :meth:`persist`).
        ``strategy`` (default ``"first"``) and ``pages`` (K, default 4), or a
        full ``settings``, apply to new stores. Files that cannot be indexed are logged and skipped;
        see ``retriever.index.last_report``. The retriever holds the store's
        writer lock until :meth:`close`. Other ``kwargs`` go to the constructor.
        """
        index = DocPCIndex.from_pdfs(
            _path_list(paths),
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
            return cls(
                index,
                similarity_top_k=similarity_top_k,
                rerank=rerank,
                password=password,
                owns_index=True,
                **kwargs,
            )
        except BaseException:
            index.close()
            raise

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
        """Open a store read-only (as written by the core, the CLI or :meth:`persist`).

        Settings saved by :meth:`persist` (top k, filters, image mode) are
        restored; ``kwargs`` override them. The model is the store's unless
        ``model``/``encoder`` is given (a different one raises ModelMismatchError).
        """
        path = Path(persist_dir).expanduser()
        saved = _read_config(path)
        index = DocPCIndex(path, model=model, encoder=encoder, encoder_kwargs=encoder_kwargs)
        try:
            return cls(index, owns_index=True, **{**saved, **kwargs})
        except BaseException:
            index.close()
            raise

    @classmethod
    def from_defaults(
        cls,
        index: DocPCIndex | None = None,
        *,
        persist_dir: PathLike | None = None,
        model: PathLike | None = None,
        encoder: Encoder | None = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        **kwargs: Any,
    ) -> DocPCRetriever:
        """LlamaIndex-style factory: from an open ``index``, else from ``persist_dir``."""
        if index is not None:
            if persist_dir is not None or model is not None or encoder is not None:
                raise ValueError("pass either index or persist_dir (with model/encoder), not both")
            return cls(index, similarity_top_k=similarity_top_k, **kwargs)
        if persist_dir is None:
            raise ValueError(
                "DocPCRetriever.from_defaults needs index=... or persist_dir=...; to index PDFs use from_pdfs"
            )
        return cls.from_persist_dir(
            persist_dir, model=model, encoder=encoder, similarity_top_k=similarity_top_k, **kwargs
        )

    # -------------------------------------------------------------- persistence
    @property
    def index(self) -> DocPCIndex:
        """The underlying DocPC index (search, add PDFs, info)."""
        return self._index

    def persist(self, persist_dir: PathLike) -> None:
        """Save the store and this retriever's settings to ``persist_dir``; reopen with :meth:`from_persist_dir`.

        When ``persist_dir`` is the store's own directory only the settings are
        written; otherwise the store (records, vectors, grid images) is copied
        there, which must be empty or absent. Do not write to the store while
        it is being copied.
        """
        target = Path(persist_dir).expanduser().resolve()
        source = self._index.path
        if target != source:
            if self._index.store.host is not None:
                raise NotImplementedError(
                    "persist() copies a local store; this one keeps its records on a Chroma server "
                    f"({self._index.store.host}). Point a new retriever at the same server instead."
                )
            if target.exists() and any(target.iterdir()):
                raise FileExistsError(f"{target} is not empty; persist into a new or empty directory")
            shutil.copytree(
                source,
                target,
                ignore=shutil.ignore_patterns("write.lock", ".tmp-*", "page_cache", CONFIG_FILE),
                dirs_exist_ok=True,
            )
            logger.info("copied DocPC store %s to %s", source, target)
        _write_config(target, self._config())

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"format": _CONFIG_FORMAT, **{k: getattr(self, k) for k in _SAVED_SETTINGS}}
        if isinstance(self.filters, MetadataFilters):
            config["metadata_filters"] = self.filters.model_dump(mode="json")
        elif self.filters is not None:
            config["where"] = dict(self.filters)
        return config

    # -------------------------------------------------------------- retrieval
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = check_query(query_bundle.query_str)
        where = metadata_filters_to_where(self.filters)
        # The core serialises reranking and PDF rendering itself (PyMuPDF is not thread-safe).
        results = self._index.search(
            query,
            self.similarity_top_k,
            filters=where,
            rerank=self.rerank,
            rerank_top_n=self.rerank_top_n,
            page_budget=self.page_budget,
            grid_weight=self.grid_weight,
            password=self._password,
        )
        logger.debug("DocPC retrieved %d documents for %r", len(results), query)
        return self._to_nodes(results)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Run :meth:`_retrieve` in a worker thread so the event loop keeps running while the query encodes."""
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def _to_nodes(self, results: list[SearchResult]) -> list[NodeWithScore]:
        if not results:
            return []
        texts = self._index.store.texts([r.id for r in results])
        out: list[NodeWithScore] = []
        for r in results:
            metadata = result_metadata(r)
            if self.return_images == "pages":
                out.extend(self._page_nodes(r, metadata))
                continue
            image = self._grid_b64(r) if self.return_images == "grid" else None
            node = ImageNode(
                id_=r.id,
                text=texts.get(r.id, ""),
                image=image,
                image_mimetype=IMAGE_MIMETYPE if image is not None else None,
                metadata=metadata,
                excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
                excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=r.id)},
            )
            out.append(NodeWithScore(node=node, score=r.score))
        return out

    def _grid_b64(self, r: SearchResult) -> str | None:
        """The stored grid as base64; None for page-mode stores, which keep no grid."""
        try:
            return b64_png(self._index.grid_image_bytes(r.id))
        except KeyError:
            if r.metadata.get("mode") != "page":
                raise
            if not self._warned_no_grid:
                logger.warning(
                    "store %s is page-mode: it has no grid images; use return_images='pages'", self._index.path
                )
                self._warned_no_grid = True
            return None

    def _page_nodes(self, r: SearchResult, metadata: dict[str, Any]) -> list[NodeWithScore]:
        labels = list(metadata.get("selected_labels") or [])
        nodes = []
        pages = self._index.render_pages(r.id, dpi=self.page_dpi, password=self._password)
        for position, (number, image, text) in enumerate(pages):
            page_meta = dict(metadata)
            page_meta["page_number"] = number
            if position < len(labels):
                page_meta["page_label"] = labels[position]
            node = ImageNode(
                id_=f"{r.id}#page={number}",
                text=text.strip(),
                image=b64_png(image),
                image_mimetype=IMAGE_MIMETYPE,
                metadata=page_meta,
                excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
                excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=r.id)},
            )
            nodes.append(NodeWithScore(node=node, score=r.score))
        return nodes

    # ---------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Close the index when this retriever opened it (from_pdfs / from_persist_dir)."""
        if self._owns_index:
            self._index.close()

    def __enter__(self) -> DocPCRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._index.path)!r}, similarity_top_k={self.similarity_top_k}, "
            f"return_images={self.return_images!r}, rerank={self.rerank})"
        )


def _rerank_settings(top_n: int | None, page_budget: int | None, grid_weight: float | None) -> RerankSettings:
    """Validate the rerank options now (the core would only complain at the first reranked query)."""
    defaults = RerankSettings()
    return RerankSettings(
        top_n=defaults.top_n if top_n is None else top_n,
        page_budget=defaults.page_budget if page_budget is None else page_budget,
        grid_weight=defaults.grid_weight if grid_weight is None else grid_weight,
    )


def _read_config(path: Path) -> dict[str, Any]:
    """Retriever settings saved by persist(), as constructor kwargs ({} when there are none)."""
    file = path / CONFIG_FILE
    if not file.exists():
        return {}
    try:
        data = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file} is unreadable: {exc}") from exc
    if data.get("format") != _CONFIG_FORMAT:
        raise ValueError(f"{file}: retriever settings format {data.get('format')!r} is not supported")
    kwargs: dict[str, Any] = {k: data[k] for k in _SAVED_SETTINGS if k in data}
    if data.get("metadata_filters") is not None:
        kwargs["filters"] = MetadataFilters.model_validate(data["metadata_filters"])
    elif data.get("where") is not None:
        kwargs["filters"] = data["where"]
    return kwargs


def _write_config(folder: Path, config: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)
    os.replace(tmp, folder / CONFIG_FILE)
