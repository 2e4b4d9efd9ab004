"""The retriever layer: everything a framework integration needs from the core, and the only core import they make.

A change to how retrievers behave belongs in one of these modules:

* ``schema``: every option, defined once (core name, each framework's name, CLI flag, server field, default, bounds);
* ``options``: the checked options value built from the schema (:class:`SearchOptions` for a search,
  :class:`RetrieverOptions` adds how hits are presented);
* ``hits``: a query in, hits with text, metadata and pictures out (:func:`retrieve`);
* ``opening``: a store opened or built for a retriever, the one ``from_pdfs`` flow, options kept with the store;
* ``loading``: PDFs composed for document loaders, without a model;
* ``editing``: adding and deleting documents through a retriever;
* ``arguments``: unknown keywords refused by name, paths taken one or many;
* ``plugins``: ``DocPCIndex.as_retriever`` finding an installed framework's retriever.

Names load on first use, as the top package's do: the command line and the server read the schema without loading
a model's stack, and :class:`~docpc_retrievers.DocPCIndex` (which builds its searches from this package's options)
is handed on without an import cycle.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_LAZY = {
    "DEFAULT_TOP_K": "docpc_retrievers.config",
    "GridSpec": "docpc_retrievers.config",
    "UserMetadata": "docpc_retrievers.documents.user_metadata",
    "Encoder": "docpc_retrievers.encoders.protocol",
    "PDFLoadError": "docpc_retrievers.errors",
    "GRID_MIME_TYPE": "docpc_retrievers.grid_previews",
    "b64_png": "docpc_retrievers.image_bytes",
    "convert_image": "docpc_retrievers.image_bytes",
    "DocPCIndex": "docpc_retrievers.index",
    "check_query": "docpc_retrievers.queries",
    "Hit": "docpc_retrievers.results",
    "PathLike": "docpc_retrievers.retrievers.arguments",
    "check_known": "docpc_retrievers.retrievers.arguments",
    "path_list": "docpc_retrievers.retrievers.arguments",
    "StoreEditing": "docpc_retrievers.retrievers.editing",
    "DROPPED_METADATA_KEYS": "docpc_retrievers.retrievers.hits",
    "IMAGE_MIME_TYPE": "docpc_retrievers.retrievers.hits",
    "above_thresholds": "docpc_retrievers.retrievers.hits",
    "clean_metadata": "docpc_retrievers.retrievers.hits",
    "result_metadata": "docpc_retrievers.retrievers.hits",
    "retrieve": "docpc_retrievers.retrievers.hits",
    "compose_pdfs": "docpc_retrievers.retrievers.loading",
    "grid_spec": "docpc_retrievers.retrievers.loading",
    "BUILD_OPTIONS": "docpc_retrievers.retrievers.opening",
    "build_index": "docpc_retrievers.retrievers.opening",
    "open_index": "docpc_retrievers.retrievers.opening",
    "retriever_from_pdfs": "docpc_retrievers.retrievers.opening",
    "save_options": "docpc_retrievers.retrievers.opening",
    "saved_options": "docpc_retrievers.retrievers.opening",
    "saved_options_at": "docpc_retrievers.retrievers.opening",
    "split_build_options": "docpc_retrievers.retrievers.opening",
    "LEGACY_NAMES": "docpc_retrievers.retrievers.options",
    "RetrieverOptions": "docpc_retrievers.retrievers.options",
    "SEARCH_OPTIONS": "docpc_retrievers.retrievers.options",
    "SearchOptions": "docpc_retrievers.retrievers.options",
    "BY_NAME": "docpc_retrievers.retrievers.schema",
    "DEFAULT_PAGE_DPI": "docpc_retrievers.retrievers.schema",
    "IMAGE_FORMATS": "docpc_retrievers.retrievers.schema",
    "ImageFormat": "docpc_retrievers.retrievers.schema",
    "OPTIONS": "docpc_retrievers.retrievers.schema",
    "Option": "docpc_retrievers.retrievers.schema",
    "RETURN_IMAGES": "docpc_retrievers.retrievers.schema",
    "ReturnImages": "docpc_retrievers.retrievers.schema",
    "framework_names": "docpc_retrievers.retrievers.schema",
    "option_parameters": "docpc_retrievers.retrievers.schema",
    "options_help": "docpc_retrievers.retrievers.schema",
    "search_aliases": "docpc_retrievers.retrievers.schema",
    "RETRIEVER_OPTIONS_FILE": "docpc_retrievers.store.layout",
}
"""Each public name and the module it comes from (loaded on first use)."""

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from docpc_retrievers.config import DEFAULT_TOP_K, GridSpec
    from docpc_retrievers.documents.user_metadata import UserMetadata
    from docpc_retrievers.encoders.protocol import Encoder
    from docpc_retrievers.errors import PDFLoadError
    from docpc_retrievers.grid_previews import GRID_MIME_TYPE
    from docpc_retrievers.image_bytes import b64_png, convert_image
    from docpc_retrievers.index import DocPCIndex
    from docpc_retrievers.queries import check_query
    from docpc_retrievers.results import Hit
    from docpc_retrievers.retrievers.arguments import PathLike, check_known, path_list
    from docpc_retrievers.retrievers.editing import StoreEditing
    from docpc_retrievers.retrievers.hits import (
        DROPPED_METADATA_KEYS,
        IMAGE_MIME_TYPE,
        above_thresholds,
        clean_metadata,
        result_metadata,
        retrieve,
    )
    from docpc_retrievers.retrievers.loading import compose_pdfs, grid_spec
    from docpc_retrievers.retrievers.opening import (
        BUILD_OPTIONS,
        build_index,
        open_index,
        retriever_from_pdfs,
        save_options,
        saved_options,
        saved_options_at,
        split_build_options,
    )
    from docpc_retrievers.retrievers.options import LEGACY_NAMES, RetrieverOptions, SEARCH_OPTIONS, SearchOptions
    from docpc_retrievers.retrievers.schema import (
        BY_NAME,
        DEFAULT_PAGE_DPI,
        IMAGE_FORMATS,
        ImageFormat,
        OPTIONS,
        Option,
        RETURN_IMAGES,
        ReturnImages,
        framework_names,
        option_parameters,
        options_help,
        search_aliases,
    )
    from docpc_retrievers.store.layout import RETRIEVER_OPTIONS_FILE


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'docpc_retrievers.retrievers' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
