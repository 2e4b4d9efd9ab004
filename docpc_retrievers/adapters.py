"""The one layer both framework integrations stand on: options, one retrieval call, metadata, images, loading.

The LlamaIndex and LangChain packages present the same results in their own
types. Everything else is decided once, here: which options a retriever has
and how they are checked and saved (:class:`RetrieverOptions`), how a query
becomes hits with text and image bytes (:func:`retrieve`), what a result's
metadata holds (:func:`result_metadata`), how a store is opened or built
(:func:`open_index`, :func:`build_index`) and how loaders compose PDFs
without a model (:func:`compose_pdfs`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, field, make_dataclass, replace
from typing import Any

from docpc_retrievers.config import EncoderOptions, GridSpec, IndexSettings, SearchOptions, folders
from docpc_retrievers.documents.discovery import discover_pdfs
from docpc_retrievers.documents.represent import RepresentedDocument, represent_pdf
from docpc_retrievers.documents.user_metadata import UserMetadata, resolve_user_metadata
from docpc_retrievers.encoders import Encoder
from docpc_retrievers.errors import DocumentNotFoundError, PDFLoadError
from docpc_retrievers.image_bytes import MIME_TYPES, b64_png, convert_image, png_bytes
from docpc_retrievers.index import DocPCIndex
from docpc_retrievers.options import (
    BY_NAME, DEFAULT_PAGE_DPI, IMAGE_FORMATS, OPTIONS, RETURN_IMAGES, ImageFormat, ReturnImages,
)
from docpc_retrievers.queries import check_query
from docpc_retrievers.results import Hit, SearchResult
from docpc_retrievers.grid_previews import GRID_MIME_TYPE
from docpc_retrievers.store.layout import StoreLayout

__all__ = [
    "DEFAULT_PAGE_DPI",
    "DROPPED_METADATA_KEYS",
    "GRID_MIME_TYPE",
    "IMAGE_FORMATS",
    "IMAGE_MIME_TYPE",
    "ImageFormat",
    "PathLike",
    "RETURN_IMAGES",
    "RetrieverOptions",
    "ReturnImages",
    "b64_png",
    "BUILD_OPTIONS",
    "build_index",
    "check_known",
    "check_query",
    "merge_search_kwargs",
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

#: Images the adapters encode themselves (rendered pages, loaders' grids); stored grids are ``GRID_MIME_TYPE``.
IMAGE_MIME_TYPE = "image/png"

#: Stored keys left out of results: the visual-token geometry only the core's evidence code reads.
DROPPED_METADATA_KEYS: frozenset[str] = frozenset({"token_grid"})

_OPTIONS_FORMAT = 1
#: Keys of option files written by version 0.1 (LlamaIndex's persist).
_LEGACY_NAMES = {"similarity_top_k": "top_k", "where": "filters"}
_NULLABLE = frozenset(o.name for o in OPTIONS if o.nullable)
"""Options for which None is a value (not "leave the default")."""


class _OptionsBehaviour:
    """What :class:`RetrieverOptions` does; its fields are :data:`~docpc_retrievers.options.OPTIONS`."""

    password: str | None

    def __post_init__(self) -> None:
        for option in OPTIONS:
            if option.check is not None:
                option.check(getattr(self, option.name))
        self.search_options()  # top_k, filters, aggregate, candidates, under and the rerank settings fail now

    @classmethod
    def from_framework(
        cls, values: Mapping[str, Any], names: Mapping[str, str], *, password: str | None = None
    ) -> RetrieverOptions:
        """Options from a retriever's own attribute names (``names``: framework name -> core name).

        Errors name the option as the framework spells it (``similarity_top_k``, ``k``, ...).
        """
        core = {names.get(k, k): v for k, v in values.items() if v is not None or names.get(k, k) in _NULLABLE}
        try:
            return RetrieverOptions(password=password, **core)
        except (TypeError, ValueError) as exc:
            message = str(exc)
            for framework, name in names.items():
                if framework != name:
                    message = re.sub(rf"\b{name}\b", framework, message)
            raise type(exc)(message) from None

    def search_options(self) -> SearchOptions:
        """These options as the core's :class:`SearchOptions` (the options a search uses, by name)."""
        used = {o.name: getattr(self, o.name) for o in OPTIONS if o.search}
        return SearchOptions.build(used.pop("top_k"), password=self.password, **used)

    def override(self, **changes: Any) -> RetrieverOptions:
        """A copy with the given options changed; None values leave an option as it is."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form saved with a store (without the password)."""
        data = asdict(self)  # type: ignore[call-overload]
        data.pop("password")
        data["filters"] = dict(data["filters"]) if data["filters"] else None
        data["under"] = list(folders(data["under"])) or None
        return {"format": _OPTIONS_FORMAT, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetrieverOptions:
        """Rebuild saved options; unknown keys are ignored, a newer format is refused."""
        if data.get("format", _OPTIONS_FORMAT) != _OPTIONS_FORMAT:
            raise ValueError(f"retriever options format {data.get('format')!r} is not supported")
        renamed = {_LEGACY_NAMES.get(k, k): v for k, v in data.items()}
        return RetrieverOptions(**{k: v for k, v in renamed.items() if k in BY_NAME})


RetrieverOptions = make_dataclass(
    "RetrieverOptions",
    [(o.name, o.annotation, field(default=o.default)) for o in OPTIONS]
    + [("password", str | None, field(default=None, repr=False))],
    bases=(_OptionsBehaviour,),
    frozen=True,
)
RetrieverOptions.__module__ = __name__  # make_dataclass takes ``module=`` only from Python 3.12
RetrieverOptions.__doc__ = (
    "The options both retrievers expose (:data:`docpc_retrievers.options.OPTIONS`, one field each, plus "
    "``password``, which opens encrypted sources and is never saved), checked when the retriever is built."
)


def check_known(given: Iterable[str], known: Iterable[str], who: str) -> None:
    """Raise ``TypeError`` naming each unknown option and listing the known ones (no option is ever dropped silently)."""
    known_set = set(known)
    unknown = sorted(set(given) - known_set)
    if unknown:
        raise TypeError(
            f"{who} got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known options: {', '.join(sorted(known_set))}"
        )


def merge_search_kwargs(
    given: Mapping[str, Any], search_kwargs: Mapping[str, Any] | None, fields: Iterable[str], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """Options from a ``search_kwargs`` dict (keys ``fields`` or their ``aliases``); an option given both ways with
    different values raises ``ValueError``, an unknown key ``TypeError``."""
    if not search_kwargs:
        return {}
    check_known(search_kwargs, [*fields, *aliases], "search_kwargs")
    out: dict[str, Any] = {}
    for key, value in search_kwargs.items():
        name = aliases.get(key, key)
        if (name in given and given[name] != value) or (name in out and out[name] != value):
            raise ValueError(f"{name} is given twice with different values: {given.get(name, out.get(name))!r} and "
                             f"search_kwargs[{key!r}]={value!r}; pass it once")
        out[name] = value
    return out


def path_list(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    """One path or many, as a list (a bare string is one path, not its characters)."""
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def clean_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Stored metadata without None values (frameworks would print them as 'None') or internal keys."""
    return {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in metadata.items()
        if v is not None and k not in DROPPED_METADATA_KEYS
    }


def result_metadata(result: SearchResult) -> dict[str, Any]:
    """A search result's metadata: stored keys plus score, rank, evidence pages and rerank details.

    ``evidence_pages`` lists 1-based page numbers, the page behind most of the
    score first; after reranking ``grid_score`` is the score before fusion.
    """
    metadata = clean_metadata(result.metadata)
    metadata.update(score=result.score, rank=result.rank)
    if result.evidence_pages:
        metadata["evidence_pages"] = [e.page for e in result.evidence_pages]
    if result.reranked:
        metadata["reranked"] = True
        metadata["grid_score"] = result.grid_score
    elif result.rerank_error:
        metadata["reranked"] = False
        metadata["rerank_error"] = result.rerank_error
    return metadata


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
    given = {_LEGACY_NAMES.get(k, k) for k in data}
    return {k: v for k, v in saved.items() if k in given and k != "password"}


class _PageModeWarning:
    """Warns once per index that a page-mode store has no grid images."""

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def __call__(self, index: DocPCIndex) -> None:
        if id(index) not in self._warned:
            self._warned.add(id(index))
            logger.warning("store %s is page-mode: it has no grid images; use return_images='pages'", index.path)


_warn_page_mode = _PageModeWarning()


def retrieve(index: DocPCIndex, query: object, options: RetrieverOptions) -> list[Hit]:
    """Search ``index`` and return hits with text, metadata and the images ``options`` ask for, best first."""
    text_query = check_query(query)
    for _attempt in range(3):
        results = above_thresholds(index.search_with([text_query], options.search_options())[0], options)
        logger.debug("DocPC retrieved %d documents for %r", len(results), text_query)
        if not results:
            return []
        texts = index.store.texts([r.id for r in results])
        try:
            return [_hit(index, r, texts.get(r.id, ""), options) for r in results]
        except DocumentNotFoundError:  # deleted by another writer after the search: search again
            logger.debug("a hit was deleted while its image was read; searching again")
    return [h for r in results if (h := _live_hit(index, r, texts.get(r.id, ""), options)) is not None]


def above_thresholds(results: list[SearchResult], options: RetrieverOptions) -> list[SearchResult]:
    """The results at or above ``score_threshold`` and at or above ``min_score_ratio`` of the top score."""
    if options.score_threshold is not None:
        results = [r for r in results if r.score >= options.score_threshold]
    if options.min_score_ratio is not None and results and results[0].score > 0:
        results = [r for r in results if r.score >= options.min_score_ratio * results[0].score]
    return results


def _live_hit(index: DocPCIndex, result: SearchResult, text: str, options: RetrieverOptions) -> Hit | None:
    try:
        return _hit(index, result, text, options)
    except DocumentNotFoundError:
        return None


def _hit(index: DocPCIndex, result: SearchResult, text: str, options: RetrieverOptions) -> Hit:
    hit = _raw_hit(index, result, text, options)
    if options.image_format is None or (hit.image is None and not hit.pages):
        return hit
    image, mime = (None, hit.image_mime_type) if hit.image is None else convert_image(hit.image, options.image_format)
    pages = [(n, convert_image(data, options.image_format)[0], t) for n, data, t in hit.pages]
    return replace(hit, image=image, pages=pages, image_mime_type=MIME_TYPES[options.image_format])


def _raw_hit(index: DocPCIndex, result: SearchResult, text: str, options: RetrieverOptions) -> Hit:
    metadata = result_metadata(result)
    if options.return_images == "pages":
        # One result per document either way: its image is the page behind most of the score, and every
        # selected page comes along (``pages``), so top-k counts documents in both integrations.
        pages = index.render_pages(result.id, dpi=options.page_dpi, password=options.password)
        rendered = [(n, png_bytes(image), t) for n, image, t in pages]
        best = result.evidence_pages[0].page if result.evidence_pages else (rendered[0][0] if rendered else None)
        image = next((data for n, data, _ in rendered if n == best), None)
        metadata.update(page_numbers=[n for n, _, _ in rendered], image_page=best)
        return Hit(result, text, metadata, image=image, pages=rendered, image_mime_type=IMAGE_MIME_TYPE)
    if options.return_images == "evidence":
        page_mode = result.metadata.get("mode") == "page"  # page pictures need a page; a grid's overlay needs none
        explanation = result.explain(password=options.password, top_pages=1 if page_mode else 0)
        picture = explanation.overlay or next((p.overlay for p in explanation.pages), None)
        if picture is not None:
            return Hit(result, text, metadata, image=png_bytes(picture), image_mime_type=IMAGE_MIME_TYPE)
        return Hit(result, text, metadata)
    if options.return_images == "grid":
        if result.metadata.get("mode") == "page":
            _warn_page_mode(index)
        else:
            return Hit(result, text, metadata, image=index.grid_image_bytes(result.id), image_mime_type=GRID_MIME_TYPE)
    return Hit(result, text, metadata)


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
