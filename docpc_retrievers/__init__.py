"""docpc-retrievers: document-level visual retrieval for RAG.

Each PDF becomes one image: K representative pages composed into a grid,
encoded once by a ColPali-family late-interaction model and searched by
MaxSim. Heavy parts (torch, colpali-engine, chromadb) load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import DocPCError, ModelLoadError, ModelMismatchError, PDFLoadError, StoreError, StoreLockedError

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "ColPaliEncoder",
    "ComposedGrid",
    "DocPCError",
    "DocPCIndex",
    "Encoder",
    "GridLayout",
    "IndexFailure",
    "IndexReport",
    "IndexSettings",
    "ModelLoadError",
    "ModelMismatchError",
    "MultiVectorStore",
    "PDFDocument",
    "PDFLoadError",
    "STRATEGIES",
    "SearchResult",
    "StoreError",
    "StoreLockedError",
    "compose_grid",
    "grid_shape",
    "load_encoder",
    "maxsim",
    "open_pdf",
    "select_pages",
    "__version__",
]

_LAZY = {
    "DEFAULT_MODEL": "encoders",
    "ColPaliEncoder": "encoders",
    "Encoder": "encoders",
    "load_encoder": "encoders",
    "ComposedGrid": "composition",
    "GridLayout": "composition",
    "compose_grid": "composition",
    "grid_shape": "composition",
    "DocPCIndex": "index",
    "IndexSettings": "index",
    "IndexFailure": "results",
    "IndexReport": "results",
    "SearchResult": "results",
    "MultiVectorStore": "store",
    "PDFDocument": "pdf",
    "open_pdf": "pdf",
    "STRATEGIES": "selection",
    "select_pages": "selection",
    "maxsim": "scoring",
}

if TYPE_CHECKING:
    from .composition import ComposedGrid, GridLayout, compose_grid, grid_shape
    from .encoders import DEFAULT_MODEL, ColPaliEncoder, Encoder, load_encoder
    from .index import DocPCIndex, IndexSettings
    from .pdf import PDFDocument, open_pdf
    from .results import IndexFailure, IndexReport, SearchResult
    from .scoring import maxsim
    from .selection import STRATEGIES, select_pages
    from .store import MultiVectorStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'docpc_retrievers' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
