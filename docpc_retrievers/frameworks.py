"""``DocPCIndex.as_retriever``: the LangChain or LlamaIndex retriever over an open index, its package imported late."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["framework_retriever"]

_FRAMEWORKS = {
    "langchain": ("langchain_docpc", "langchain-docpc"),
    "llamaindex": ("llama_index.retrievers.docpc", "llama-index-retrievers-docpc"),
}


def framework_retriever(index: Any, framework: str, options: Mapping[str, Any]) -> Any:
    """The framework's ``DocPCRetriever`` over ``index`` (its integration package imported only now)."""
    key = framework.lower().replace("-", "").replace("_", "")
    if key not in _FRAMEWORKS:
        raise ValueError(f"framework must be 'langchain' or 'llamaindex', got {framework!r}")
    module, package = _FRAMEWORKS[key]
    try:
        retriever = importlib.import_module(module).DocPCRetriever
    except ImportError as exc:
        raise ImportError(f"{framework} retrievers need the {package} package: pip install {package} ({exc})") from None
    return retriever(index, **options)
