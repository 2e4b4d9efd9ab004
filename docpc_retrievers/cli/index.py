"""``docpc index`` and ``docpc delete``: add PDFs to a store, take documents out of it."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_FATAL, EXIT_OK, EXIT_PARTIAL, UsageError, add_store_options, emit, encoder_options, grid_shape_arg,
    parse_where, positive_int, require_store, store_kwargs,
)

__all__ = ["register"]


def _pages(text: str) -> int:
    """K, or 0 for 'all' (every page; page mode only)."""
    if text.lower() == "all":
        return 0
    return positive_int(text)


def _workers(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def register(sub: Any) -> None:
    """Add ``index`` and ``delete``."""
    from docpc_retrievers.config import ENCODE_IN
    from docpc_retrievers.documents.selection import STRATEGIES

    p = sub.add_parser("index", help="index PDF files and folders (recursively)")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="PDF files or folders")
    add_store_options(p)
    p.add_argument("--mode", choices=("grid", "page"), help="grid (DocPC, default) or page (page-level baseline)")
    p.add_argument("--strategy", choices=STRATEGIES, help="page selection (new stores; default first)")
    p.add_argument(
        "--pages", type=_pages, help="K representative pages per document (default 4; in page mode 'all' encodes every page)"
    )
    p.add_argument("--grid", type=grid_shape_arg, help="explicit grid shape ROWSxCOLS (default: from --pages)")
    p.add_argument("--seed", type=int, help="seed for the random and cluster strategies (default 0)")
    p.add_argument("--max-visual-tokens", type=positive_int, help="visual tokens per grid (Qwen models)")
    p.add_argument("--shards", type=positive_int,
                   help="a new store in N shards on one Chroma deployment (each document in the shard its id hashes "
                   "to; a search merges the shards' exact top k); an existing store keeps its count")
    p.add_argument(
        "--pool-factor", type=positive_int,
        help="keep about 1/N of each image's vectors, pooled (new stores; default 1: every vector; 2 halves the "
        "bytes and keeps 0.91-0.95 of the exact top 10 on real token vectors, against 0.99+ unpooled)",
    )
    p.add_argument(
        "--no-grids", action="store_true", default=None,
        help="keep no grid preview per document (new stores; about a quarter of the bytes; a preview asked "
        "for is composed again from its PDF)",
    )
    p.add_argument("--password", help="password for encrypted PDFs")
    p.add_argument(
        "--commit-every", type=positive_int, default=8,
        help="images per encoder call and documents per commit (default 8; page mode commits the documents "
        "whose pages are all encoded)",
    )
    p.add_argument(
        "--workers", type=_workers, help="render processes (default: one per spare core; 0 renders in this process)"
    )
    p.add_argument(
        "--render-timeout", type=float, default=60.0, help="seconds a document may take to render (default 60)"
    )
    p.add_argument(
        "--encode-in", choices=ENCODE_IN, default="auto",
        help="where images are encoded: a process of its own (on a GPU, away from the commits' use of Python's "
        "lock), a thread of this process, or auto (default: a process on a CUDA GPU for 256 files or more, else a "
        "thread)",
    )
    p.add_argument(
        "--chroma-process", action="store_true",
        help="serve the embedded store's Chroma from a child `chroma run` on a loopback port during the run, so "
        "Chroma's writes do not hold this process's Python lock (any local user can reach that port meanwhile)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--timeline", type=Path, metavar="FILE",
        help="record where the run's time went (each stage's busy spans, the queues' depths) as JSON in FILE, and "
        "print each stage's share of the run",
    )
    p.add_argument(
        "--prune", action="store_true",
        help="mirror the given folders: delete stored documents whose source under them no longer exists "
        "(nothing outside them; a missing or PDF-less root is an error and deletes nothing)",
    )
    p.add_argument(
        "--meta", action="append", default=[], metavar="KEY=VALUE",
        help="metadata for every file (repeatable): KEY=VALUE is a number, boolean or list where VALUE parses as "
             "one in JSON (year=2024), else text; KEY:=JSON must be JSON",
    )
    p.add_argument("--meta-file", type=Path, help="JSON object mapping PDF paths (relative to it) to metadata objects")
    p.add_argument("--no-sidecars", action="store_true", help="ignore <name>.pdf.json metadata files next to PDFs")
    p.set_defaults(func=run_index)

    p = sub.add_parser("delete", help="delete documents by id, source path or folder, or by --where")
    p.add_argument("targets", nargs="*", metavar="ID_OR_PATH", help="document ids, PDF paths or folders")
    add_store_options(p, model=False)
    p.add_argument("--where", help="also delete the documents matching this Chroma metadata filter (JSON)")
    p.set_defaults(func=run_delete)


def _settings(args: argparse.Namespace) -> Any:
    """Index settings from the options given; options not given keep the store's recorded values."""
    from docpc_retrievers.config import IndexSettings
    from docpc_retrievers.index import recorded_index_settings

    given = {k: getattr(args, k) for k in ("mode", "strategy", "grid", "seed", "pool_factor") if getattr(args, k) is not None}
    if args.no_grids:
        given["grid_previews"] = False
    if args.pages is not None:
        given["pages"] = args.pages or None  # 0 stands for every page
    if not given:
        return None
    recorded = recorded_index_settings(args.store, **store_kwargs(args))
    try:
        base = IndexSettings.from_dict(recorded) if isinstance(recorded, dict) else IndexSettings()
        if "grid" not in given and ("pages" in given or given.get("mode") == "page"):
            base = replace(base, grid=None)  # the shape follows the new K (or there is no grid)
        return replace(base, **given)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_paths(args: argparse.Namespace) -> bool:
    """Usage errors before any store is opened or created: missing roots, roots without PDFs (exit 2 whether or
    not the store exists). Returns True.
    """
    from docpc_retrievers.documents.discovery import check_roots, discover_pdfs
    from docpc_retrievers.errors import SourceRootError
    from docpc_retrievers.store.layout import StoreLayout

    missing = [str(p) for p in args.paths if not p.expanduser().exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)} (nothing was indexed)")
    if args.prune:
        try:
            check_roots(args.paths)
        except SourceRootError as exc:
            raise UsageError(str(exc)) from None
    if discover_pdfs(args.paths):
        return True
    where = ", ".join(str(p) for p in args.paths)
    if args.host or StoreLayout.at(args.store).exists():
        raise UsageError(f"no PDF under {where}; nothing to index (the store was not changed)")
    raise UsageError(f"no PDF under {where}; nothing to index (no store was created)")


