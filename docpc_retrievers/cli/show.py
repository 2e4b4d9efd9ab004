"""``docpc show``: search, then explain each hit as a self-contained HTML report or as PNG files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_OK, UsageError, add_option_flags, add_store_options, emit, encoder_options, explain_no_match, option_values,
    search_options,
    positive_int, query_text, store_kwargs,
)
from docpc_retrievers.config import DEFAULT_TOP_K

__all__ = ["DEFAULT_REPORT", "SHOW_OPTIONS", "register"]

SHOW_OPTIONS = ("top_k", "filters", "under", "rerank")
"""The search options ``docpc show`` offers as flags (docpc_retrievers/options.py defines each once)."""
DEFAULT_REPORT = "docpc-report.html"
"""Where ``docpc show`` writes its report when given neither ``--out`` nor ``--png``."""


def register(sub: Any) -> None:
    """Add ``show``."""
    p = sub.add_parser("show", help="explain why documents matched: heat over the grid, page crops, an HTML report")
    p.add_argument("query", type=query_text, help="the query text")
    add_store_options(p)
    add_option_flags(
        p, SHOW_OPTIONS, top_k=f"hits to explain (default {DEFAULT_TOP_K})",
        filters="explain the hits of a filtered search: a Chroma metadata filter (JSON)",
        under="explain the hits among this folder's or file's documents only (repeat for several)",
        rerank="rerank first and show the pages it scored",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", type=Path, help="write one self-contained HTML report here (default: docpc-report.html "
                     "in the current folder)")
    out.add_argument("--png", type=Path, metavar="DIR", help="write each hit's pictures as PNG files under DIR")
    p.add_argument("--pages", type=positive_int, default=2, help="top pages cropped per hit (default 2)")
    p.add_argument("--dpi", type=float, default=144.0, help="resolution of the page crops (default 144)")
    p.add_argument("--password", help="password for encrypted sources")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``docpc show``: prints where the report or pictures went (or JSON)."""
    from docpc_retrievers.explain.report import report_html
    from docpc_retrievers.index import DocPCIndex

    if args.dpi <= 0:
        raise UsageError("--dpi must be positive")
    checked = search_options(args, option_values(args, SHOW_OPTIONS))
    replaced = False
    if args.out is None and args.png is None:  # the default name never replaces an earlier report
        args.out = free_report_path(Path(DEFAULT_REPORT))
    elif args.out is not None:
        replaced = args.out.exists()
    with DocPCIndex(args.store, model=args.model, encoder_kwargs=encoder_options(args), **store_kwargs(args)) as index:
        results = index.search_with([args.query], checked)[0]
        if not results:
            explain_no_match(index.store, checked.filters, args.under)
        explained = [r.explain(top_pages=args.pages, dpi=args.dpi, password=args.password) for r in results]
        model = index.model
    written: list[str] = []
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report_html(args.query, explained, store=str(args.store), model=model), encoding="utf-8")
        written.append(str(args.out))
    else:
        for rank, x in enumerate(explained, 1):
            written += [str(p) for p in x.save(args.png, prefix=f"{rank:02d}-{x.doc_id[:12]}-")]
    if args.json:
        emit({"hits": [r.to_dict() for r in results], "written": written})
    else:
        note = " (replacing the report that was there)" if replaced else ""
        print(f"{len(results)} hit{'' if len(results) == 1 else 's'} explained; wrote "
              f"{', '.join(written) if written else 'nothing'}{note}")
    return EXIT_OK


def free_report_path(path: Path) -> Path:
    """``path``, or the first of ``name-2.html``, ``name-3.html``... that does not exist yet."""
    n = 1
    candidate = path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate
