"""``docpc serve``: one loaded store and model answering over the Model Context Protocol and an HTTP JSON API.

Needs the ``serve`` extra (``pip install docpc-retrievers[serve]``): the official ``mcp`` SDK, uvicorn, httpx.
Names load on first use, so the command line can read :mod:`.client`'s settings without importing the store.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["PageImage", "ServiceError", "StoreService"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("docpc_retrievers.serve.service"), name)
    raise AttributeError(name)
