"""The ``docpc`` command line: index folders of PDFs, search, inspect and delete.

Exit codes: 0 success; 3 some files failed and the rest were indexed;
2 usage errors; 1 fatal errors (bad store, model that cannot load, ...).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import replace
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from . import __version__
from .errors import DocPCError, StoreLockedError
from .selection import STRATEGIES

__all__ = ["EXIT_FATAL", "EXIT_OK", "EXIT_PARTIAL", "EXIT_USAGE", "UsageError", "build_parser", "main"]

logger = logging.getLogger("docpc_retrievers.cli")

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


class UsageError(Exception):
    """Bad arguments found after parsing; reported like argparse's own errors (exit 2)."""




def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _pages(text: str) -> int:
    """K, or 0 for 'all' (every page; page mode only)."""
    if text.lower() == "all":
        return 0
    return _positive_int(text)


def _grid(text: str) -> tuple[int, int]:
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS such as 2x2, got {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError("rows and cols must be >= 1")
    return rows, cols


def _add_common(p: argparse.ArgumentParser, *, model: bool = True) -> None:
    p.add_argument("--store", required=True, type=Path, help="store directory")
    p.add_argument("--host", help="Chroma server host (records on the server, vectors in --store)")
    p.add_argument("--port", type=int, default=8000, help="Chroma server port (default 8000)")
    p.add_argument("--collection", default="docpc", help="Chroma collection name (default docpc)")
    if model:
        p.add_argument("--model", help="checkpoint id or local path (default: the store's model)")
        p.add_argument("--device", help="cuda, mps or cpu (default: best available)")
        p.add_argument("--batch-size", type=_positive_int, default=4, help="images per encoder batch")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="docpc",
        description="Document-level visual retrieval over PDFs (representative pages composed into one grid).",
    )
    parser.add_argument("--version", action="version", version=f"docpc-retrievers {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("index", help="index PDF files and folders (recursively)")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="PDF files or folders")
    _add_common(p)
    p.add_argument("--mode", choices=("grid", "page"), help="grid (DocPC, default) or page (page-level baseline)")
    p.add_argument("--strategy", choices=STRATEGIES, help="page selection (new stores; default first)")
    p.add_argument(
        "--pages",
        type=_pages,
        help="K representative pages per document (default 4; in page mode 'all' encodes every page)",
    )
    p.add_argument("--grid", type=_grid, help="explicit grid shape ROWSxCOLS (default: from --pages)")
    p.add_argument("--seed", type=int, help="seed for the random and cluster strategies (default 0)")
    p.add_argument("--max-visual-tokens", type=_positive_int, help="visual tokens per grid (Qwen models)")
    p.add_argument("--password", help="password for encrypted PDFs")
    p.add_argument("--commit-every", type=_positive_int, default=8, help="documents per commit (default 8)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("search", help="rank indexed documents for a query")
    p.add_argument("query", help="the query text")
    _add_common(p)
    p.add_argument("--top-k", type=_non_negative_int, default=5, help="results to return (default 5)")
    p.add_argument("--where", help='Chroma metadata filter as JSON, e.g. \'{"author": "Ada"}\'')
    p.add_argument("--aggregate", choices=("max", "mean", "sum"), default="max", help="page mode: MaxP, AvgP or SumP")
    p.add_argument("--rerank", action="store_true", help="grid-then-page: rescore the top documents page by page")
    p.add_argument("--rerank-top-n", type=_positive_int, default=20, help="documents to rerank (default 20)")
    p.add_argument("--page-budget", type=_positive_int, default=4, help="pages encoded per reranked document (default 4)")
    p.add_argument("--password", help="password for encrypted sources (reranking renders pages)")

    p = sub.add_parser("info", help="what a store holds and how it was built")
    _add_common(p, model=False)

    p = sub.add_parser("clear-cache", help="delete the page embeddings cached for reranking")
    _add_common(p, model=False)

    p = sub.add_parser("delete", help="delete documents by id or source path")
    p.add_argument("targets", nargs="+", metavar="ID_OR_PATH")
    _add_common(p, model=False)

    for name, func in _COMMANDS.items():
        sub.choices[name].set_defaults(func=func)
    for module in _PLUGIN_COMMANDS:
        # Each plugin module adds its sub-command(s) and sets func=...; imported lazily at parse time.
        import_module(module, __package__).register(sub, _add_common)
    return parser


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    # force=True: importing colpali-engine may already have attached a root handler.
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr, force=True)
    if verbose < 2:
        for noisy in ("chromadb", "httpx", "transformers", "urllib3", "huggingface_hub"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        # transformers draws "Loading weights" bars on every model load; ours is the only bar.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _emit(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _encoder_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if getattr(args, "device", None):
        kwargs["device"] = args.device
    if getattr(args, "batch_size", None):
        kwargs["batch_size"] = args.batch_size
    if getattr(args, "max_visual_tokens", None):
        kwargs["max_num_visual_tokens"] = args.max_visual_tokens
    return kwargs


def _cmd_index(args: argparse.Namespace) -> int:
    from .index import DocPCIndex, IndexSettings

    given = {k: getattr(args, k) for k in ("mode", "strategy", "grid", "seed") if getattr(args, k) is not None}
    if args.pages is not None:
        given["pages"] = args.pages or None  # 0 stands for every page
    # Options not given keep the store's recorded values (a new store: the defaults).
    recorded = _recorded_index_settings(args.store)
    try:
        base = IndexSettings.from_dict(recorded) if recorded else IndexSettings()
        if "grid" not in given and ("pages" in given or given.get("mode") == "page"):
            base = replace(base, grid=None)  # the shape follows the new K (or there is no grid)
        settings = replace(base, **given) if given else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with DocPCIndex(
        args.store,
        model=args.model,
        settings=settings,
        writable=True,
        host=args.host,
        port=args.port,
        collection=args.collection,
        encoder_kwargs=_encoder_kwargs(args),
    ) as index:
        report = index.add_pdfs(
            args.paths,
            password=args.password,
            batch_size=args.commit_every,
            progress=not args.no_progress,
        )
    if args.json:
        _emit(report.to_dict())
    else:
        print(f"indexed {len(report.indexed)}, skipped {len(report.skipped)} unchanged, failed {len(report.failed)}")
        for failure in report.failed:
            print(f"  failed: {failure.reason}", file=sys.stderr)
    return EXIT_PARTIAL if report.failed else EXIT_OK


def _recorded_index_settings(store: Path) -> dict[str, Any] | None:
    """The index settings a store was created with, read from its manifest (None for a new store)."""
    try:
        data = json.loads((store / "store.json").read_text())
    except (OSError, ValueError):
        return None
    recorded = (data.get("settings") or {}).get("index")
    return recorded if isinstance(recorded, dict) else None


def _cmd_search(args: argparse.Namespace) -> int:
    from .index import DocPCIndex

    where = None
    if args.where:
        try:
            where = json.loads(args.where)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--where is not valid JSON: {exc}") from None
        if not isinstance(where, dict):
            raise UsageError("--where must be a JSON object")
    if not args.query.strip():
        raise UsageError("the query is empty")
    with DocPCIndex(
        args.store, model=args.model, host=args.host, port=args.port, collection=args.collection,
        encoder_kwargs=_encoder_kwargs(args),
    ) as index:
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
        _emit([r.to_dict() for r in results])
    else:
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


def _cmd_info(args: argparse.Namespace) -> int:
    from .index import DocPCIndex

    with DocPCIndex(args.store, host=args.host, port=args.port, collection=args.collection) as index:
        info = index.info()
    if args.json:
        _emit(info)
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            print(f"{key:<{width}}  {value}")
    return EXIT_OK


def _cmd_clear_cache(args: argparse.Namespace) -> int:
    from .index import DocPCIndex

    with DocPCIndex(args.store, host=args.host, port=args.port, collection=args.collection) as index:
        removed = index.clear_page_cache()
    if args.json:
        _emit({"removed_pages": removed})
    else:
        print(f"removed {removed} cached page embedding(s)")
    return EXIT_OK


def _cmd_delete(args: argparse.Namespace) -> int:
    from .index import DocPCIndex

    with DocPCIndex(args.store, writable=True, host=args.host, port=args.port, collection=args.collection) as index:
        ids = index.resolve_ids(args.targets)
        deleted = index.delete(ids)
    if args.json:
        _emit({"deleted": deleted, "ids": ids})
    else:
        print(f"deleted {deleted} document(s)")
    if deleted == 0:
        print(f"docpc: no stored document matches {', '.join(args.targets)}", file=sys.stderr)
        return EXIT_FATAL
    return EXIT_OK



_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "index": _cmd_index,
    "search": _cmd_search,
    "info": _cmd_info,
    "delete": _cmd_delete,
    "clear-cache": _cmd_clear_cache,
}

#: Modules that add more sub-commands: each has ``register(subparsers, add_common)``.
_PLUGIN_COMMANDS: tuple[str, ...] = (".cli_eval", ".cli_train")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``docpc``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    try:
        return int(args.func(args))
    except UsageError as exc:
        parser.error(str(exc))
    except StoreLockedError as exc:
        print(f"docpc: {exc}", file=sys.stderr)
        return EXIT_FATAL
    except DocPCError as exc:
        print(f"docpc: {exc}", file=sys.stderr)
        return EXIT_FATAL
    except KeyboardInterrupt:
        print("docpc: interrupted; committed documents are kept, re-run the same command to finish", file=sys.stderr)
        return 130
    return EXIT_FATAL  # pragma: no cover - parser.error exits


if __name__ == "__main__":
    sys.exit(main())
