"""``docpc search``: rank a store's documents for a query, with evidence pages."""

from __future__ import annotations

import argparse
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_OK,
    UsageError,
    add_store_options,
    emit,
    encoder_options,
    non_negative_int,
    parse_where,
    positive_int,
    store_kwargs,
)

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``search``."""
    p = sub.add_parser("search", help="rank indexed documents for a query")
    p.add_argument("query", help="the query text")
    add_store_options(p)
    p.add_argument("--top-k", type=non_negative_int, default=5, help="results to return (default 5)")
    p.add_argument("--where", help='Chroma metadata filter as JSON, e.g. \'{"author": "Ada"}\'')
    p.add_argument("--aggregate", choices=("max", "mean", "sum"), default="max", help="page mode: MaxP, AvgP or SumP")
    p.add_argument("--rerank", action="store_true", help="grid-then-page: rescore the top documents page by page")
    p.add_argument("--rerank-top-n", type=positive_int, default=20, help="documents to rerank (default 20)")
    p.add_argument("--page-budget", type=positive_int, default=4, help="pages encoded per reranked document (default 4)")
    p.add_argument("--password", help="password for encrypted sources (reranking renders pages)")
    p.set_defaults(func=run)


def _where(text: str | None) -> dict[str, Any] | None:
    return parse_where(text)


def run(args: argparse.Namespace) -> int:
    """``docpc search``: prints the ranked documents (or JSON)."""
    from docpc_retrievers.index import DocPCIndex

    where = _where(args.where)
    if not args.query.strip():
        raise UsageError("the query is empty")
    with DocPCIndex(args.store, model=args.model, encoder_kwargs=encoder_options(args), **store_kwargs(args)) as index:
        results = index.search(
            args.query,
            args.top_k,
            filters=where,
            aggregate=args.aggregate,
            rerank=args.rerank,
            rerank_top_n=args.rerank_top_n,
            page_budget=args.page_budget,
            password=args.password,
        )
    if args.json:
        emit([r.to_dict() for r in results])
        return EXIT_OK
    if not results:
        print("no results")
    for r in results:
        pages = ",".join(str(p) for p in r.selected_pages)
        print(f"{r.rank:3d}. {r.score:9.4f}  {r.title or '-'}  [{r.total_pages} pages; indexed {pages}]")
        print(f"     {r.source}  id={r.id}")
        if r.evidence_pages:
            shown = ", ".join(
                f"p{e.page} {e.share:.0%}" if e.share is not None else f"p{e.page} {e.score:.3f}"
                for e in r.evidence_pages[:4]
            )
            print(f"     evidence: {shown}")
    return EXIT_OK