def run_index(args: argparse.Namespace) -> int:
    """``docpc index``: 0 when every file was indexed, skipped or moved, 3 when some failed."""
    from docpc_retrievers.documents.user_metadata import (
        load_meta_file,
        parse_meta_option,
    )
    from docpc_retrievers.errors import InvalidMetadataError
    from docpc_retrievers.index import DocPCIndex
    from docpc_retrievers.timeline import Timeline

    try:
        common = parse_meta_option(args.meta) if args.meta else None
        by_path = load_meta_file(args.meta_file) if args.meta_file else None
    except InvalidMetadataError as exc:
        raise UsageError(str(exc)) from None
    if args.chroma_process and args.host:
        raise UsageError("--chroma-process serves an embedded store from a child process; a store on --host is "
                         "served by its Chroma server already")
    _check_paths(args)
    created = not args.host and not Path(args.store).expanduser().exists()  # a folder this run makes, nothing else
    if not args.verbose:  # each failure is printed once, from the report below, not also as a log warning
        logging.getLogger("docpc_retrievers.indexing").setLevel(logging.ERROR)
    settings = _settings(args)
    timeline = Timeline() if args.timeline else None
    try:
        with DocPCIndex(
            args.store, model=args.model, settings=settings, writable=True, encoder_kwargs=encoder_options(args),
            shards=args.shards, chroma_process=args.chroma_process, **store_kwargs(args),
        ) as index:
            report = index.add_pdfs(
                args.paths,
                password=args.password,
                batch_size=args.commit_every,
                progress=not args.no_progress,
                workers=args.workers,
                render_timeout=args.render_timeout,
                prune=args.prune,
                metadata=common,
                metadata_by_path=by_path,
                sidecars=not args.no_sidecars,
                encode_in=args.encode_in,
                timeline=timeline,
            )
            stored = len(index)
    finally:
        if timeline is not None:  # a failed run's timeline is the one most worth reading
            timeline.write(args.timeline)
            if timeline.spans:
                print(f"docpc: where the time went: {timeline.headline()}; every span in {args.timeline}",
                      file=sys.stderr)
    if created and stored == 0:  # every file failed: leave no store that records no model and no dimension
        shutil.rmtree(Path(args.store).expanduser(), ignore_errors=True)
        print(f"docpc: no document was indexed, so no store was created at {args.store}", file=sys.stderr)
    if args.json:
        emit(report.to_dict())
    else:
        print(report.summary())
        for failure in report.failed:
            print(f"  failed: {failure.reason}", file=sys.stderr)
    return EXIT_PARTIAL if report.failed else EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    """``docpc delete``: 1 when nothing matched."""
    from docpc_retrievers.catalog import no_match_reason
    from docpc_retrievers.index import DocPCIndex

    where = parse_where(args.where)
    if not args.targets and where is None:
        raise UsageError("give document ids, paths or folders to delete, or --where")
    require_store(args)
    with DocPCIndex(args.store, writable=True, **store_kwargs(args)) as index:
        ids = index.resolve_ids(args.targets, where=where)
        deleted = index.delete(ids)
        reason = None if ids or where is None else no_match_reason(index.store, where)
    if args.json:
        emit({"deleted": deleted, "ids": ids})
    else:
        print(f"deleted {deleted} document{'' if deleted == 1 else 's'}")
    if deleted == 0:
        what = ", ".join([*args.targets, *([f"--where {args.where}"] if where is not None else [])])
        print(f"docpc: no stored document matches {what}", file=sys.stderr)
        if reason:
            print(f"docpc: {reason}", file=sys.stderr)
        return EXIT_FATAL
    return EXIT_OK
