"""``docpc search``: rank a store's documents for a query, with evidence pages."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_OK,
    UsageError,
    add_store_options,
    emit,
    encoder_options,
    explain_no_match,
    parse_where,
    positive_int,
    store_kwargs,
    warm_store,
)
from docpc_retrievers.config import AGGREGATES

__all__ = ["page_ranges", "register"]


def page_ranges(pages: list[int]) -> str:
    """``[1, 2, 3, 5, 7, 8]`` -> ``1-3,5,7-8``: a 117-page document's pages fit on a line."""
    runs: list[list[int]] = []
    for page in pages:
        if runs and page == runs[-1][-1] + 1:
            runs[-1].append(page)
        else:
            runs.append([page])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "-"


def register(sub: Any) -> None:
    """Add ``search``."""
    p = sub.add_parser("search", help="rank indexed documents for a query")
    p.add_argument("query", help="the query text")
    add_store_options(p)
    p.add_argument("-k", "--top-k", type=positive_int, default=5, help="results to return (default 5, at least 1)")
    p.add_argument("--where", help='Chroma metadata filter as JSON, e.g. \'{"author": "Ada"}\'')
    p.add_argument(
        "--aggregate", choices=AGGREGATES, help="page-mode stores only: MaxP (max, default), AvgP or SumP"
    )
    p.add_argument("--rerank", action="store_true", help="grid-then-page: rescore the top documents page by page")
    p.add_argument("--rerank-top-n", type=positive_int, default=20, help="documents to rerank (default 20)")
    p.add_argument("--page-budget", type=positive_int, default=4, help="pages encoded per reranked document (default 4)")
    p.add_argument(
        "--candidates", type=positive_int,
        help="documents the first stage keeps for exact scoring (default: 256-1,024 by query length); more: higher "
        "recall on large stores, slower",
    )
    p.add_argument("--password", help="password for encrypted sources (reranking renders pages)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (when the token stage is built first)")
    p.set_defaults(func=run)


def token_stage_first(store: Any, args: argparse.Namespace) -> bool:
    """Build a large store's missing token-level first stage before a one-shot search, with progress; True if built.

    A long-lived reader builds it in the background, answering from the summaries meanwhile; a one-shot command
    would start that build and stop it at exit, so every search on this machine would get the summaries' answers.
    """
    from docpc_retrievers.store import view

    if store.count() <= view.INLINE_BUILD_MAX or store.token_stage != "absent":
        return False
    print(f"docpc: {args.store} has no token-level first stage on this machine; building it once before searching "
          "(minutes on a large store; `docpc warm` does it ahead)", file=sys.stderr)
    warm_store(store, not args.no_progress)
    return True


def _where(text: str | None) -> dict[str, Any] | None:
    return parse_where(text)


def run(args: argparse.Namespace) -> int:
    """``docpc search``: prints the ranked documents (or JSON)."""
    from docpc_retrievers.index import DocPCIndex

    where = _where(args.where)
    if not args.query.strip():
        raise UsageError("the query is empty")
    with DocPCIndex(args.store, model=args.model, encoder_kwargs=encoder_options(args), **store_kwargs(args)) as index:
        if args.aggregate is not None and index.settings.mode != "page":
            raise UsageError(
                f"--aggregate applies to page-mode stores only; {args.store} is a {index.settings.mode}-mode store "
                "(one grid per document: there are no page scores to combine)"
            )
        token_stage_first(index.store, args)
        results = index.search(
            args.query,
            args.top_k,
            filters=where,
            aggregate=args.aggregate or "max",
            rerank=args.rerank,
            rerank_top_n=args.rerank_top_n,
            page_budget=args.page_budget,
            password=args.password,
            candidates=args.candidates,
        )
        if not results:
            explain_no_match(index.store, where)
    if args.json:
        emit([r.to_dict() for r in results])
        return EXIT_OK
    if not results:
        print("no results")
    for r in results:
        total = f"{r.total_pages} page{'' if r.total_pages == 1 else 's'}"
        print(f"{r.rank:3d}. {r.score:9.4f}  {r.title or '-'}  [{total}; indexed {page_ranges(r.selected_pages)}]")
        print(f"     {r.source}  id={r.id}")
        if r.evidence_pages:
            if r.evidence_pages[0].share is not None:
                shown = ", ".join(f"p{e.page} {e.share or 0.0:.0%}" for e in r.evidence_pages[:4])
                rest = 1.0 - sum(e.share or 0.0 for e in r.evidence_pages)
                if rest >= 0.05:  # matches on the prompt's tokens or an empty cell: shown, so the shares add up
                    shown += f"; {rest:.0%} on no page (prompt tokens, empty cells)"
                print(f"     evidence (share of the grid score): {shown}")
            else:
                shown = ", ".join(f"p{e.page} {e.score or 0.0:.3f}" for e in r.evidence_pages[:4])
                print(f"     evidence (each page's own score): {shown}")
    return EXIT_OK
