"""LangChain integration of docpc-retrievers: document-level visual retrieval over PDFs.

``DocPCRetriever`` ranks whole PDFs (one composed grid of representative
pages each) and returns one ``Document`` per PDF; ``DocPCLoader`` turns PDFs
into grid documents for other vector stores.
"""

from langchain_docpc.document_loaders import DocPCLoader
from langchain_docpc.retrievers import DEFAULT_K, DEFAULT_PAGE_DPI, DocPCRetriever

__all__ = ["DEFAULT_K", "DEFAULT_PAGE_DPI", "DocPCLoader", "DocPCRetriever"]
