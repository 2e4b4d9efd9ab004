"""DocPCIndex: the one object users hold, a thin facade over indexing (:mod:`.indexing`), search
(:mod:`.search`), explanations (:mod:`.explain`) and the store (:mod:`.store`); see docs/architecture.md."""

from __future__ import annotations

import json
from dataclasses import replace
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from docpc_retrievers import catalog
from docpc_retrievers.config import DEFAULT_MAX_FILE_BYTES, DEFAULT_PAGE_SIZE, DEFAULT_TOP_K, MODES
from docpc_retrievers.config import EncoderOptions, IndexSettings, with_previews
from docpc_retrievers.documents.composition import GridLayout
from docpc_retrievers.documents.discovery import require_pdfs
from docpc_retrievers.documents.represent import compose_pdf, render_source_pages
from docpc_retrievers.documents.user_metadata import UserMetadata
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.encoders.loader import EncoderLoader
from docpc_retrievers.errors import DocumentNotFoundError
from docpc_retrievers.explain import Explainer, Explanation
from docpc_retrievers.indexing import Indexer
from docpc_retrievers.rerank import PageReranker
from docpc_retrievers.results import IndexReport, SearchResult
from docpc_retrievers.retrievers.options import SEARCH_OPTIONS, SearchOptions
from docpc_retrievers.search import Searcher, check_queries
from docpc_retrievers.grid_previews import GridImageStore
from docpc_retrievers.store.layout import StoreLayout
from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.shards import ShardedStore, open_store

__all__ = ["DEFAULT_MAX_FILE_BYTES", "DEFAULT_PAGE_SIZE", "MODES", "DocPCIndex", "IndexSettings"]


def recorded_index_settings(path: str | os.PathLike[str], *, host: str | None = None, port: int = 8000,
                            collection: str = "docpc") -> dict[str, Any] | None:
    """The index settings an existing store recorded (None for a new store): options given for another run are laid
    over these, so what a run does not mention (the pool factor, the page count) stays as the store has it."""
    layout = StoreLayout.at(path)
    if host is None and not layout.manifest.exists():
        return None
    try:
        with open_store(layout.root, host=host, port=port, collection=collection) as store:
            recorded = store.settings.get("index")
    except Exception:  # not a store yet (an empty folder, a collection not created): the new-store defaults
        return None
    return dict(recorded) if isinstance(recorded, dict) else None


