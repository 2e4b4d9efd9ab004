"""``DocPCIndex.as_retriever``: a framework's retriever over an open index, found through the plugin entry points.

Each integration package declares its retriever under the ``docpc_retrievers.retrievers`` entry-point group
(``langchain = "langchain_docpc:DocPCRetriever"``), so the core never names or imports an integration: the arrow
runs one way, from the integrations to the core, and a third framework plugs in the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

__all__ = ["ENTRY_POINTS", "framework_retriever"]

ENTRY_POINTS = "docpc_retrievers.retrievers"
"""The entry-point group integrations register their retriever class in, under the framework's name."""
_PACKAGES = {"langchain": "langchain-docpc", "llamaindex": "llama-index-retrievers-docpc"}
"""The packages that provide the known frameworks, named when one is missing."""


def framework_retriever(index: Any, framework: str, options: Mapping[str, Any]) -> Any:
    """The framework's ``DocPCRetriever`` over ``index`` (its package loaded only now)."""
    key = framework.lower().replace("-", "").replace("_", "")
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINTS)}
    if key not in found:
        if key in _PACKAGES:
            raise ImportError(f"{framework} retrievers need the {_PACKAGES[key]} package: pip install {_PACKAGES[key]}")
        known = [repr(k) for k in sorted({*_PACKAGES, *found})]
        raise ValueError(f"framework must be {' or '.join([', '.join(known[:-1]), known[-1]])}, got {framework!r}")
    return found[key].load()(index, **options)
