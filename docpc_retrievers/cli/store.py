"""``docpc info``, ``docpc list``, ``docpc warm``, ``docpc clear-cache`` and ``docpc migrate``: look at a store and
what it holds, fill or drop what it can rebuild, upgrade it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_OK, UsageError, add_store_options, counting_bar, emit, explain_no_match, parse_where, require_store, store_kwargs,
    warm_store,
)

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``info``, ``list``, ``warm``, ``clear-cache`` and ``migrate``."""
    p = sub.add_parser("info", help="what a store holds and how it was built; --machine: this machine's kernel choices")
    add_store_options(p, model=False, store_required=False)
    p.add_argument("--machine", action="store_true",
                   help="report this machine instead: CPU, flags, the int8 kernels and threads timed here and chosen")
    p.add_argument("--retime", action="store_true", help="with --machine: time this machine's choices again now")
    p.set_defaults(func=run_info)
    p = sub.add_parser("list", help="the documents a store holds (id, source, title, pages, indexed time, your metadata)")
    add_store_options(p, model=False)
    p.add_argument("--where", help="only documents matching this Chroma metadata filter (JSON)")
    p.add_argument("--missing", action="store_true", help="only documents whose source file is gone")
    p.set_defaults(func=run_list)
    p = sub.add_parser("warm", help="fill this machine's cache for a store (vectors, first stages) before serving queries")
    add_store_options(p, model=False)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_warm)
    p = sub.add_parser("clear-cache", help="delete the page embeddings cached for reranking")
    add_store_options(p, model=False)
    p.set_defaults(func=run_clear_cache)
    p = sub.add_parser("migrate", help="convert a store written by docpc-retrievers 0.1 in place (resumable)")
    p.add_argument("store", type=Path, help="store directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    p.set_defaults(func=run_migrate)


def run_migrate(args: argparse.Namespace) -> int:
    """``docpc migrate``: format 1 -> the current format in place; a re-run finishes an interrupted one."""
    from docpc_retrievers.store.migrate import migrate_store

    with counting_bar("migrating", not args.no_progress) as progress:
        report = migrate_store(args.store, on_progress=progress)
    if args.json:
        emit(report.to_dict())
    else:
        print(f"migrated {report.converted} document(s) ({report.already} already converted); "
              f"freed {report.bytes_freed} bytes of local files")
    return EXIT_OK


def _size(n: float | None) -> str:
    """Bytes for people: ``512 B``, ``182.8 KiB``, ``5.2 MiB``."""
    n = float(n or 0)
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            break
        n /= 1024
    return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"


def _pair(value: Any) -> str:
    return "x".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def info_text(info: dict[str, Any]) -> str:
    """``docpc info`` for people: grouped lines, sizes in KiB/MiB, absent facts left out (``--json`` has them all)."""
    per_doc = info.get("bytes_per_document") or {}
    lines = [
        ("store", info["path"] + (f" on the Chroma server {info['server']}" if info.get("server") else " (embedded)")),
        ("collection", info.get("collection")),
        ("documents", f"{info['documents']} ({info['images_encoded']} images encoded, {info['vectors']} vectors)"),
        ("model", info.get("model") or "none recorded yet: the first document indexed records it"),
        ("fingerprint", info.get("model_fingerprint")),
        ("hub commit", info.get("model_revision")),
        ("family", f"{info.get('family')}, dim {info.get('dim')}"
         + (f", {info['max_num_visual_tokens']} visual tokens" if info.get("max_num_visual_tokens") else "")),
        ("mode", f"{info.get('mode')}: {info.get('strategy')} {info.get('pages') or 'all'} pages"
         + (f", grid {info['grid']} of {_pair(info.get('cell_size'))} px cells" if info.get("grid") else "")
         + (f", pool factor {info['pool_factor']}" if info.get("pool_factor") else "")
         + {True: ", grid previews kept", False: ", no grid previews (--no-grids)", None: ""}[info.get("grid_previews")]),
        ("on disk", f"{_size(info.get('bytes_on_disk'))} ({_size(per_doc.get('on_disk'))} per document; "
         f"cache {_size(info.get('bytes_cache'))}, grid previews {_size(info.get('bytes_grid_images'))})"),
        ("metadata", "your keys (documents): " + (", ".join(f"{k} ({n})" for k, n in (info.get("metadata_keys") or {}).items())
                                                  or "none")),
        ("page cache", f"{info.get('page_cache_pages', 0)} pages, {_size(info.get('page_cache_bytes'))}"),
    ]
    width = max(len(k) for k, v in lines if v not in (None, ""))
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines if v not in (None, ""))