class DocPCIndex:
    """A persistent document-level visual index: ``DocPCIndex(path)`` reads, ``writable=True`` writes.

    The encoder loads on first use, from the store's model unless ``model``/``encoder`` is given
    (another raises :class:`ModelMismatchError`); ``encoder_kwargs`` configure it. ``path=None``: a
    temporary store; ``host``/``port``: a Chroma server; ``store_grids``: ``settings.grid_previews`` (None: recorded).
    ``shards``: a new store in this many shards (store/shards.py: each document in the shard its id hashes to, a
    search merged from the shards' exact top k); an existing store's recorded count is found by itself.
    ``searchers``: each shard's searcher (``docpc serve-shard``), in shard order: searches are answered by them and
    merged here, so this process holds no shard's data (``searcher_token``: their bearer token).
    ``chroma_process``: a writable embedded store's Chroma served from a child ``chroma run`` on loopback while the
    index is open, so Chroma's writes do not hold this process's Python lock (store/chroma_process.py).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        model: str | os.PathLike[str] | None = None,
        encoder: Encoder | None = None,
        settings: IndexSettings | None = None,
        writable: bool = False,
        host: str | None = None,
        port: int = 8000,
        collection: str = "docpc",
        encoder_kwargs: EncoderOptions | Mapping[str, Any] | None = None,
        store_grids: bool | None = None,
        shards: int | None = None,
        searchers: Sequence[str] | None = None,
        searcher_token: str | None = None,
        chroma_process: bool = False,
    ) -> None:
        self._encoders = EncoderLoader(
            encoder=encoder, model=model, options=encoder_kwargs,
            recorded=lambda: self._store.settings.get("encoder") or {},
            check=lambda e: self._store.check_settings(e.settings(), section="encoder"),
        )
        self._temp_dir = tempfile.mkdtemp(prefix="docpc-index-") if path is None else None
        self.layout = StoreLayout.at(self._temp_dir or path)  # type: ignore[arg-type]
        self.path: Path = self.layout.root
        writable = writable or self._temp_dir is not None
        remote = {"searchers": searchers, "token": searcher_token} if searchers else {}
        self._store = open_store(self.path, shards=shards, host=host, port=port, collection=collection,
                                 writable=writable, chroma_process=chroma_process, **remote)
        try:
            recorded = self._store.settings.get("index")
            settings = with_previews(settings, recorded, store_grids)
            if settings is not None and recorded:
                self._store.check_settings(settings.to_dict(), section="index")
            if encoder is not None:
                self._store.check_settings(encoder.settings(), section="encoder")
        except BaseException:
            self._store.close()
            raise
        self.settings: IndexSettings = settings or (IndexSettings.from_dict(recorded) if recorded else IndexSettings())
        self.grids = GridImageStore(self._store, self.settings, store_grids=self.settings.grid_previews)
        self._indexer = Indexer(self._store, self.grids, self.settings, self._encoders.get,
                                encoder_recipe=self._encoders.recipe, check_encoder=self._encoders.check)
        self.explainer = Explainer(self._store, self.grids, self.settings, self._encoders.get)
        self._searcher = Searcher(self._store, self.layout, self.settings, self._encoders.get, self.explainer)
        self.last_report = IndexReport()

    @classmethod
    def from_pdfs(
        cls, paths: Iterable[str | os.PathLike[str]], path: str | os.PathLike[str] | None = None, *,
        strategy: str | None = None, pages: int | None = None, password: str | None = None, progress: bool = False,
        workers: int | None = None, prune: bool = False, metadata: UserMetadata = None, **kwargs: Any,
    ) -> DocPCIndex:
        """Build or extend a (writable) index from PDF files and folders; failures go to :attr:`last_report`.

        ``strategy``/``pages``: shortcuts for ``settings``; ``workers``: render processes; ``prune`` and
        ``metadata``: as :meth:`Indexer.add_pdfs`; other ``kwargs``: the constructor.
        """
        if kwargs.get("settings") is None and (strategy is not None or pages is not None):
            # The shortcuts change page selection only: an existing store keeps what else it recorded (its pool
            # factor above all), so they are laid over its settings, not over the defaults of new stores.
            recorded = recorded_index_settings(path, **{k: kwargs[k] for k in ("host", "port", "collection")
                                                        if k in kwargs}) if path is not None else None
            base = IndexSettings.from_dict(recorded) if recorded else IndexSettings()
            kwargs["settings"] = replace(base, strategy=strategy or "first", pages=pages or 4, grid=None)
        paths = list(paths)
        require_pdfs(paths)  # before the store exists: a run over folders with no PDF creates nothing
        index = cls(path, writable=True, **kwargs)
        try:
            index.add_pdfs(paths, password=password, progress=progress, workers=workers, prune=prune, metadata=metadata)
        except BaseException:
            index.close()
            raise
        return index

    @property
    def store(self) -> MultiVectorStore | ShardedStore:
        """The multi-vector store (records, vectors, first-stage search)."""
        return self._store

    @property
    def model(self) -> str:
        """The checkpoint this index encodes with."""
        return self._encoders.model

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first use and checked against the store's model."""
        return self._encoders.get()

    def add_pdfs(self, paths: Iterable[str | os.PathLike[str]], **options: Any) -> IndexReport:
        """Index PDF files and folders; see :meth:`Indexer.add_pdfs` for ``password``, ``batch_size``, ``progress``, ..."""
        if self._encoders.must_check() and self._indexer.process_recipe(options.get("encode_in")) is not None:
            options["check_model_first"] = True  # loaded and checked in the run's encoding process, before anything
        else:
            self._encoders.check_given()
        self.last_report = self._indexer.add_pdfs(paths, **options)
        return self.last_report

    def resolve_ids(self, ids_or_paths: Iterable[str | os.PathLike[str]], *, where: Mapping[str, Any] | None = None) -> list[str]:
        """Stored ids for document ids, source paths, folders (every document under it) and ``where``; unknown ones dropped."""
        return catalog.resolve_ids(self._store, ids_or_paths, where=where)

    def delete(self, ids_or_paths: Iterable[str | os.PathLike[str]] = (), *, where: Mapping[str, Any] | None = None) -> int:
        """Delete documents given by id, source path or folder, and/or matching ``where``; returns how many were deleted."""
        return self._indexer.delete(catalog.resolve_ids(self._store, ids_or_paths, where=where))

    def set_metadata(self, ids_or_paths: Iterable[str | os.PathLike[str]], values: Mapping[str, Any] | None = None,
                     *, unset: Iterable[str] = ()) -> int:
        """Set ``values`` and remove the ``unset`` keys of your metadata on documents given by id, path or folder,
        without re-encoding; returns how many documents changed."""
        return self._indexer.edit_metadata(catalog.resolve_ids(self._store, ids_or_paths), values or {}, unset)

    def documents(self, where: Mapping[str, Any] | None = None, *, page: int = 500) -> Iterator[SearchResult]:
        """Every stored document (or those matching ``where``) as results with score 0, read ``page`` at a time."""
        return catalog.documents(self._store, where, page=page)

    def search(self, query: str, top_k: int = DEFAULT_TOP_K, **options: Any) -> list[SearchResult]:
        """Rank documents for a text query, best first. The keyword options are the schema's search options
        (listed below, and ``password``, which opens encrypted sources when pages are rendered)."""
        return self.search_with([query], SearchOptions.build(top_k, **options))[0]

    def search_batch(self, queries: Sequence[str], top_k: int = DEFAULT_TOP_K, **options: Any) -> list[list[SearchResult]]:
        """:meth:`search` for several queries, encoded together (the same keyword options)."""
        if isinstance(queries, str):
            raise TypeError("search_batch expects a list of queries")
        return self.search_with(queries, SearchOptions.build(top_k, **options))

    def search_with(self, queries: Sequence[str], options: SearchOptions) -> list[list[SearchResult]]:
        """Search with options checked once already (:class:`SearchOptions`: what the retrievers, the command line
        and the server build); the queries are checked here."""
        return self._searcher.search_batch(check_queries(queries), options)

    @property
    def reranker(self) -> PageReranker:
        """The grid-then-page reranker (its ``pages_encoded`` counts encoder work)."""
        return self._searcher.reranker

    def clear_page_cache(self) -> int:
        """Delete every page embedding cached for reranking; returns how many were removed."""
        return self._searcher.clear_page_cache()

    def __len__(self) -> int:
        return self._store.count()

    def get(self, ids: Sequence[str]) -> list[SearchResult]:
        """Stored documents by id, as results with score 0 (unknown ids are skipped)."""
        return [SearchResult.from_metadata(d.id, 0.0, 0, d.metadata) for d in self._store.get(ids)]

    def metadata(self, doc_id: str) -> dict[str, Any]:
        """The stored metadata of one document; :class:`DocumentNotFoundError` for an unknown id."""
        found = self._store.get([doc_id])
        if not found:
            raise DocumentNotFoundError(doc_id, self.path)
        return found[0].metadata

    def text(self, doc_id: str) -> str:
        """The text layer of the document's selected pages, as indexed."""
        return self._store.texts([doc_id]).get(doc_id, "") if self.metadata(doc_id) is not None else ""

    def grid_image(self, doc_id: str) -> Image.Image:
        """The composed grid image stored for a document."""
        return self.grids.image(doc_id)

    def grid_image_bytes(self, doc_id: str) -> bytes:
        """The stored grid preview (WebP) exactly as written: no decode and re-encode for framework results."""
        return self.grids.read_bytes(doc_id)

    def grid_layout(self, doc_id: str) -> GridLayout:
        """Which cell of a document's grid holds which page, in pixels."""
        return GridLayout.from_dict(json.loads(self.metadata(doc_id)["layout"]))

    def render_pages(self, doc_id: str, *, dpi: float | None = None, password: str | None = None) -> list[tuple[int, Image.Image, str]]:
        """The document's selected pages rendered from its source PDF: ``(page number, image, text)``."""
        return render_source_pages(doc_id, self.metadata(doc_id), dpi=dpi, password=password)

    #: One PDF's grid as the index makes it, not stored: ``(document id, grid, metadata, text)``.
    compose_pdf = staticmethod(compose_pdf)

    def explain(self, query: str, doc_id: str, **options: Any) -> Explanation:
        """Why ``doc_id`` matched ``query``: token terms on the grid, page shares, overlay, crops (:meth:`Explainer.explain`)."""
        return self.explainer.explain(query, doc_id, **options)

    def as_retriever(self, framework: str = "langchain", **options: Any) -> Any:
        """A LangChain (``"langchain"``) or LlamaIndex (``"llamaindex"``) retriever over this index, with its options
        (``k``/``similarity_top_k``, ``filter``/``filters``, ``rerank``, ...); the index stays open until closed."""
        from docpc_retrievers.retrievers.plugins import framework_retriever

        return framework_retriever(self, framework, options)

    def info(self) -> dict[str, Any]:
        """What the store holds and how it was built."""
        stats = self._searcher.page_cache_stats()
        return self._store.describe(model=self.model, settings=self.settings.to_dict(), page_cache=stats)

    def close(self) -> None:
        """Release the store (and its writer lock); delete it if it was temporary."""
        self._searcher.close()
        self.grids.close()
        self._store.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> DocPCIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _search_signature() -> None:
    """``search`` and ``search_batch`` show every search option of the schema by name, default and meaning (their
    keywords are checked by :class:`SearchOptions`, so no list of them is kept here)."""
    import inspect

    p = inspect.Parameter
    options = [p(o.name, p.KEYWORD_ONLY, default=o.default, annotation=o.annotation) for o in SEARCH_OPTIONS
               if o.name != "top_k"] + [p("password", p.KEYWORD_ONLY, default=None, annotation=str | None)]
    listed = "\n".join(f"        {o.name} (default {o.default!r}): {' '.join(o.doc.split())}" for o in SEARCH_OPTIONS)
    for method, first in ((DocPCIndex.search, ("query", str)), (DocPCIndex.search_batch, ("queries", Sequence[str]))):
        head = [p("self", p.POSITIONAL_OR_KEYWORD), p(first[0], p.POSITIONAL_OR_KEYWORD, annotation=first[1]),
                p("top_k", p.POSITIONAL_OR_KEYWORD, default=DEFAULT_TOP_K, annotation=int)]
        method.__signature__ = inspect.Signature(head + options)  # type: ignore[attr-defined]
        method.__doc__ = f"{method.__doc__}\n\n        Options:\n\n{listed}\n"


_search_signature()
