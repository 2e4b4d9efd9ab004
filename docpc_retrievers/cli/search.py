"""``docpc search``: rank a store's documents for one query or many, with evidence pages.

Several queries (given together, or one per line from ``--queries FILE``) share
one model load and are encoded in batches; their results stream out as each
batch is answered, as JSON Lines with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from docpc_retrievers.cli.common import (
    EXIT_OK, UsageError, add_option_flags, add_store_options, emit, encoder_options, explain_no_match, option_values,
    search_options,
    query_text, store_kwargs,
)
from docpc_retrievers.results import EvidencePage
from docpc_retrievers.retrievers.schema import OPTIONS
from docpc_retrievers.explain.shares import shares_text
from docpc_retrievers.serve.client import SERVER_ENV
from docpc_retrievers.store.records import MISSING_SHARDS, shards_named

__all__ = ["QUERY_BATCH", "page_ranges", "read_queries", "register", "stream_batches"]

QUERY_BATCH = 16
"""Queries encoded and searched together: one batch's results are printed before the next is read."""
SEARCH_OPTIONS = tuple(o.name for o in OPTIONS if o.cli)
"""The search options ``docpc search`` offers as flags: every option of the schema that has one
(docpc_retrievers/retrievers/schema.py)."""


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
    p = sub.add_parser(
        "search", help="rank indexed documents for a query (or many: one model load)",
        description="Rank a store's documents for each query. Several queries (given together, or one per line with "
        "--queries) load the model once; with --json they print one JSON object per line, "
        '{"n", "query", "results"}, instead of the single query\'s list.',
    )
    p.add_argument("query", nargs="*", type=query_text,
                   help="the query text (several: each searched, the model loaded once)")
    p.add_argument(
        "--queries", metavar="FILE", type=Path,
        help="read queries from FILE, one per line (- : standard input; blank lines are skipped); results are "
        "printed as each batch of up to 16 is answered (from standard input, as soon as a query arrives)",
    )
    add_store_options(p, store_required=False)
    p.add_argument(
        "--server", metavar="URL",
        help="ask a running `docpc serve` at URL instead of loading the store and model here "
        "(default: $DOCPC_SERVER; its token from $DOCPC_SERVE_TOKEN)",
    )
    p.add_argument("--token", help="the server's bearer token, for --server (default: $DOCPC_SERVE_TOKEN)")
    p.add_argument("--searcher", action="append", metavar="URL",
                   help="a sharded store's shard searcher (`docpc serve-shard`), one per shard in shard order "
                   "(repeat): searches are answered by them and merged here, with the model loaded here")
    add_option_flags(p, SEARCH_OPTIONS)
    p.add_argument("--password", help="password for encrypted sources (reranking renders pages)")
    p.set_defaults(func=run)


def read_queries(lines: Iterable[str]) -> Iterator[str]:
    """The non-blank lines of a queries file, stripped, read lazily."""
    for line in lines:
        text = line.strip()
        if text:
            yield text


