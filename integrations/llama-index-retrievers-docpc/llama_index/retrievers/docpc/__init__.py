"""LlamaIndex integration of docpc-retrievers: document-level visual retrieval over PDFs.

``DocPCRetriever`` ranks whole PDFs (one composed grid of representative
pages each) and returns ``ImageNode`` results; ``DocPCReader`` turns PDFs into
grid image documents for other indexes.
"""

from llama_index.retrievers.docpc.base import CONFIG_FILE, DEFAULT_PAGE_DPI, DEFAULT_TOP_K, DocPCRetriever
from llama_index.retrievers.docpc.filters import SUPPORTED_OPERATORS, UnsupportedFilterError, metadata_filters_to_where
from llama_index.retrievers.docpc.reader import DocPCReader

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_PAGE_DPI",
    "DEFAULT_TOP_K",
    "SUPPORTED_OPERATORS",
    "DocPCReader",
    "DocPCRetriever",
    "UnsupportedFilterError",
    "metadata_filters_to_where",
]
