"""``docpc info`` and ``docpc clear-cache``: look at a store, drop what it can rebuild."""

from __future__ import annotations

import argparse
from typing import Any

from docpc_retrievers.cli.common import EXIT_OK, add_store_options, emit, store_kwargs

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``info`` and ``clear-cache``."""
    p = sub.add_parser("info", help="what a store holds and how it was built")
    add_store_options(p, model=False)
    p.set_defaults(func=run_info)
    p = sub.add_parser("clear-cache", help="delete the page embeddings cached for reranking")
    add_store_options(p, model=False)
    p.set_defaults(func=run_clear_cache)


def run_info(args: argparse.Namespace) -> int:
    """``docpc info``: one line per fact (or JSON)."""
    from docpc_retrievers.index import DocPCIndex

    with DocPCIndex(args.store, **store_kwargs(args)) as index:
        info = index.info()
    if args.json:
        emit(info)
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            print(f"{key:<{width}}  {value}")
    return EXIT_OK


def run_clear_cache(args: argparse.Namespace) -> int:
    """``docpc clear-cache``: removes the rerank page cache."""
    from docpc_retrievers.index import DocPCIndex

    with DocPCIndex(args.store, **store_kwargs(args)) as index:
        removed = index.clear_page_cache()
    if args.json:
        emit({"removed_pages": removed})
    else:
        print(f"removed {removed} cached page embedding(s)")
    return EXIT_OK
