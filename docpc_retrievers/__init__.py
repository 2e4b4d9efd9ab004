"""docpc-retrievers: document-level visual retrieval for RAG.

Each PDF becomes one image: K representative pages composed into a grid,
encoded once by a ColPali-family late-interaction model and searched by
MaxSim. Heavy parts (torch, colpali-engine, chromadb) load on first use.

Where things live: ``documents`` (PDF -> pages -> grid), ``encoders``,
``scoring`` (MaxSim, evidence, BM25), ``store`` (everything on disk),
``indexing``, ``search``, ``rerank``, ``index`` (the :class:`DocPCIndex`
facade), ``retrievers`` (the layer the framework integrations stand on), ``cli``,
``eval`` (``[eval]`` extra), ``training``, ``testing``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from docpc_retrievers.errors import (
    DocPCError,
    DocumentNotFoundError,
    ExplainUnavailableError,
    InvalidFilterError,
    InvalidMetadataError,
    ModelLoadError,
    ModelMismatchError,
    PDFLoadError,
    SettingsMismatchError,
    SourceRootError,
    StoreError,
    StoreLockedError,
)

__version__ = "0.3.0.dev0"

_LAZY = {
    "EncoderOptions": "config",
    "GridSpec": "config",
    "IndexSettings": "config",
    "RerankSettings": "config",
    "SearchOptions": "retrievers.options",
    "ComposedGrid": "documents.composition",
    "GridLayout": "documents.composition",
    "compose_grid": "documents.composition",
    "grid_shape": "documents.composition",
    "PDFDocument": "documents.pdf",
    "open_pdf": "documents.pdf",
    "represent_pdf": "documents.represent",
    "STRATEGIES": "documents.selection",
    "select_pages": "documents.selection",
    "DEFAULT_MODEL": "encoders",
    "ColPaliEncoder": "encoders",
    "Encoder": "encoders",
    "load_encoder": "encoders",
    "DocPCIndex": "index",
    "EvidencePage": "results",
    "Hit": "results",
    "IndexFailure": "results",
    "IndexReport": "results",
    "SearchResult": "results",
    "maxsim": "scoring",
    "MultiVectorStore": "store",
    "Explanation": "explain",
    "Explainer": "explain",
}

__all__ = sorted([
    "DocPCError", "DocumentNotFoundError", "ExplainUnavailableError", "InvalidFilterError", "InvalidMetadataError",
    "ModelLoadError", "ModelMismatchError", "PDFLoadError", "SettingsMismatchError", "SourceRootError", "StoreError",
    "StoreLockedError", *_LAZY, "__version__",
])
"""The public names: the errors (imported now, they are light) and those of :data:`_LAZY` (loaded on first use)."""

if TYPE_CHECKING:
    from docpc_retrievers.config import EncoderOptions, GridSpec, IndexSettings, RerankSettings
    from docpc_retrievers.documents.composition import ComposedGrid, GridLayout, compose_grid, grid_shape
    from docpc_retrievers.documents.pdf import PDFDocument, open_pdf
    from docpc_retrievers.documents.represent import represent_pdf
    from docpc_retrievers.documents.selection import STRATEGIES, select_pages
    from docpc_retrievers.encoders import DEFAULT_MODEL, ColPaliEncoder, Encoder, load_encoder
    from docpc_retrievers.explain import Explainer, Explanation
    from docpc_retrievers.index import DocPCIndex
    from docpc_retrievers.results import EvidencePage, Hit, IndexFailure, IndexReport, SearchResult
    from docpc_retrievers.retrievers.options import SearchOptions
    from docpc_retrievers.scoring import maxsim
    from docpc_retrievers.store import MultiVectorStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'docpc_retrievers' has no attribute {name!r}")
    value = getattr(import_module(f"docpc_retrievers.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