def _open_queries(path: Path) -> TextIO:
    """``--queries``'s file (``-``: standard input), or a usage error naming it."""
    if str(path) == "-":
        return sys.stdin
    try:
        return path.open(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--queries: cannot read {path}: {exc.strerror or exc}") from None


def _batches(queries: Iterator[str]) -> Iterator[list[str]]:
    """``QUERY_BATCH`` queries at a time."""
    while batch := list(islice(queries, QUERY_BATCH)):
        yield batch


def stream_batches(fd: int) -> Iterator[list[str]]:
    """Batches of the queries written to ``fd`` (a pipe, a terminal): it waits for one line, then takes only the lines
    already written, at most ``QUERY_BATCH``, so a program that writes a query and waits for its answer gets it, and
    a file piped in is still encoded 16 queries at a time."""
    pending, eof = b"", False

    def read() -> None:
        nonlocal pending, eof
        chunk = os.read(fd, 1 << 16)
        eof = not chunk
        pending += chunk

    while not eof:
        while not eof and b"\n" not in pending:
            read()  # blocks until the writer sends something, or closes
        while not eof and pending.count(b"\n") < QUERY_BATCH and select.select([fd], [], [], 0)[0]:
            read()
        *lines, pending = pending.split(b"\n")
        if eof:
            lines.append(pending)
        batch = list(read_queries(line.decode("utf-8", errors="replace") for line in lines))
        yield from (batch[i : i + QUERY_BATCH] for i in range(0, len(batch), QUERY_BATCH))


def evidence_line(pages: Sequence[EvidencePage], other: Mapping[str, float] | None = None) -> str:
    """Where the grid score went, as ``docpc show`` and ``explain().breakdown()`` say it: the pages that hold at least
    half a percent (at most four), then the parts no page holds (explain/shares.py, ``shares_text``)."""
    shown = {e.page: e.share or 0.0 for e in pages if (e.share or 0.0) >= 0.005}
    shown = dict(sorted(shown.items(), key=lambda kv: -kv[1])[:4])
    line = shares_text(shown, dict(other or {}))
    return line or "no part of the score is positive"


def _query_batches(args: argparse.Namespace, stream: TextIO | None) -> Iterator[list[str]]:
    """The command line's queries, then those of ``--queries``, in batches."""
    yield from _batches(iter(args.query))
    if stream is sys.stdin and os.name == "posix":
        yield from stream_batches(sys.stdin.fileno())
    elif stream is not None:
        yield from _batches(read_queries(stream))


def run(args: argparse.Namespace) -> int:
    """``docpc search``: prints the ranked documents (or JSON) for each query."""
    from docpc_retrievers.index import DocPCIndex

    options = option_values(args, SEARCH_OPTIONS)
    if not args.query and args.queries is None:
        raise UsageError("give a query, or --queries FILE (- for standard input)")
    many = len(args.query) > 1 or args.queries is not None  # the output format follows the arguments, not the count
    server = args.server or os.environ.get(SERVER_ENV)
    checked = search_options(args, options)  # the one check of every option, before a model loads or a server is asked
    if server:
        return _run_remote(args, server, options, many)
    if args.token and not args.searcher:
        raise UsageError("--token goes with --server URL or --searcher URL (a local search needs no token)")
    if args.store is None:
        raise UsageError("give --store PATH (or --server URL to ask a running docpc serve)")
    stream = _open_queries(args.queries) if args.queries is not None else None
    try:
        with DocPCIndex(
            args.store, model=args.model, encoder_kwargs=encoder_options(args), searchers=args.searcher,
            searcher_token=args.token, **store_kwargs(args)
        ) as index:
            if "aggregate" in options and index.settings.mode != "page":
                raise UsageError(
                    f"--aggregate applies to page-mode stores only; {args.store} is a {index.settings.mode}-mode "
                    "store (one grid per document: there are no page scores to combine)"
                )
            n, empty = 0, False
            for batch in _query_batches(args, stream):
                answers = index.search_with(batch, checked)
                for query, results in zip(batch, answers):
                    n += 1
                    empty = empty or not results
                    _print(results, args.json, (n, query) if many else None)
                sys.stdout.flush()  # a reader at the other end of a pipe gets each batch as it is answered
            if empty:
                explain_no_match(index.store, checked.filters, args.under)
            if n == 0:
                raise UsageError("--queries held no query (only blank lines)")
    finally:
        if stream is not None and stream is not sys.stdin:
            stream.close()
    return EXIT_OK


def _run_remote(args: argparse.Namespace, server: str, options: dict[str, Any], many: bool) -> int:
    """``docpc search --server URL``: each query answered by the server; printed as a local search prints."""
    from docpc_retrievers.results import SearchResult
    from docpc_retrievers.retrievers.schema import BY_NAME
    from docpc_retrievers.serve.client import remote_search

    # What a server request cannot carry (the schema's options without a request field, and the local model and
    # password): the server's own settings apply, so asking for them is refused rather than ignored.
    local_only = [flag for flag, value in (("--model", args.model), ("--password", args.password)) if value is not None]
    local_only += [BY_NAME[name].cli[-1] for name in options if not BY_NAME[name].server]
    if local_only:
        raise UsageError(f"{', '.join(local_only)} cannot be sent to a server (its own settings apply)")
    stream = _open_queries(args.queries) if args.queries is not None else None
    n = 0
    try:
        for batch in _query_batches(args, stream):
            for query in batch:
                n += 1
                found = remote_search(server, query, token=args.token, **options)
                results = found if args.json else [SearchResult.from_dict(d) for d in found]
                _print(results, args.json, (n, query) if many else None, as_dicts=args.json)
                sys.stdout.flush()
    finally:
        if stream is not None and stream is not sys.stdin:
            stream.close()
    if n == 0:
        raise UsageError("--queries held no query (only blank lines)")
    return EXIT_OK


def _print(results: list[Any], as_json: bool, numbered: tuple[int, str] | None, *, as_dicts: bool = False) -> None:
    """One query's results: a ranked block (headed by the query when there are several), or JSON."""
    if as_json:
        dicts = results if as_dicts else [r.to_dict() for r in results]
        if numbered is None:
            emit(dicts)
        else:  # JSON Lines: one object per query
            n, query = numbered
            print(json.dumps({"n": n, "query": query, "results": dicts}, ensure_ascii=False))
        return
    if numbered is not None:
        n, query = numbered
        if n > 1:
            print()
        print(f"query {n}: {query}")
    if not results:
        print("no results")
    missing = next((r.metadata.get(MISSING_SHARDS) for r in results if r.metadata.get(MISSING_SHARDS)), None)
    if missing:
        print(f"partial: {shards_named(missing)} did not answer; "
              "these are the best of the others")
    for r in results:
        total = f"{r.total_pages} page{'' if r.total_pages == 1 else 's'}"
        print(f"{r.rank:3d}. {r.score:9.4f}  {r.title or '-'}  [{total}; indexed {page_ranges(r.selected_pages)}]")
        print(f"     {r.source}  id={r.id}")
        if r.evidence_pages:
            if r.evidence_pages[0].share is not None:
                print(f"     where the score went: {evidence_line(r.evidence_pages, r.other_shares)}")
            else:
                shown = ", ".join(f"p{e.page} {e.score or 0.0:.3f}" for e in r.evidence_pages[:4])
                print(f"     evidence (each page's own score): {shown}")
