"""``docpc meta set|unset``: edit your metadata keys on stored documents without encoding anything."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from docpc_retrievers.cli.common import EXIT_FATAL, EXIT_OK, UsageError, add_store_options, emit, require_store
from docpc_retrievers.cli.common import store_kwargs

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``meta`` with its ``set`` and ``unset`` actions."""
    p = sub.add_parser("meta", help="set or remove your metadata keys on stored documents (no re-encoding)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = actions.add_parser("set", help="set KEY=VALUE (text, or a number/boolean/list where it parses) or KEY:=JSON")
    s.add_argument("targets", nargs="+", metavar="ID_OR_PATH", help="document ids, PDF paths or folders")
    s.add_argument("--meta", action="append", required=True, metavar="KEY=VALUE", help="a key to set (repeatable)")
    add_store_options(s, model=False)
    s.set_defaults(func=run)
    u = actions.add_parser("unset", help="remove your metadata keys")
    u.add_argument("targets", nargs="+", metavar="ID_OR_PATH", help="document ids, PDF paths or folders")
    u.add_argument("--key", action="append", required=True, metavar="KEY", help="a key to remove (repeatable)")
    add_store_options(u, model=False)
    u.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Prints how many documents changed; 1 when no stored document matches the targets."""
    from docpc_retrievers.documents.user_metadata import parse_meta_option
    from docpc_retrievers.index import DocPCIndex

    values = parse_meta_option(args.meta) if args.action == "set" else {}
    unset = args.key if args.action == "unset" else []
    if any(not k.strip() for k in unset):
        raise UsageError("--key is empty")
    require_store(args)
    with DocPCIndex(args.store, writable=True, **store_kwargs(args)) as index:
        ids = index.resolve_ids(args.targets)
        changed = index.set_metadata(ids, values, unset=unset)
    if args.json:
        emit({"matched": len(ids), "changed": changed, "ids": ids})
    else:
        print(f"{changed} of {len(ids)} matching document{'' if len(ids) == 1 else 's'} changed")
    if not ids:
        print(f"docpc: no stored document matches {', '.join(args.targets)}", file=sys.stderr)
        return EXIT_FATAL
    return EXIT_OK