def run_info(args: argparse.Namespace) -> int:
    """``docpc info``: a readable block (or the JSON object); ``--machine``: this machine's report instead."""
    from docpc_retrievers.index import DocPCIndex

    if args.machine or args.retime:
        from docpc_retrievers.cli.machine_report import machine_report, machine_report_text

        report = machine_report(retime=args.retime)
        if args.json:
            emit(report)
        else:
            print(machine_report_text(report))
        return EXIT_OK
    if args.store is None:
        raise UsageError("the following arguments are required: --store (or --machine for this machine's report)")
    require_store(args)
    with DocPCIndex(args.store, **store_kwargs(args)) as index:
        info = index.info()
    if args.json:
        emit(info)
    else:
        print(info_text(info))
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    """``docpc list``: one line per document, streamed (or a JSON array)."""
    from docpc_retrievers.documents.user_metadata import user_part
    from docpc_retrievers.index import DocPCIndex

    where = parse_where(args.where)
    require_store(args)
    count = 0
    with DocPCIndex(args.store, **store_kwargs(args)) as index:
        rows = []
        for doc in index.documents(where):
            missing = not doc.source or not Path(doc.source).exists()
            if args.missing and not missing:
                continue
            count += 1
            row = {
                "id": doc.id,
                "source": doc.source,
                "title": doc.metadata.get("title"),
                "file_name": doc.metadata.get("file_name"),
                "total_pages": doc.total_pages,
                "indexed_at": doc.metadata.get("indexed_at"),
                "missing": missing,
                "metadata": user_part(doc.metadata),
            }
            if args.json:
                rows.append(row)
                continue
            extra = " ".join(f"{k}={v}" for k, v in sorted(row["metadata"].items()))
            pages = f"{doc.total_pages} page{'' if doc.total_pages == 1 else 's'}"
            print(f"{doc.id}  {row['indexed_at'] or '-':<25}  {pages:>9}  {doc.title or '-'}")
            print(f"    {doc.source}{'  (missing)' if missing else ''}{'  ' + extra if extra else ''}")
        if not count and not args.missing:
            explain_no_match(index.store, where)
    if args.json:
        emit(rows)
    else:
        print(f"{count} document{'' if count == 1 else 's'}", file=sys.stderr)
    return EXIT_OK


def run_warm(args: argparse.Namespace) -> int:
    """``docpc warm``: every document's vectors and both first stages into the local cache (resumable)."""
    from docpc_retrievers.index import DocPCIndex

    require_store(args)
    with DocPCIndex(args.store, **store_kwargs(args)) as index:
        report = warm_store(index.store, not args.no_progress)
    if args.json:
        emit(report)
    else:
        print(f"warmed {report['documents']} document(s): fetched {report['fetched']} from Chroma "
              f"in {report['seconds']:.1f} s")
    return EXIT_OK


def run_clear_cache(args: argparse.Namespace) -> int:
    """``docpc clear-cache``: removes the rerank page cache."""
    from docpc_retrievers.index import DocPCIndex

    require_store(args)
    with DocPCIndex(args.store, **store_kwargs(args)) as index:
        removed = index.clear_page_cache()
    if args.json:
        emit({"removed_pages": removed})
    else:
        print(f"removed {removed} cached page embedding(s)")
    return EXIT_OK
